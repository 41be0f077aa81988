"""Queued runs (SPEC section 4, `Prefer: respond-async`; section 7): putting a run on its lane's queue, and the task
a worker runs for it.

- `start_queued` starts a run queued: `enqueue`, inside `record_run`'s transaction, keeps on the run
  what its turn needs (`queued_input`: instructions, documents, the ids of the requests it carries: their answers are on
  them, `agents.run_lifecycle.carried_answers`) and puts a task on the lane's queue: Django's tasks framework with the
  django-tasks-db backend, a row in the same database and transaction. Workers claim it (agents/claiming.py,
  agents/workers.py) and run `execute_queued`.
- A run queued in a process whose pool has an idle thread for its lane is handed to that thread (agents/seats.py): the
  queueing transaction claims it (its task written `RUNNING`, the run leased to the thread, once its lane is
  counted under the lane's lock as a claim counts it: agents/lane_limits.py), and once committed the thread runs the
  turn from the started run in hand, reading nothing again. No claim, no wake-up, no poll: the continuation of an
  answer starts the moment the answer commits.
- The continuation of the last answer is queued with the answer in one transaction (`queue_continuation`), nothing
  of it recorded: handed to a seat, it is begun once committed; claimed, its worker begins it (`load_started`,
  `agents.run_lifecycle.begin_queued`).
- A turn that fails in a way that may pass is queued again (`retry`), as the keeper (agents/keeper.py) queues again
  a run whose process died; `cancel` ends a queued run here or asks its worker to stop its turn.
- `execute_queued` stays in this module: its path (`agents.queue.execute_queued`) is stored on every queued task's
  row, which a worker imports it by.
"""

import logging
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.tasks import TaskContext, TaskResultStatus, task
from django.utils import timezone
from django_tasks_db.models import DBTaskResult, get_date_max

from agents.checkpoints import with_latest_checkpoint
from agents.engine import Answers, TurnError
from agents.events import EventLog, last_event_of_session, with_last_event
from agents.lane_limits import has_room
from agents.lanes import DEFAULT_LANE, queue_name
from agents.models import AWAITING, Run, RunStatus, Session
from agents.outcomes import finish_run
from agents.payloads import ErrorInfo, RunRetrying
from agents.prepare import PreparedRun, granted_connections, refuse_if_deleted, subagents_for
from agents.run_lifecycle import (
    ExecutionResult,
    StartedRun,
    active_rules,
    begin_queued,
    calls_with_side_effects,
    cancel_waiting,
    carried_answers,
    carried_ids,
    carried_requests,
    execute,
    record_run,
)
from agents.run_requests import RunClientTool, RunRequest
from agents.seats import Seat, take_handed, take_seat, wake_workers
from agents.turns import PROCESS_ID, cancel_here, lease
from approvals.models import PendingRequest
from console.inserts import insert_rows
from console.loops import run_here
from console.sql import Prepared

logger = logging.getLogger(__name__)


def start_queued(prepared: PreparedRun, user: Any) -> StartedRun:
    """Start a run on its lane's queue: it is recorded `queued` and a worker runs its turn; or, when a pool of
    this process has an idle thread for its lane (and the caller's transaction is not still open), recorded
    `running` and handed to that thread."""
    lane = queue_name(prepared.request.lane or DEFAULT_LANE)
    seat = None if connection.in_atomic_block else take_seat(lane)
    try:
        started = record_run(prepared, user, enqueue=partial(enqueue, seat=seat))
    except BaseException:
        if seat is not None:
            seat.free()
        raise
    if seat is not None:
        seat.hand(started)
    return started


def enqueue(run: Run, prepared: PreparedRun, seat: Seat | None = None) -> list[DBTaskResult]:
    """Keep what the turn needs on the run, not saved yet, and queue it (inside `record_run`'s transaction, which
    writes the run after). Not its answers: each is stored on its request, and the worker rebuilds them from there
    (`carried_answers`) by the ids it keeps. With a `seat` whose lane has room, the run is claimed for the seat's
    thread here instead (its task running, the run leased): the seat hands it over once committed. The task to
    write with the run, when it is claimed here (`_put_on_queue`)."""
    run.queued_input = {
        "instructions": prepared.instructions,
        "documents": [list(document) for document in prepared.documents],
        "carried": carried_ids(prepared),
        "leftOpen": prepared.left_open,
    }
    return _put_on_queue(run, seat)


