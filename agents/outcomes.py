"""Storing a turn's outcome (`finish_run`): status, output, the requests it opens, the session's conversation
and the event log, in one transaction; and closing requests no run will carry (`abandon_requests`,
`record_closings`), each in the log of the run that asked.
"""

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import F, QuerySet
from django.tasks import TaskResultStatus
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents import checkpoints
from agents.engine import TurnBlocked, TurnError
from agents.events import EventLog
from agents.models import Run, RunStatus, Session
from agents.payloads import BlockedError, ErrorInfo, RunAwaiting, RunBlocked, RunCompleted, RunFailed, SessionError
from agents.requirements import next_step_at
from agents.run_lifecycle import (
    ExecutionResult,
    StartedRun,
    calls_with_side_effects,
    record_cancelled,
    record_terminated,
)
from agents.signals import requests_opened
from approvals.decisions import Actor, Decision, announced_together, decide, hand_back, record_unasked
from approvals.kinds import KINDS, awaiting_status
from approvals.models import PendingRequest, RequestStatus
from console import metrics
from console.inserts import insert_rows
from console.sql import Prepared, PreparedUpdate, update_together

logger = logging.getLogger(__name__)


NOT_STORED = TurnError(
    "outcome_not_stored",
    "The turn ended, but its outcome could not be stored: the run failed without its output, its policy records"
    " and the events of the turn not written yet.",
)


def finish_run(started: StartedRun, result: ExecutionResult, task: DBTaskResult | None = None) -> list[PendingRequest]:
    """Store the turn's outcome: status, output, pending requests, conversation and the event log; with `task`, the
    queued run's task (`agents.queue.run_claimed`) ends with it, in the same statement on PostgreSQL. An outcome the
    database refuses (a value too big, one it cannot hold) or that is not JSON ends the run `failed`
    (`outcome_not_stored`) rather than leave it `running` and its caller with a 500."""
    run = started.run
    opened: list[PendingRequest] = []
    kept, written = max(started.before_turn, started.log.flushed), started.log.flushed
    try:
        try:
            with transaction.atomic():
                ended = _store_outcome(started, result, opened, task=task)
        except (DatabaseError, TypeError, ValueError):
            logger.exception("Run %s: its outcome could not be stored; it ends failed", run.id)
            opened.clear()
            ran = _forget_outcome(started, kept, written)
            with transaction.atomic():
                ended = _store_outcome(started, ExecutionResult(None, NOT_STORED), opened, ran, task=task)
    except _Reclaimed:
        logger.warning("Run %s was reclaimed while its turn ran; this outcome is dropped", run.id)
        run.refresh_from_db()
        return []
    if task is not None:  # committed: as django-tasks-db's `set_successful` leaves it
        for name, value in ended.items():
            setattr(task, name, value)
    started.log.publish_rest()
    metrics.run_ended(run.tenant_id, started.prepared.agent.name, run.status)
    if opened:
        requests_opened.send(Run, requests=opened)
    return opened


class _Reclaimed(Exception):
    pass


def _forget_outcome(started: StartedRun, kept: int, written: int) -> set[str]:
    """Put the run, its session and its log back as the database has them after a turn's outcome rolled back:
    only the first `kept` events of the log remain (`written` of them stored), and none of its records. The calls
    with side effects the turn ran, as its log said before it forgot them."""
    run, log = started.run, started.log
    ran = calls_with_side_effects(run, log)
    refused_input = run.message is None  # a policy refused it: not kept, as in a stored outcome
    run.refresh_from_db(fields=["output", "usage", "error", "message", "records"])
    run.message = None if refused_input else run.message
    if run.session is not None:  # the turn's conversation: its checkpoint would copy it
        run.session.refresh_from_db(fields=["conversation"])
    log.forget_after(kept, written)
    started.records.clear()
    return ran


def _session_ended(session: Session) -> bool:
    """Whether the session or its agent is deleted, read under the session's lock (taken here, as the
    deletions take it: a deletion running now is either seen whole or waits for this turn's outcome)."""
    locked: Any = _LOCKED.first(session=session.pk)
    return locked is None or locked.deleted_at is not None or locked.agent_deleted_at is not None


# The session's deletion and its agent's, under the session's lock: every turn's end that leaves requests open reads
# them (issue 56: compiled once).
_LOCKED = Prepared(
    lambda session: (
        Session.objects.select_for_update(of=("self",))
        .filter(pk=session)
        .annotate(agent_deleted_at=F("agent__deleted_at"))
        .only("deleted_at")
    ),
    session=int,
)


