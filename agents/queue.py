"""Queued runs (SPEC section 4, `Prefer: respond-async`; section 7): lanes, workers, leases.

- `start_queued` starts a run queued: `enqueue`, inside `start_run`'s transaction, keeps on the run
  what its turn needs (`queued_input`: instructions, documents, answers) and puts a task on the lane's
  queue: Django's tasks framework with the django-tasks-db backend, a row in the same database and
  transaction.
- A `WorkerPool` (threads of `manage.py serve`, or `manage.py run_worker`) claims tasks one at a time
  under one lock, so a lane never runs more turns at once than its limit (`RUN_LANES`) over all
  workers; the claim marks the run `running` with a lease.
- The keeper (one thread per process that runs turns) renews the leases of the turns running here
  every second, writes the events of long turns as they come, cancels turns whose cancel was asked
  in another process, and reclaims runs whose lease ran out (their process died): queued again when
  the failure may pass and no tool with side effects ran, otherwise failed `worker_lost`. Answers a
  reclaimed run carried go back to its session, never lost.
"""

import logging
import threading
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import OperationalError, close_old_connections, connection, transaction
from django.db.models import Count, F
from django.tasks import TaskContext, task
from django.utils import timezone
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception

from agents.engine import Answers, TurnError
from agents.events import EventLog
from agents.lanes import queue_name
from agents.models import AWAITING, Run, RunStatus
from agents.payloads import ErrorInfo, RunRetrying
from agents.prepare import PreparedRun, RunRequest, granted_connections, subagents_for
from agents.runs import (
    ExecutionResult,
    StartedRun,
    active_rules,
    calls_with_side_effects,
    cancel_waiting,
    execute,
    finish_run,
    start_run,
)
from agents.turns import PROCESS_ID, cancel_here, keep_held, keeper_started, lease, run_here
from console.periodic import start_periodic

logger = logging.getLogger(__name__)


def lane_limit(lane: str) -> int:
    return settings.RUN_LANES.get(lane, settings.RUN_LANE_CONCURRENCY)


# --- queueing --------------------------------------------------------------------------------------


def start_queued(prepared: PreparedRun, user: Any) -> StartedRun:
    """Start a run on its lane's queue: it is recorded `queued` and a worker runs its turn."""
    return start_run(prepared, user, enqueue=enqueue)


def enqueue(run: Run, prepared: PreparedRun, answers: Answers, log: EventLog) -> None:
    """Keep what the turn needs on the run and queue it (inside `start_run`'s transaction)."""
    run.queued_input = {
        "instructions": prepared.instructions,
        "documents": [list(document) for document in prepared.documents],
        "answers": answers.dump(),
    }
    log.flush()
    run.task_id = str(execute_queued.using(queue_name=queue_name(run.lane)).enqueue(str(run.id)).id)
    run.save(update_fields=["queued_input", "task_id"])
    transaction.on_commit(wake_workers)


def load_started(run: Run) -> StartedRun:
    """A started run rebuilt from the database, for the worker that claimed it (or the reclaimer)."""
    data = run.queued_input or {}
    session = run.session
    prepared = PreparedRun(
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
        subagents=subagents_for(run.tenant, run.version.definition, run.culture),
    )
    return StartedRun(
        run=run,
        prepared=prepared,
        log=EventLog.resume(run),
        answers=Answers.load(data.get("answers", {})),
        rules=active_rules(run.agent, run.version),
        conversation=session.conversation if session is not None else None,
    )


def _runs() -> Any:
    return Run.objects.select_related("tenant", "agent", "version", "session")


@task(takes_context=True)
def execute_queued(context: TaskContext, run_id: str) -> str:
    """The task of one queued run: run the turn the claim gave this worker."""
    worker_id = context.task_result.worker_ids[-1]
    run = _runs().filter(id=run_id, status=RunStatus.RUNNING, worker_id=worker_id).first()
    if run is None:
        return "skipped"  # cancelled, or reclaimed, before its turn began
    if run.cancel_requested or run.agent.deleted_at is not None:
        # Cancelled (or its agent deleted) after the claim and before the turn began: it never starts.
        finish_run(load_started(run), ExecutionResult(None, None, cancelled=True))
        return run.status
    started = load_started(run)
    result = run_here(execute(started))
    if _retry(started, result.error):
        return "retrying"
    finish_run(started, result)
    return run.status


def _retry(started: StartedRun, error: TurnError | None) -> bool:
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
        run = _runs().get(pk=run.pk)
        finish_run(load_started(run), ExecutionResult(None, None, cancelled=True))
        return "cancelled"
    if cancel_here(run.id):
        return "cancelling"
    Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(cancel_requested=True)
    return "cancelling"


# --- claiming and the worker pool -----------------------------------------------------------------


