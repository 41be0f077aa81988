"""Decisions that need more than one person (SPEC section 14): the count of a quorum, and who may not approve.

A request whose requirement asks more than one approval keeps each approval as an `Approval` row until the one
that completes the quorum: that one decides the request through the one door (`approvals.decisions.decide`, which
writes its row in the decision's transaction, so of two completing approvals at once one decides and the other
finds it decided). Approvals that do not complete it are counted under the request's row lock: of two at once,
the second counts the first. A deny decides at once; approvals of other arguments (an operator edited them) are
kept for the record and not counted.
"""

from dataclasses import dataclass, field
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
from console.models import Membership


@dataclass
class Tally:
    """Where a request's quorum stands after an approval: `given` of `required` counted (`by` whom), the groups of
    `fromEach` none of them is from (`missing`); `mine`: the approval to write when it completes the quorum."""

    given: int
    required: int
    by: list[str]
    missing: list[str] = field(default_factory=list)
    repeated: bool = False
    mine: Approval | None = None
    counted: list[Approval] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.given >= self.required and not self.missing

    def wire(self) -> dict[str, Any]:
        return {"given": self.given, "required": self.required, "by": self.by}

    def waiting_for(self) -> str:
        """Who is still needed, as the card and the respond contract say it."""
        if self.missing:
            return "waiting for " + " and ".join(self.missing)
        more = self.required - self.given
        return f"waiting for {more} more approval{'s' if more != 1 else ''}"


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
            return _tally(tally.counted[:-1], require, from_each, repeated=True)
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
    counted = _counting(list(pending.approvals.all()), mine.arguments_digest)
    if any(given.by_id == mine.by_id for given in counted):
        return _tally(counted, require, from_each, repeated=True)
    tally = _tally([*counted, mine], require, from_each)
    if tally.complete:
        tally.mine = mine
    return tally


def _counting(given: list[Approval], arguments_digest: str) -> list[Approval]:
    """The approvals of `given` (in order) that count toward approving `arguments_digest`: those of these arguments
    since the last approval of other arguments (an edit starts the count again)."""
    counted: list[Approval] = []
    for approval in given:
        counted = [*counted, approval] if approval.arguments_digest == arguments_digest else []
    return counted


def standing(pending: PendingRequest) -> Tally | None:
    """Where `pending`'s quorum stands (the card, the API): the count on the arguments last approved; None for a
    request one answer decides."""
    require = pending.require or {}
    if not needs_several(pending.require):
        return None
    given = list(pending.approvals.all())
    counted = _counting(given, given[-1].arguments_digest) if given else []
    return _tally(counted, require, list(require.get("fromEach") or []))


def _groups_of(user: Any, tenant_id: int) -> set[str]:
    return set(ApproverGroup.objects.filter(tenant_id=tenant_id, members=user).values_list("name", flat=True))


def _tally(counted: list[Approval], require: dict[str, Any], from_each: list[str], *, repeated: bool = False) -> Tally:
    covered = {group for given in counted for group in given.groups}
    return Tally(
        given=len(counted),
        required=int(require.get("approvals", 1)),
        by=[given.username for given in counted],
        missing=[group for group in from_each if group not in covered],
        repeated=repeated,
        counted=counted,
    )