def abandon_requests(
    requests: QuerySet[PendingRequest], now: datetime, current: EventLog | None = None
) -> list[PendingRequest]:
    """Close the still pending ones of `requests` `abandoned`, with an answer stored on them or not: their
    session or agent is deleted, so no run will ever carry them (in the caller's transaction). Each closing goes
    into the log of the run that asked, after its last event (`current` is the log of a run finishing now, whose
    events are not all stored)."""
    # Locked before the first closing writes its receipt under the tenant's chain lock (called in a transaction).
    waiting = requests.filter(status=RequestStatus.PENDING).select_related("run").select_for_update(of=("self",))
    gone = Decision(Actor.closing(RequestStatus.ABANDONED), closing=RequestStatus.ABANDONED, answered_too=True)
    with announced_together():  # every inbox drops them in one push once committed
        abandoned = [pending for pending in waiting.order_by("opened_at", "id") if decide(pending, gone, now)]
        record_closings(abandoned, current)
    return abandoned


def record_closings(requests: list[PendingRequest], current: EventLog | None = None) -> None:
    """`record_terminated` for requests just closed, each into the log of the run that asked, after its last event
    (`current` is the log of a run finishing now, whose events are not all stored)."""
    logs = {current.run.pk: current} if current is not None else {}
    for pending in requests:
        if pending.run_id not in logs:
            logs[pending.run_id] = EventLog.resume(pending.run)
        record_terminated(logs[pending.run_id], pending)
    for log in logs.values():
        if log is not current:
            log.flush()


def _store_outcome(
    started: StartedRun,
    result: ExecutionResult,
    opened: list[PendingRequest],
    ran: set[str] | None = None,
    task: DBTaskResult | None = None,
) -> dict[str, Any]:
    """`ran`: the calls with side effects the turn ran, when its log no longer has their events. What the task's row
    was given (nothing without a task)."""
    run, log, prepared = started.run, started.log, started.prepared
    # The turn's last events go to the session's streams once committed, before the wake their flush asks for (hooks
    # run in order): with nothing left unpublished, no stream is woken to read the database for them.
    transaction.on_commit(log.publish_rest, robust=True)
    run.lease_expires_at = run.queued_input = None
    run.finished_at = timezone.now()
    outcome = result.outcome
    # A turn that would leave requests open (new ones, or answers handed back) checks that its session and
    # agent still exist, under the session's lock first, as the deletions take it (agents/actions/deletion.py).
    gone = run.session is not None and (outcome is None or bool(outcome.pending)) and _session_ended(run.session)
    if result.cancelled:
        run.status = RunStatus.CANCELLED
        record_cancelled(log)
    elif isinstance(result.error, TurnBlocked):
        run.status = RunStatus.BLOCKED
        run.error = result.error.error
        if run.error["point"] == "input":
            run.message = None  # what the policy refused is not kept
        log.record(RunBlocked(error=BlockedError(**run.error)))
    elif outcome is None:
        assert result.error is not None
        run.status = RunStatus.FAILED
        run.error = {"code": result.error.code, "message": result.error.message}
        _record_failed(log, run.error)
    elif outcome.pending and run.session is None:
        # A sessionless run cannot be answered: its requests would have nowhere to go.
        run.status = RunStatus.FAILED
        run.error = {
            "code": "session_required",
            "message": (
                "The agent asked for an approval, an input or a client tool's result, which a run without a session"
                " (a replay, an API run without a sessionId) cannot wait for: run it in a session to answer."
            ),
        }
        _record_failed(log, run.error)
    else:
        run.usage = outcome.usage
        if outcome.message is not None:
            run.message = outcome.message  # as the policy's `input` verdict left it
        deadline = prepared.version.definition.request_deadline_seconds
        expires_at = run.finished_at + timedelta(seconds=deadline) if deadline else None
        definition, requester = prepared.version.definition, None
        for call in outcome.pending:
            routing = definition.routing_for(call.kind, call.tool_name, call.policy)
            if routing.require is not None and requester is None:
                requester = _requester(run)
            pending = PendingRequest(
                tenant=run.tenant,
                agent=run.agent,
                session=run.session,
                run=run,
                kind=call.kind,
                tool_name=call.tool_name,
                call_id=call.call_id,
                arguments=call.arguments,
                message=call.message,
                requested_schema=call.requested_schema,
                engine_state=call.engine_state,
                policy=call.policy,
                approvers=routing.approvers,
                require=routing.require,
                escalation=routing.escalation,
                escalation_at=next_step_at(routing.escalation, run.finished_at, 0),
                requested_by_id=requester or None,
                expires_at=expires_at,
            )
            opened.append(pending)
            log.record(KINDS[call.kind].requested(pending), agent_id=pending.asker_id)
        if opened:
            kinds = {p.kind for p in opened}
            run.status = awaiting_status(kinds)
            log.record(RunAwaiting(status=run.status, pendingRequests=[p.wire() for p in opened]))
        else:
            run.status = RunStatus.COMPLETED
            run.output = outcome.output
            log.record(RunCompleted(output=outcome.output))
        if run.session is not None and outcome.conversation is not None:
            run.session.conversation = outcome.conversation
    handed_back = outcome is None and not isinstance(result.error, TurnBlocked)
    if handed_back:
        # The answers this run carried were not consumed: keep them for the next turn of the session,
        # except that a call with side effects that already ran is never run again.
        hand_back(run, calls_with_side_effects(run, log) if ran is None else ran)
    if opened:
        insert_rows(opened)
    if gone:
        # The session or agent was deleted while this turn ran: what it leaves open closes as the deletion
        # closed the rest.
        assert run.session is not None
        abandon_requests(run.session.requests.all(), run.finished_at, current=log)
        opened.clear()
    # Only the holder of the run's lease finishes it: a run reclaimed meanwhile (its lease ran out)
    # was finished or queued again by the reclaimer, and this outcome rolls back.
    run.records = started.records
    fields = ["status", "output", "usage", "error", "finished_at", "lease_expires_at", "queued_input", "message"]
    fields += ["records"] if run.records else []
    # The session's first turn (no turn ended in it before, not a fork's copy) leaves open only what it opened.
    session = run.session
    first = session is not None and session.last_run_id is None and session.forked_from_checkpoint_id is None
    # The run's outcome and its session's row (its last turn, and the conversation the turn left), in one statement:
    # the session's row first, as the deletions and the last answer's continuation take it (console.sql).
    also = []
    if session is not None:
        ended: dict[str, Any] = {"last_run": run, "updated_at": run.finished_at}
        if outcome is not None and outcome.conversation is not None:
            ended["conversation"] = session.conversation
        also.append(_SESSION.bind(ended, session=session.pk))
    run_row = _HELD.bind({name: getattr(run, name) for name in fields}, run=run.pk, worker=run.worker_id)
    task_ended: dict[str, Any] = {}
    if task is None:
        written = update_together(run_row, *also)
    else:
        # The task's end last, after its run's: the keeper reclaiming a run writes the two in that order too.
        task_ended = _task_ended(run.status)
        written = update_together(_TASK_RUNNING.bind(task_ended, task=task.pk), *also, run_row)
    if not written:
        raise _Reclaimed
    if session is not None:
        session.last_run, session.updated_at = run, run.finished_at
    # What it opened is all the session has open when nothing else was left open as it started (nor since: one
    # turn at a time) and it handed no answer back.
    only_opened = (first or prepared.left_open == []) and not handed_back
    checkpoints.record_checkpoint(run, first=first, open_requests=opened if only_opened else None)
    log.flush()
    record_unasked(run, log.stored)
    return task_ended


