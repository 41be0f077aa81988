"""The names of the request kinds (SPEC section 4), said once; no Django, so the lowest layer can read them.

Everything that lists the kinds reads this: the engine's `PendingCall.kind`, a definition's `KindRouting.kind`,
`request.answered`'s `kind`, the stored choices `approvals.models.RequestKind` (which refuses to load when its
values differ), the registry `approvals.kinds.KINDS` (one module per kind) and the inbox's kind filter.
"""

from typing import Literal, get_args

RequestKindName = Literal["approval", "client_tool", "input", "question", "plan", "continuation"]

# In the order they were added (the stored choices' order); `approvals.kinds.KINDS` has them in waiting order.
REQUEST_KINDS: tuple[RequestKindName, ...] = get_args(RequestKindName)
