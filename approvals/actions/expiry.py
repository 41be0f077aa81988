"""Closing overdue requests `expired` (SPEC section 4): the deadline sweep's action (`approvals.deadlines`,
`manage.py sweep_deadlines`), and an answer's when it arrives past the deadline before the sweep did."""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agents.actions import continue_session
from agents.outcomes import record_closings
from approvals.actions.settling import is_external, settle_closed
from approvals.decisions import Actor, Decision, announced_together, decide
from approvals.models import PendingRequest, RequestStatus

log = logging.getLogger(__name__)


def expire_due(now: datetime | None = None) -> list[PendingRequest]:
    """Close every pending, unanswered request whose deadline has passed; start the continuations."""
    now = now or timezone.now()
    related = ("session__tenant", "session__agent", "run__version", "agent")  # what each closing and receipt read
    due = PendingRequest.objects.open().select_related(*related).filter(expires_at__lte=now)
    # Each closing is a conditional update committed on its own: a sweep holding the locks of up to 500 requests
    # until the last one would deadlock with a turn closing or answering some of them in another order.
    deadline = Decision(Actor.closing(RequestStatus.EXPIRED), closing=RequestStatus.EXPIRED)
    with announced_together():  # one push per tenant, its waiters woken once external runs are settled
        expired = [pending for pending in due[:500] if _closed(pending, deadline, now)]
        record_closings(expired)
        settle_closed(expired)
    for session in {p.session_id: p.session for p in expired if not is_external(p)}.values():
        continue_session(None, session)
    return expired


def _closed(pending: PendingRequest, deadline: Decision, now: datetime) -> bool:
    """Whether `pending` closed expired now. A request whose closing fails is logged and left to the next sweep,
    nothing of it written: the sweep closes every tenant's requests, and one must not keep the others open."""
    try:
        with transaction.atomic():
            return decide(pending, deadline, now)
    except Exception:
        log.exception("the overdue request %s could not be closed", pending.pk)
        return False
