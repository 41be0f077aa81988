"""Decisions that need more than one person (SPEC section 14): approvals counted toward a quorum (where one stands:
approvals/tallies.py), and who may not approve.

A request whose requirement asks more than one approval keeps each approval as an `Approval` row until the one
that completes the quorum: that one decides the request through the one door (`approvals.decisions.decide`, which
writes its row in the decision's transaction, so of two completing approvals at once one decides and the other
finds it decided). Approvals that do not complete it are counted under the request's row lock: of two at once,
the second counts the first. A deny decides at once; approvals of other arguments (an operator edited them) are
kept for the record and not counted.
"""

from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction

from agents.events import EventLog
from agents.models import Run
from agents.payloads import ApprovalGiven, RequestApprovalRecorded
from agents.requirements import needs_several, self_approval

if TYPE_CHECKING:
    from approvals.decisions import Actor

from approvals.models import Approval, ApproverGroup, PendingRequest, RequestStatus
from approvals.push import notify_approvals
from approvals.receipts import digest
from approvals.responses import ResponseRefused
from approvals.tallies import Tally, counting, tallied
from console.models import Membership


def counts_toward_quorum(pending: PendingRequest, answer: dict[str, Any]) -> bool:
    """Whether `answer` is an approval that the request's requirement does not let decide alone."""
    return needs_several(pending.require) and answer.get("approved") is True


def refuse_self_approval(pending: PendingRequest, actor: "Actor") -> None:
    """403 `not_an_approver` with `reason: "self_approval"` when the requirement separates duties and the actor asked,
    or stands in for the one who did."""
    people = (getattr(actor.user, "pk", None), getattr(actor.on_behalf_of, "pk", None))
    if self_approval(pending.require, pending.requested_by_id, *people):
        detail = "You asked for this request (you started its run or opened it): someone else must approve it."
        raise ResponseRefused("not_an_approver", detail, 403, reason="self_approval")


def approve_toward(
    membership: Membership, actor: "Actor", pending: PendingRequest, answer: dict[str, Any], now: datetime
) -> Tally:
    """Count `actor`'s (of `membership`) approval `answer` toward `pending`'s quorum: stored at once when it does not
    complete it; when it does, returned unsaved (`mine`) for the decision to write. `repeated`: they approved these
    arguments before, nothing changed. Raises PendingRequest.DoesNotExist when the request was decided meanwhile."""
    user = membership.user
    counts_for = actor.on_behalf_of or user  # a delegate's approval counts for the away member's groups
    ran = answer.get("overrideArguments")
    arguments_digest = digest(ran if isinstance(ran, dict) else pending.arguments or {})
    require = pending.require or {}
    from_each = list(require.get("fromEach") or [])
    routed = set(pending.groups + from_each)
    mine_groups = sorted(_groups_of(counts_for, membership.tenant_id) & routed) if routed else []
    mine = Approval(
        request=pending,
        by=user,
        username=user.username,
        on_behalf_of=actor.on_behalf_of,
        at=now,
        arguments_digest=arguments_digest,
        answer=answer,
        groups=mine_groups,
        via=actor.via or "",
        auth_method=actor.decider.auth or "",
    )
    # An approval that completes the quorum as read now is written with the decision, whose conditional update lets
    # one of two such approvals decide (no lock needed); one that does not is counted under the request's row lock.
    tally = _with(pending, mine, require, from_each)
    if tally.repeated or tally.complete:
        return tally
    with transaction.atomic():
        # The request's row lock: approvals of one request are counted one at a time (SQLite: the write lock).
        locked = PendingRequest.objects.select_for_update().filter(
            pk=pending.pk, status=RequestStatus.PENDING, answer__isnull=True, answered_in=None
        )
        if not locked.exists():
            raise PendingRequest.DoesNotExist
        tally = _with(pending, mine, require, from_each)
        if tally.repeated or tally.complete:
            return tally
        try:
            with transaction.atomic():
                mine.save(force_insert=True)
        except IntegrityError:  # the same person's second click, committed in between
            return tallied(tally.counted[:-1], require, from_each, repeated=True)
        _record(pending, tally)
        transaction.on_commit(partial(notify_approvals, pending))
        return tally


def _record(pending: PendingRequest, tally: Tally) -> None:
    """`request.approval_recorded` on the run that asked, after its last event (the run's row lock: approvals of
    its other requests append one at a time)."""
    run = Run.objects.select_for_update().get(pk=pending.run_id)
    log = EventLog.resume(run)
    recorded = RequestApprovalRecorded(
        requestId=str(pending.id),
        by=tally.by[-1],
        toolCallId=pending.call_id if pending.tool_name else None,
        toolName=pending.tool_name or None,
        approvals=[ApprovalGiven(**given.wire()) for given in tally.counted],
        required=tally.required,
        waitingFor=tally.missing or None,
    )
    log.record(recorded, agent_id=pending.asker_id)
    log.flush()


def _with(pending: PendingRequest, mine: Approval, require: dict[str, Any], from_each: list[str]) -> Tally:
    """The quorum as it stands with `mine` (unsaved) counted; `repeated` (without it) when its giver approved these
    arguments before; `mine` set on it when it completes the quorum."""
    counted = counting(list(pending.approvals.all()), mine.arguments_digest)
    if any(given.by_id == mine.by_id for given in counted):
        return tallied(counted, require, from_each, repeated=True)
    tally = tallied([*counted, mine], require, from_each)
    if tally.complete:
        tally.mine = mine
    return tally


def _groups_of(user: Any, tenant_id: int) -> set[str]:
    return set(ApproverGroup.objects.filter(tenant_id=tenant_id, members=user).values_list("name", flat=True))