def _put_on_queue(run: Run, seat: Seat | None) -> list[DBTaskResult]:
    """Queue `run`, not saved yet, its `queued_input` kept: claimed here for the `seat`'s thread when its lane has
    room, else a task for a claim. The task claimed here, not written: the caller writes it with the run, in one
    statement on PostgreSQL (`console.inserts.insert_rows`)."""
    queued = execute_queued.using(queue_name=queue_name(run.lane))
    if seat is not None and has_room(run.lane):
        now = timezone.now()
        # Written as `objects.create` would (its one signal, pre_save's `run_after`, given here), with a few dozen
        # Python calls instead of a few hundred (issue 56).
        seat.task = DBTaskResult(
            args_kwargs={"args": [str(run.id)], "kwargs": {}},
            priority=queued.priority,
            task_path=queued.module_path,
            queue_name=queued.queue_name,
            run_after=get_date_max(),
            backend_name=queued.backend,
            status=TaskResultStatus.RUNNING,
            enqueued_at=now,
            started_at=now,
            worker_ids=[seat.worker_id],
        )
        run.task_id = str(seat.task.id)
        run.status, run.attempts = RunStatus.RUNNING, 1
        for name, value in lease(seat.worker_id).items():
            setattr(run, name, value)
        return [seat.task]
    run.task_id = str(queued.enqueue(str(run.id)).id)
    transaction.on_commit(wake_workers)
    return []


class _Refused(Exception):
    pass


# The session a continuation handed over goes on in, locked, with its last event (issue 56: compiled once).
_LOCKED_SESSION = Prepared(
    lambda session: (
        Session.objects.select_for_update(of=("self",)).annotate(last_event=last_event_of_session()).filter(pk=session)
    ),
    session=int,
)


def queue_continuation(run: Run, carried: PendingRequest, carry: Callable[[], bool]) -> bool:
    """Queue `run`, built but not saved (`agents.actions.sessions._continuation_of`), in one transaction with `carry`,
    the conditional write of the answer to `carried` it carries: False, and nothing written, when `carry` returns
    False. The session's lock is taken first, as every turn takes it (raises RunRejected, writing nothing, when the
    session is deleted; IntegrityError when another turn of it is queued or running); nothing else is read or
    written. Handed to an idle thread of this process when its lane has room there, with its start recorded here
    once committed (what the session's read under its lock gave: the conversation, the last event); otherwise the
    worker that takes it records it (`load_started`)."""
    seat = None if connection.in_atomic_block else take_seat(queue_name(run.lane))
    try:
        with transaction.atomic():
            # The session's lock before the request's row (`carry`), in the order every turn takes them.
            assert run.session_id is not None, "a continuation goes on in its session"
            if seat is None:  # not its conversation: the worker reads it
                locked = Session.objects.select_for_update(of=("self",)).only("deleted_at", "agent_id")
                session = locked.get(pk=run.session_id)
            else:
                session = _LOCKED_SESSION.get(session=run.session_id)
            refuse_if_deleted(session)
            # Not its turn asked: another turn queued or running makes the run's insert fail (its session's one
            # turn, `run_one_turn_per_session`); an agent deleted meanwhile closed the request (`carry` fails).
            insert_rows(_put_on_queue(run, seat), [run])
            if not carry():
                raise _Refused
    except BaseException as refused:
        if seat is not None:
            seat.free()
        if isinstance(refused, _Refused):
            return False
        raise
    if seat is not None:
        started = None
        try:
            started = _begun(run, session, carried) if seat.task is not None else None
        except Exception:  # committed: the answer stands; the run's lease runs out and it is queued again
            logger.exception("Run %s could not be begun as it was handed over", run.id)
        seat.hand(started)  # None gives the thread back
    return True


def _begun(run: Run, session: Session, carried: PendingRequest) -> StartedRun:
    """The continuation handed to a thread, begun here from what queueing it read (`begin_queued`)."""
    run.session = session
    log = EventLog(run, look_back=False)
    log.parent = session.last_event  # type: ignore[attr-defined]  # annotated under the session's lock
    prepared = _prepared(run)
    answers = begin_queued(prepared, run, log, [carried])
    return StartedRun(
        run=run, prepared=prepared, log=log, answers=answers, rules=None, conversation=session.conversation
    )


def load_started(run: Run) -> StartedRun:
    """A started run rebuilt from the database, for the worker that claimed it (or the reclaimer)."""
    data = run.queued_input or {}
    session = run.session
    log = EventLog.resume(run)
    prepared = _prepared(run)
    if "answers" in data:
        # A run queued before its answers were left on their requests only kept a copy of them beside its input.
        answers = Answers.load(data["answers"])
    elif log.sequence == 0:
        # Queued by the answer that completed its session, nothing of it recorded yet (`queue_continuation`).
        answers = begin_queued(prepared, run, log, carried_requests(data.get("carried", [])))
    else:
        answers = carried_answers(data.get("carried", []))
    return StartedRun(
        run=run,
        prepared=prepared,
        log=log,
        answers=answers,
        rules=active_rules(run.agent, run.version, session),
        conversation=session.conversation if session is not None else None,
    )


def _prepared(run: Run) -> PreparedRun:
    """What a queued run's turn needs, from the run (its `queued_input`) and the connections and sub-agents its
    version names, as granted now."""
    data, session = run.queued_input or {}, run.session
    return PreparedRun(
        tenant=run.tenant,
        agent=run.agent,
        version=run.version,
        request=RunRequest(message=run.message, session_id=session.key if session else None, lane=run.lane),
        session=session,
        bound=run.parameters,
        culture=run.culture,
        instructions=data.get("instructions", ""),
        documents=[(name, text) for name, text in data.get("documents", [])],
        previous_run=None,
        connections=granted_connections(run.tenant, run.version),
        subagents=subagents_for(run.tenant, run.version.definition, run.culture, session),
        left_open=data.get("leftOpen"),
        client_tools=RunClientTool.stored(run.client_tools),
    )


