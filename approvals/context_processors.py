"""What every console page shows of the approvals app."""

import time
from typing import Any

from django.http import HttpRequest

from approvals import push
from approvals.actions import HELD_UNTIL, notice_rows, notices
from approvals.models import HeldState
from console.tenancy import membership_of


def pending_requests(request: HttpRequest) -> dict[str, Any]:
    """The tenant's open request count, for the inbox badge in the navigation (`pending_label` as it reads; the
    badge tells console.js `pending_counted`, where counting stops)."""
    membership = membership_of(request)
    if membership is None:
        return {}
    count = push.pending_count(membership.tenant_id)
    return {"pending_count": count, "pending_label": push.pending_label(count), "pending_counted": push.PENDING_COUNTED}


def held_answers(request: HttpRequest) -> dict[str, Any]:
    """The member's answers held for their undo window, a notice each with its Undo, on whatever page they
    open next (an answer posted without JavaScript included)."""
    membership = membership_of(request)
    # Read only while this browser has an answer held (and a second past, for one that is being applied).
    held_until = request.session.get(HELD_UNTIL, 0) if hasattr(request, "session") else 0
    if membership is None or not membership.allows("operator") or held_until < time.time() - 1:
        return {}
    rows = notice_rows(membership.tenant_id).filter(membership=membership, state=HeldState.HELD)
    # A callable: read only by a page that shows them (base.html), not by every fragment rendered.
    return {"held_notices": lambda: notices(list(rows))}
