"""The request kinds (SPEC section 4), their names and what they are called, said once; no Django, so the lowest
layer can read them. A new kind's name is written here and nowhere else outside its own package.

Everything that lists the kinds reads this: the engine's `PendingCall.kind`, a definition's `KindRouting.kind`,
`request.answered`'s `kind`, the stored choices of `approvals.models.PendingRequest.kind` (`kind_choices`, a callable,
so a new kind needs no migration), the registry `approvals.kinds.KINDS` (one package per kind) and the inbox's kind
filter. What a kind is called (`KIND_NAMES`) is read by the agent form's and page's routing and by the labels.
"""

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, get_args

RequestKindName = Literal["approval", "client_tool", "input", "question", "plan", "continuation"]

# In the order they were added (the stored choices' order); `approvals.kinds.KINDS` has them in waiting order.
REQUEST_KINDS: tuple[RequestKindName, ...] = get_args(RequestKindName)


class RequestKind(StrEnum):
    """A request's stored kind: the names of `agents.request_kinds.REQUEST_KINDS`, in their order, as members the
    ORM and the code can name, labelled with each kind's one name (`KIND_NAMES`)."""

    APPROVAL = "approval"
    CLIENT_TOOL = "client_tool"
    INPUT = "input"
    QUESTION = "question"
    PLAN = "plan"
    CONTINUATION = "continuation"


@dataclass(frozen=True)
class KindNames:
    """What a kind is called. `label`: its one name, on every page that names a kind (the card's pill, the run
    page, the audit, the Kind filter); `routes`: the requests an agent's approvers select of this kind routes, as
    the agent form and page say it; `hosted_only`: only a hosted agent opens requests of this kind (an external
    agent's API opens none), so an external agent's form hides its select."""

    label: str
    routes: str
    hosted_only: bool = False


KIND_NAMES: dict[str, KindNames] = {
    "approval": KindNames("Approval", "Tool calls no tool or server routes"),
    "client_tool": KindNames("Client tool", "Client tool results", hosted_only=True),
    "input": KindNames("Input", "Inputs (a form the agent asks to fill)"),
    "question": KindNames("Question", "Questions"),
    "plan": KindNames("Plan", "Plans"),
    "continuation": KindNames("Go on?", "Going on past the model-call limit", hosted_only=True),
}

# A kind without its member or its names would fail on the first page that names it; fail at import instead.
if tuple(RequestKind) != REQUEST_KINDS or tuple(KIND_NAMES) != REQUEST_KINDS:
    raise RuntimeError(
        f"RequestKind {tuple(RequestKind)} and KIND_NAMES {tuple(KIND_NAMES)} differ from {REQUEST_KINDS}."
    )


def kind_choices() -> list[tuple[str, str]]:
    """The stored kinds with their labels: `PendingRequest.kind`'s choices, the inbox's kind filter."""
    return [(name, names.label) for name, names in KIND_NAMES.items()]
