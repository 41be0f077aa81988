"""Deleting an agent or a session (SPEC section 9): its history stays, its future goes.

The agent (its name is free again) or the session (its key starts a new session) is marked deleted, its
queued and running turns are cancelled, and every open request of its sessions closes `abandoned`, all in
one transaction: nothing it asked for can be answered into a run afterwards. Open consoles drop the cards
once the deletion is committed. Deleting a session closes its requests unanswered, which takes the right to
answer them (`agents.prepare.refuse_unless_approver_of`); deleting an agent is an admin's.
"""

from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from agents import live, queue
from agents.models import Agent, Run, RunStatus, Session
from agents.outcomes import abandon_requests
from agents.prepare import refuse_unless_approver_of
from approvals.models import PendingRequest, RequestStatus
from console.models import Membership


def do_delete_agent(agent: Agent) -> None:
    with transaction.atomic():
        agent.soft_delete()
        assert agent.deleted_at is not None
        _end(Session.objects.filter(agent=agent), agent.runs.all(), agent.requests.all(), agent.deleted_at)


def do_delete_session(membership: Membership, session: Session) -> bool:
    """Delete a live session for `membership`'s member; False when it was deleted meanwhile. Raises RunRejected
    (403 `not_an_approver`) when one of its open requests is routed to a group the member is not in."""
    refuse_unless_approver_of(membership, session.requests.filter(status=RequestStatus.PENDING, answered_in=None))
    with transaction.atomic():
        now = timezone.now()
        if not Session.objects.live().filter(pk=session.pk).update(deleted_at=now):
            return False
        session.deleted_at = now
        sessions = Session.objects.filter(pk=session.pk)
        _end(sessions, session.runs.all(), session.requests.all(), now)
        # Its streams end once none of its turns is left, which they read from the database: woken, they read it
        # now (a session without a turn or request writes no event that would wake them).
        transaction.on_commit(lambda: live.wake_now(session.pk), robust=True)
    return True


def _end(sessions: QuerySet[Session], runs: QuerySet[Run], requests: QuerySet[PendingRequest], now: datetime) -> None:
    # The sessions' locks order this against a turn being recorded or finished now (agents/run_lifecycle.py): that
    # turn is cancelled below, or it sees the deletion and stops.
    list(sessions.select_for_update().values_list("pk"))
    for run in runs.filter(status__in=(RunStatus.QUEUED, RunStatus.RUNNING)):
        # A queued turn ends `cancelled` here and hands back the answers it carried (closed below); a
        # running one stops within a second and closes what it leaves open itself.
        queue.cancel(run)
    abandon_requests(requests, now)
