"""Closing overdue requests `expired` (SPEC section 4): the deadline sweep's action (`approvals.deadlines`,
`manage.py sweep_deadlines`), and an answer's when it arrives past the deadline before the sweep did."""

from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from agents.actions import continue_session
from agents.outcomes import record_closings
from approvals.actions.external import is_external, settle_closed
from approvals.models import PendingRequest, RequestStatus
from approvals.push import notify_requests_closed


def expire_due(now: datetime | None = None) -> list[PendingRequest]:
    """Close every pending, unanswered request whose deadline has passed; start the continuations."""
    now = now or timezone.now()
    related = ("session__tenant", "session__agent", "run__version", "agent")  # what each closing and receipt read
    due = PendingRequest.objects.open().select_related(*related).filter(expires_at__lte=now)
    # Each closing is a conditional update committed on its own: a sweep holding the locks of up to 500 requests
    # until the last one would deadlock with a turn closing or answering some of them in another order.
    expired = [pending for pending in due[:500] if pending.close(RequestStatus.EXPIRED, now)]
    record_closings(expired)
    for tenant_id in {p.tenant_id for p in expired}:
        ids = [str(p.id) for p in expired if p.tenant_id == tenant_id]
        transaction.on_commit(partial(notify_requests_closed, tenant_id, ids))
    settle_closed(expired)
    for session in {p.session_id: p.session for p in expired if not is_external(p)}.values():
        continue_session(None, session)
    return expired
