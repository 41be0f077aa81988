"""An external agent's request once it is open (SPEC section 12): settled once decided (its own run carries the
answer and completes), closed unanswered (its run completes), cancelled by the agent's side, and the outcome of the
approved call reported by it. Opening one is `approvals.actions.external`."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.events import EventLog
from agents.models import Run, RunStatus
from agents.payloads import Payload, RunCompleted, ToolExecutionComplete, ToolExecutionStart
from agents.run_lifecycle import cancel_waiting
from approvals.decisions import carry
from approvals.external_wire import RESULT_LIMIT, RequestRefused, TooLarge, check_size, too_large
from approvals.kinds import KINDS
from approvals.models import PendingRequest, RequestStatus
from console.models import Membership


def is_external(pending: PendingRequest) -> bool:
    return bool((pending.engine_state or {}).get("external"))


def settle(pending: PendingRequest) -> None:
    """An external request whose answer was just stored: its own run carries the answer (the SDK's completion,
    `request.answered`, a remembered rule) and completes. Its waiters were woken with the answer's push."""
    now = timezone.now()
    with transaction.atomic():
        if not carry([pending], pending.run, now):
            return
        log = EventLog.resume(pending.run)
        KINDS[pending.kind].record_carried(pending, log)
        _complete(pending.run, log, now)
        log.flush()


def settle_closed(requests: list[PendingRequest]) -> None:
    """External requests just closed unanswered (expired): their runs complete (the closing was recorded)."""
    now = timezone.now()
    for pending in requests:
        if is_external(pending):
            with transaction.atomic():
                log = EventLog.resume(pending.run)
                _complete(pending.run, log, now)
                log.flush()


def _complete(run: Run, log: EventLog, now: datetime) -> None:
    """The external run completes once none of its requests waits."""
    if run.requests.filter(status=RequestStatus.PENDING).exists():
        return
    if Run.objects.filter(pk=run.pk, status__in=[k.awaiting for k in KINDS.values()]).update(
        status=RunStatus.COMPLETED, finished_at=now
    ):
        run.status, run.finished_at = RunStatus.COMPLETED, now
        log.record(RunCompleted(output=None))


def cancel_request(membership: Membership, user: Any, pending: PendingRequest) -> None:
    """The agent's side gives up on its request (`DELETE /api/requests/{id}`): it closes `cancelled` and leaves
    every inbox; its run ends cancelled. RequestRefused 409 `request_closed` once decided or closed."""
    _refuse_unless_its_agent(membership, pending)
    if pending.answer is not None or pending.status != RequestStatus.PENDING:
        raise RequestRefused(409, "request_closed", f"The request was {_what_became(pending)} already.")
    if not cancel_waiting(pending.run, user):
        raise RequestRefused(409, "request_closed", "The request was decided or closed meanwhile.")
    pending.refresh_from_db()


def report_outcome(
    membership: Membership, user: Any, pending: PendingRequest, success: bool, result: Any, error: str | None
) -> None:
    """What the tool did once approved (`POST /api/requests/{id}/outcome`): `tool.execution_start` and
    `tool.execution_complete` in the request's run, once. RequestRefused 409 before approval or a second time."""
    _refuse_unless_its_agent(membership, pending)
    try:
        check_size(result, "result", RESULT_LIMIT)
    except TooLarge as over:
        raise too_large(over) from None
    answer = pending.answer or {}
    if not KINDS[pending.kind].gates_call or not answer.get("approved") or pending.status != RequestStatus.ANSWERED:
        raise RequestRefused(409, "request_not_approved", "Only an approved call has an outcome to report.")
    if not record_call(pending, success, result, error):
        raise RequestRefused(409, "outcome_reported", "The outcome of this call was reported already.")


def record_call(
    pending: PendingRequest, success: bool, result: Any, error: str | None, events: Sequence[Payload] = ()
) -> bool:
    """Record what the approved call of an external request did, once: `tool.execution_start` with the arguments it
    ran with (the approver's edit, else the request's), `events` (a gateway's `post_tool_call` verdicts), then
    `tool.execution_complete`. False when it was recorded already."""
    override = (pending.answer or {}).get("overrideArguments")
    arguments = override if override is not None else pending.arguments
    with transaction.atomic():
        locked = PendingRequest.objects.select_for_update().get(pk=pending.pk)
        state = locked.engine_state or {}
        if state.get("external", {}).get("outcome") is not None:
            return False
        log = EventLog.resume(pending.run)
        log.record(ToolExecutionStart(toolCallId=pending.call_id, toolName=pending.tool_name, arguments=arguments))
        for event in events:
            log.record(event)
        log.record(
            ToolExecutionComplete.of(pending.call_id, value=result, error=None if success else (error or "failed"))
        )
        state["external"] = {
            **state.get("external", {}),
            "outcome": {"success": success, "at": timezone.now().isoformat()},
        }
        PendingRequest.objects.filter(pk=pending.pk).update(engine_state=state)
        pending.engine_state = state
        log.flush()
    return True


def _refuse_unless_its_agent(membership: Membership, pending: PendingRequest) -> None:
    """Only the agent's side speaks for its request: the member who opened it, or an admin."""
    if not is_external(pending):
        detail = "The request was opened by a hosted run: its run cancels it, and reports what its tools did."
        raise RequestRefused(409, "not_external", detail)
    if pending.run.created_by_id != membership.user_id and not membership.allows("admin"):
        raise RequestRefused(403, "forbidden", "Only the member who opened the request, or an admin, speaks for it.")


def _what_became(pending: PendingRequest) -> str:
    return "decided" if pending.answer is not None else str(pending.status)