def _serialize_claims() -> None:
    """One claim at a time over all workers (SQLite's exclusive transaction does it there)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('airlock.claim'))")


_CLAIMING = threading.Lock()


def claim(worker_id: str, lanes: list[str] | None = None) -> DBTaskResult | None:
    """Take the next ready task of a lane below its limit and mark its run running under a lease."""
    tasks = DBTaskResult.objects.ready().filter(backend_name="default", task_path=execute_queued.module_path)
    if lanes is not None:
        tasks = tasks.filter(queue_name__in=[queue_name(lane) for lane in lanes])
    # The threads of one process take turns before asking the database: on SQLite, threads that
    # collide on its lock back off in sleeps of many milliseconds.
    with _CLAIMING, exclusive_transaction(tasks.db):
        _serialize_claims()
        busy = Run.objects.filter(status=RunStatus.RUNNING).exclude(task_id="").values("lane").annotate(n=Count("id"))
        full = [queue_name(row["lane"]) for row in busy if row["n"] >= lane_limit(row["lane"])]
        db_task = tasks.exclude(queue_name__in=full).get_locked()
        if db_task is None:
            return None
        db_task.claim(worker_id)
        Run.objects.filter(id=db_task.args_kwargs["args"][0], status=RunStatus.QUEUED).update(
            status=RunStatus.RUNNING, attempts=F("attempts") + 1, **lease(worker_id)
        )
    return db_task


def _runner(worker_id: str) -> Worker:
    """django-tasks-db's worker, used for running one claimed task (its result, its signals)."""
    return Worker(
        queue_names=["*"],
        interval=0,
        batch=True,
        backend_name="default",
        startup_delay=False,
        max_tasks=None,
        worker_id=worker_id,
        excluded_queue_names=[],
    )


def drain(lanes: list[str] | None = None) -> int:
    """Run every ready queued run in this thread until none is left; how many ran (tests, `--batch`)."""
    worker_id = f"{PROCESS_ID}:drain"
    runner, ran = _runner(worker_id), 0
    while (db_task := claim(worker_id, lanes)) is not None:
        runner.run_task(db_task)
        ran += 1
    return ran


_POOLS: list["WorkerPool"] = []


def wake_workers() -> None:
    """A run was queued in this process: idle workers look at once instead of at their next poll."""
    for pool in _POOLS:
        pool.wake.set()


class WorkerPool:
    """Threads that claim and run queued runs of `lanes` (None: every lane)."""

    def __init__(self, threads: int, lanes: list[str] | None = None, poll: float | None = None) -> None:
        self.threads, self.lanes = threads, lanes
        self.poll = settings.WORKER_POLL_SECONDS if poll is None else poll
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> "WorkerPool":
        start_keeper()
        _POOLS.append(self)
        for index in range(self.threads):
            thread = threading.Thread(target=self._work, args=(index,), name=f"airlock-worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming; wait for the turns running now to end."""
        self.stopping.set()
        self.wake.set()
        for thread in self._threads:
            thread.join(timeout)
        if self in _POOLS:
            _POOLS.remove(self)

    def _work(self, index: int) -> None:
        worker_id = f"{PROCESS_ID}:{index}"
        runner = _runner(worker_id)
        while not self.stopping.is_set():
            close_old_connections()
            try:
                db_task = claim(worker_id, self.lanes)
            except OperationalError as error:
                if not is_locked_database_exception(error):
                    logger.exception("claiming a queued run failed; trying again shortly")
                db_task = None
            except Exception:
                logger.exception("claiming a queued run failed; trying again shortly")
                db_task = None
            if db_task is not None:
                runner.run_task(db_task)
                continue
            close_old_connections()
            self.wake.wait(self.poll)
            self.wake.clear()
        close_old_connections()


# --- the keeper ----------------------------------------------------------------------------------


def keep() -> None:
    """One round of the keeper: the turns held here (agents/turns.py), then runs other processes lost."""
    keep_held()
    reclaim_lost()


def reclaim_lost(now: Any = None) -> list[Run]:
    """Runs whose lease ran out: their process died mid-turn. Queue each again when it may run again,
    else end it failed `worker_lost`; either way the answers it carried stay with its session."""
    now = now or timezone.now()
    reclaimer = f"{PROCESS_ID}:reclaim"
    reclaimed = []
    for run in _runs().filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)[:100]:
        taken = Run.objects.filter(
            pk=run.pk, status=RunStatus.RUNNING, worker_id=run.worker_id, lease_expires_at=run.lease_expires_at
        ).update(**lease(reclaimer))
        if not taken:
            continue
        logger.warning("Run %s lost its worker %s; reclaiming it", run.id, run.worker_id)
        if run.task_id:
            DBTaskResult.objects.filter(id=run.task_id, status="RUNNING").update(
                status="FAILED", finished_at=now, exception_class_path="agents.queue.WorkerLost"
            )
        run.worker_id = reclaimer
        started = load_started(run)
        error = TurnError("worker_lost", "The process running this turn stopped before the turn ended.", transient=True)
        if not _retry(started, error):
            finish_run(started, ExecutionResult(None, error))
        reclaimed.append(run)
    return reclaimed


def start_keeper(every_seconds: float = 1.0) -> None:
    """Start the keeper thread of this process (once)."""
    keeper_started()
    start_periodic("keeper", every_seconds, keep)
