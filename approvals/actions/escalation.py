"""Escalation (SPEC section 14): the steps of a request nobody decided in time, taken by the deadline sweep.

A request keeps its steps (`PendingRequest.escalation`), the next one's index and when it is due
(`escalation_step`, `escalation_at`), so a restart loses no step: whichever sweep finds it due takes it, by a
conditional update on the step it read (of two sweepers, one takes it). A `to` step adds groups to those who may
answer; they hear of it as of a new request (push, webhook, and their digests list it, counting from the step:
`PendingRequest.widened`). A `then` step ends the request through the one door, decided by `escalation:<step>`:
`deny` or `approve` as an answer (a request of a kind that takes no yes or no closes `expired`), `expire` as a
deadline would.
"""

from datetime import datetime
from functools import partial

from django.db import transaction
from django.utils import timezone

from agents.actions import continue_session
from agents.outcomes import record_closings
from agents.requirements import joined, next_step_at
from approvals.actions.settling import is_external, settle, settle_closed
from approvals.decisions import Actor, Decision, announced_together, decide
from approvals.kinds import KINDS, SELECTABLE
from approvals.models import PendingRequest, RequestStatus
from approvals.push import notify_request_escalated
from approvals.responses import Response

MOST_AT_ONCE = 500


def escalate_due(now: datetime | None = None) -> list[PendingRequest]:
    """Take every escalation step that is due, oldest first; the requests whose step was taken."""
    now = now or timezone.now()
    related = ("session__tenant", "session__agent", "run__version", "agent", "tenant")
    due = PendingRequest.objects.open().select_related(*related).filter(escalation_at__lte=now)
    taken: list[PendingRequest] = []
    ended: list[PendingRequest] = []  # answered by a step (deny, approve)
    closed: list[PendingRequest] = []  # closed unanswered by a step (expire)
    with announced_together():
        for pending in due.order_by("escalation_at")[:MOST_AT_ONCE]:
            step, steps = pending.escalation_step, pending.escalation or []
            if step >= len(steps):
                continue  # a step past the last: nothing left to take
            then = steps[step].get("then")
            if then is None:
                if _widen(pending, step, now):
                    taken.append(pending)
            else:
                # An external request's answer is stored and settled at once, as a person's is (`answer_request`).
                with transaction.atomic():
                    if not _end(pending, step, then, now):
                        continue
                    if pending.answer is not None and is_external(pending):
                        settle(pending)
                taken.append(pending)
                (ended if pending.answer is not None else closed).append(pending)
        record_closings(closed)
        settle_closed(closed)
    for session in {p.session_id: p.session for p in ended + closed if not is_external(p)}.values():
        continue_session(None, session)
    return taken


def _widen(pending: PendingRequest, step: int, now: datetime) -> bool:
    """Add the step's groups to those who may answer, and move to the next step; False when another sweep took it
    (or the request was decided) meanwhile."""
    steps = pending.escalation or []
    added = [g for g in steps[step].get("to") or [] if g not in pending.groups] if pending.approvers else []
    # A request routed to anyone who can answer stays so: groups added to "anyone" change nothing.
    changes = {
        "approvers": joined([*pending.groups, *added]),
        "escalation_step": step + 1,
        "escalation_at": next_step_at(steps, pending.opened_at, step + 1),
    }
    if added:  # when they got it: their members' digests list it from then (approvals/digests.py)
        changes |= {"widened": {**(pending.widened or {}), **dict.fromkeys(added, now.isoformat())}, "widened_at": now}
    with transaction.atomic():
        if not PendingRequest.objects.open().filter(pk=pending.pk, escalation_step=step).update(**changes):
            return False
        for name, value in changes.items():
            setattr(pending, name, value)
        transaction.on_commit(partial(notify_request_escalated, pending))
    return True


def _end(pending: PendingRequest, step: int, then: str, now: datetime) -> bool:
    """End the request as the step says, through the one door."""
    actor = Actor.escalation(step + 1)
    if then == "expire" or pending.kind not in SELECTABLE:
        return decide(pending, Decision(actor, closing=RequestStatus.EXPIRED), now)
    done = {"deny": "denied", "approve": "approved"}[then]
    said = f"Nobody decided it within {(pending.escalation or [])[step]['after']}: its escalation {done} it."
    wire = Response(request_id=pending.pk, approved=then == "approve", reason=said)
    answer = KINDS[pending.kind].answer(pending, wire.model_dump(mode="json", by_alias=True), None)
    return decide(pending, Decision(actor, answer), now)