# The rows a turn's outcome writes, their conditions compiled once (issue 56): its session's; its run's while its
# turn is held by this worker (`RunQuerySet.held_by`); its task's while running.
_SESSION = PreparedUpdate(lambda session: Session.objects.filter(pk=session), session=int)
_HELD = PreparedUpdate(
    lambda run, worker: Run.objects.held_by(Run(pk=run, worker_id=worker)), run=uuid.UUID, worker=str
)
_TASK_RUNNING = PreparedUpdate(
    lambda task: DBTaskResult.objects.filter(pk=task, status=TaskResultStatus.RUNNING), task=uuid.UUID
)


def _task_ended(status: str) -> dict[str, Any]:
    """What django-tasks-db's `set_successful` writes of a task that returned its run's `status`."""
    ended = {"status": TaskResultStatus.SUCCESSFUL, "finished_at": timezone.now(), "return_value": status}
    return ended | {"exception_class_path": "", "traceback": ""}


def _record_failed(log: EventLog, error: dict[str, str]) -> None:
    """`run.failed`, and the SDK's `session.error` alongside (its `errorType` is the error's code)."""
    log.record(RunFailed(error=ErrorInfo(**error)))
    log.record(SessionError(errorType=error["code"], message=error["message"]))


def _requester(run: Run) -> int:
    """Who asked for the requests `run` opens (separation of duties, SPEC section 14): whoever asked for those it
    carries when it is a continuation (its own author answered them), else the member who started it; 0: nobody."""
    carried = PendingRequest.objects.filter(answered_in=run).values_list("requested_by_id", flat=True)[:1]
    for requester in carried:
        return requester or 0
    return run.created_by_id or 0