def loaded_runs() -> Any:
    """Runs with what a turn reads of them (tenant, agent, version, session), in the same query."""
    return Run.objects.select_related("tenant", "agent", "version", "session")


# The run a worker claimed, with all its turn reads (issue 56: compiled once).
_CLAIMED = Prepared(
    lambda run, worker: with_latest_checkpoint(with_last_event(loaded_runs())).filter(
        id=run, status=RunStatus.RUNNING, worker_id=worker
    ),
    run=uuid.UUID,
    worker=str,
)


@task(takes_context=True)
def execute_queued(context: TaskContext, run_id: str) -> str:
    """The task of one queued run, as django-tasks-db's own worker would run it (this project's pools and `drain` run
    `run_claimed`)."""
    return _run_queued(run_id, context.task_result.worker_ids[-1])


def run_claimed(db_task: DBTaskResult) -> None:
    """Run the task a claim (or a hand-over) gave this thread, as django-tasks-db's `Worker.run_task` does but for its
    log lines: the task ends with its run's outcome, in the same statement on PostgreSQL (issue 56); a task that ends
    otherwise (skipped, queued again, failed) ends here."""
    try:
        status = _run_queued(db_task.args_kwargs["args"][0], db_task.worker_ids[-1], db_task)
        if db_task.status == TaskResultStatus.RUNNING:
            db_task.set_successful(status)
    except BaseException as error:
        logger.exception("The task %s of run %s failed", db_task.id, db_task.args_kwargs["args"][0])
        db_task.set_failed(error)


def _run_queued(run_id: str, worker_id: str, task: DBTaskResult | None = None) -> str:
    """Run the turn the claim (or the hand-over) gave `worker_id`; with `task`, it ends with the run's outcome."""
    started = take_handed(run_id)
    if started is None:
        run = _CLAIMED.first(run=uuid.UUID(run_id), worker=worker_id)
        if run is None:
            return "skipped"  # cancelled, or reclaimed, before its turn began
        if run.cancel_requested or run.agent.deleted_at is not None:
            # Cancelled (or its agent deleted) after the claim and before the turn began: it never starts.
            finish_run(load_started(run), ExecutionResult(None, None, cancelled=True), task)
            return run.status
        started = load_started(run)
    # A cancel asked of a handed run before its turn is held here is seen by the keeper within its round.
    run = started.run
    if started.rules is None:  # handed over: its rules are read as its turn begins, not when it was queued
        started.rules = active_rules(run.agent, run.version, run.session)
    result = run_here(execute(started))
    if retry(started, result.error):
        return "retrying"
    finish_run(started, result, task)
    return run.status


def retry(started: StartedRun, error: TurnError | None) -> bool:
    """Queue the run again after a transient failure, when it may run again; True when it did."""
    run = started.run
    if error is None or not error.transient or run.queued_input is None:
        return False
    if run.attempts >= settings.RUN_MAX_ATTEMPTS or calls_with_side_effects(run, started.log):
        return False
    delay = settings.RUN_RETRY_DELAY_SECONDS * 2 ** (run.attempts - 1)
    run_after = timezone.now() + timedelta(seconds=delay)
    with transaction.atomic():
        held = Run.objects.held_by(run)
        if not held.update(status=RunStatus.QUEUED, worker_id="", lease_expires_at=None):
            return True  # reclaimed meanwhile: the reclaimer decides
        started.log.record(
            RunRetrying(
                attempt=run.attempts,
                error=ErrorInfo(code=error.code, message=error.message),
                retryAt=run_after.isoformat(),
            )
        )
        started.log.flush()
        queued = execute_queued.using(queue_name=queue_name(run.lane), run_after=run_after).enqueue(str(run.id))
        Run.objects.filter(pk=run.pk).update(task_id=str(queued.id))
    logger.info("Run %s failed with %s (attempt %s); queued again", run.id, error.code, run.attempts)
    return True


def cancel(run: Run, user: Any = None) -> str | None:
    """Cancel a queued, running or waiting run: `cancelled` when done here, `cancelling` when its turn stops
    soon, None when there is nothing to cancel (it has finished, or waits on nothing any more)."""
    if run.status in AWAITING:
        return "cancelled" if cancel_waiting(run, user) else None
    if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
        return None
    canceller = f"{PROCESS_ID}:cancel"
    if Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(status=RunStatus.RUNNING, worker_id=canceller):
        if run.task_id:
            DBTaskResult.objects.filter(id=run.task_id, status="READY").delete()
        run = loaded_runs().get(pk=run.pk)
        finish_run(load_started(run), ExecutionResult(None, None, cancelled=True))
        return "cancelled"
    if cancel_here(run.id):
        return "cancelling"
    Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(cancel_requested=True)
    return "cancelling"
