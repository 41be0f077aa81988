"""Queued runs (SPEC section 4, `Prefer: respond-async`; section 7): lanes, workers, leases.

- `start_queued` starts a run queued: `enqueue`, inside `start_run`'s transaction, keeps on the run
  what its turn needs (`queued_input`: instructions, documents, the ids of the requests it carries: their answers are on
  them, `agents.runs.carried_answers`) and puts a task on the lane's queue: Django's tasks framework with the
  django-tasks-db backend, a row in the same database and transaction.
- A `WorkerPool` (threads of `manage.py serve`, or `manage.py run_worker`) has one claimer thread that
  claims for all its idle threads in one transaction (`claim_batch`: `SKIP LOCKED`, each lane counted
  under its own lock), so a lane never runs more turns at once than its limit (`RUN_LANES`) over all
  workers; the claim marks each run `running` with a lease held by the thread that runs it.
- A run queued in a process whose pool has an idle thread for its lane is handed to that thread (`Seat`): the
  queueing transaction claims it (its task written `RUNNING`, the run leased to the thread, once its lane is
  counted under the lane's lock as a claim counts it), and once committed the thread runs the turn from the
  started run in hand, reading nothing again. No claim, no wake-up, no poll: the continuation of an answer
  starts the moment the answer commits.
- The continuation of the last answer is queued with the answer in one transaction (`queue_continuation`), nothing
  of it recorded: handed to a seat, it is begun once committed; claimed, its worker begins it (`load_started`,
  `agents.runs.begin_queued`).
- Other idle workers do not wait for their poll: a run queued in this process wakes its pools after the commit
  (`wake_workers`), and on PostgreSQL one queued in any process wakes every process's pools
  (agents/wakeups.py: a trigger's NOTIFY, one LISTEN connection per process). A claimer asks the database only
  when woken, when its last claim took all it asked for (more may wait), and at its poll (without wake-ups,
  SQLite, also whenever a thread turns idle: a turn that ended may have made room in its lane).
- The keeper (one thread per process that runs turns) renews the leases of the turns running here
  every second, writes the events of long turns as they come, cancels turns whose cancel was asked
  in another process, and reclaims runs whose lease ran out (their process died): queued again when
  the failure may pass and no tool with side effects ran, otherwise failed `worker_lost`. Answers a
  reclaimed run carried go back to its session, never lost.
"""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from queue import SimpleQueue
from typing import Any

from django.conf import settings
from django.db import OperationalError, close_old_connections, connection, transaction
from django.db.models import Count, F
from django.tasks import TaskContext, TaskResultStatus, task
from django.utils import timezone
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult, get_date_max
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception

from agents.checkpoints import with_latest_checkpoint
from agents.engine import Answers, TurnError, warm_engine
from agents.events import EventLog, last_event_of_session, with_last_event
from agents.lanes import DEFAULT_LANE, queue_name
from agents.models import AWAITING, Run, RunStatus, Session
from agents.outcomes import finish_run
from agents.payloads import ErrorInfo, RunRetrying
from agents.prepare import PreparedRun, RunRequest, granted_connections, refuse_if_deleted, subagents_for
from agents.runs import (
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
    start_run,
)
from agents.turns import PROCESS_ID, cancel_here, keep_held, keeper_started, lease, run_here
from agents.wakeups import start_listener
from approvals.models import PendingRequest
from console.periodic import start_periodic
from console.sql import update_together

logger = logging.getLogger(__name__)


def lane_limit(lane: str) -> int:
    return settings.RUN_LANES.get(lane, settings.RUN_LANE_CONCURRENCY)


# --- queueing --------------------------------------------------------------------------------------


def start_queued(prepared: PreparedRun, user: Any) -> StartedRun:
    """Start a run on its lane's queue: it is recorded `queued` and a worker runs its turn; or, when a pool of
    this process has an idle thread for its lane (and the caller's transaction is not still open), recorded
    `running` and handed to that thread."""
    lane = queue_name(prepared.request.lane or DEFAULT_LANE)
    seat = None if connection.in_atomic_block else _seat(lane)
    try:
        started = start_run(prepared, user, enqueue=partial(enqueue, seat=seat))
    except BaseException:
        if seat is not None:
            seat.free()
        raise
    if seat is not None:
        seat.hand(started)
    return started


def enqueue(run: Run, prepared: PreparedRun, seat: "Seat | None" = None) -> None:
    """Keep what the turn needs on the run, not saved yet, and queue it (inside `start_run`'s transaction, which
    writes the run after). Not its answers: each is stored on its request, and the worker rebuilds them from there
    (`carried_answers`) by the ids it keeps. With a `seat` whose lane has room, the run is claimed for the seat's
    thread here instead (its task written running, the run leased): the seat hands it over once committed."""
    run.queued_input = {
        "instructions": prepared.instructions,
        "documents": [list(document) for document in prepared.documents],
        "carried": carried_ids(prepared),
        "leftOpen": prepared.left_open,
    }
    _put_on_queue(run, seat)


def _put_on_queue(run: Run, seat: "Seat | None") -> None:
    """Queue `run`, not saved yet, its `queued_input` kept: claimed here for the `seat`'s thread when its lane has
    room, else a task for a claim."""
    queued = execute_queued.using(queue_name=queue_name(run.lane))
    if seat is not None and _has_room(run.lane):
        seat.task = DBTaskResult.objects.create(
            args_kwargs={"args": [str(run.id)], "kwargs": {}},
            priority=queued.priority,
            task_path=queued.module_path,
            queue_name=queued.queue_name,
            run_after=get_date_max(),
            backend_name=queued.backend,
            status=TaskResultStatus.RUNNING,
            started_at=timezone.now(),
            worker_ids=[seat.worker_id],
        )
        run.task_id = str(seat.task.id)
        run.status, run.attempts = RunStatus.RUNNING, 1
        for name, value in lease(seat.worker_id).items():
            setattr(run, name, value)
        return
    run.task_id = str(queued.enqueue(str(run.id)).id)
    transaction.on_commit(wake_workers)


class _Refused(Exception):
    pass


def queue_continuation(run: Run, carried: PendingRequest, carry: Callable[[], bool]) -> bool:
    """Queue `run`, built but not saved (`agents.actions.sessions.continuation_of`), in one transaction with `carry`,
    the conditional write of the answer to `carried` it carries: False, and nothing written, when `carry` returns
    False. The session's lock is taken first, as every turn takes it (raises RunRejected, writing nothing, when the
    session is deleted; IntegrityError when another turn of it is queued or running); nothing else is read or
    written. Handed to an idle thread of this process when its lane has room there, with its start recorded here
    once committed (what the session's read under its lock gave: the conversation, the last event); otherwise the
    worker that takes it records it (`load_started`)."""
    seat = None if connection.in_atomic_block else _seat(queue_name(run.lane))
    try:
        with transaction.atomic():
            # The session's lock before the request's row (`carry`), in the order every turn takes them.
            assert run.session_id is not None, "a continuation goes on in its session"
            locked = Session.objects.select_for_update(of=("self",))
            if seat is None:  # not its conversation: the worker reads it
                locked = locked.only("deleted_at", "agent_id")
            else:
                locked = locked.annotate(last_event=last_event_of_session())
            session = locked.get(pk=run.session_id)
            refuse_if_deleted(session)
            # Not its turn asked: another turn queued or running makes the run's insert fail (its session's one
            # turn, `run_one_turn_per_session`); an agent deleted meanwhile closed the request (`carry` fails).
            _put_on_queue(run, seat)
            run.save(force_insert=True)
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


def _has_room(lane: str) -> bool:
    """Whether `lane` may run one more turn now, counted under its lock (held until the caller's transaction ends)
    as a claim counts it."""
    name = queue_name(lane)
    _lock_queues({name}, wait=True)
    return _room([lane]).get(name, _queue_limit(name)) > 0


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
    )


def _runs() -> Any:
    return Run.objects.select_related("tenant", "agent", "version", "session")


# Runs handed to a thread of this process with what starting them built (`Seat.hand`), by run id: its task runs the
# turn from there, as a turn run for its caller would.
_HANDED: dict[str, StartedRun] = {}


@task(takes_context=True)
def execute_queued(context: TaskContext, run_id: str) -> str:
    """The task of one queued run: run the turn the claim (or the hand-over) gave this worker."""
    started = _HANDED.pop(run_id, None)
    if started is None:
        worker_id = context.task_result.worker_ids[-1]
        runs = with_latest_checkpoint(with_last_event(_runs()))
        run = runs.filter(id=run_id, status=RunStatus.RUNNING, worker_id=worker_id).first()
        if run is None:
            return "skipped"  # cancelled, or reclaimed, before its turn began
        if run.cancel_requested or run.agent.deleted_at is not None:
            # Cancelled (or its agent deleted) after the claim and before the turn began: it never starts.
            finish_run(load_started(run), ExecutionResult(None, None, cancelled=True))
            return run.status
        started = load_started(run)
    # A cancel asked of a handed run before its turn is held here is seen by the keeper within its round.
    run = started.run
    if started.rules is None:  # handed over: its rules are read as its turn begins, not when it was queued
        started.rules = active_rules(run.agent, run.version, run.session)
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


_CLAIMING = threading.Lock()


def _queue_limit(name: str) -> int:
    """The limit of the lane a task queue carries (`queue_name` shortens long lane names)."""
    return next((limit for lane, limit in settings.RUN_LANES.items() if queue_name(lane) == name), lane_limit(name))


def _room(lanes: list[str] | None) -> dict[str, int]:
    """Free turns per task queue of the lanes that have running runs (the others have their whole limit)."""
    busy = Run.objects.filter(status=RunStatus.RUNNING).exclude(task_id="")
    if lanes is not None:
        busy = busy.filter(lane__in=lanes)
    counts = busy.values("lane").annotate(n=Count("id"))
    return {queue_name(row["lane"]): lane_limit(row["lane"]) - row["n"] for row in counts}


def _lock_queues(names: set[str], wait: bool) -> set[str]:
    """PostgreSQL: claimers of the same lanes take turns counting them (SQLite's exclusive transaction
    already does); claimers of other lanes go on, and the ready tasks are shared out by SKIP LOCKED.
    Without `wait`, a lane another claimer holds is left for the next round; which lanes are held now."""
    if connection.vendor != "postgresql":
        return names
    held = set()
    with connection.cursor() as cursor:
        for name in sorted(names):  # waiting in one order everywhere: no deadlock between two claimers
            key = f"airlock.lane:{name}"
            if wait:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [key])
            else:
                cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [key])
                if not cursor.fetchone()[0]:
                    continue
            held.add(name)
    return held


def claim_batch(worker_ids: list[str], lanes: list[str] | None = None) -> list[DBTaskResult]:
    """Take up to one ready task per worker, of lanes below their limit, in one transaction; the run of
    the i-th task taken is marked running under a lease held by `worker_ids[i]`."""
    tasks = DBTaskResult.objects.ready().filter(backend_name="default", task_path=execute_queued.module_path)
    if lanes is not None:
        tasks = tasks.filter(queue_name__in=[queue_name(lane) for lane in lanes])
    # Claimers of one process take turns before asking the database: on SQLite, threads that collide
    # on its lock back off in sleeps of many milliseconds.
    claimed: list[DBTaskResult] = []
    with _CLAIMING, exclusive_transaction(tasks.db):
        # The lanes' free turns, counted once their locks are held (not before: that count could be stale).
        room: dict[str, int] = {}
        held, passed = set[str](), set[str]()
        while len(claimed) < len(worker_ids):
            # Lanes found full are left out, so each pass looks further down the queue.
            skip = passed | {name for name, free in room.items() if free <= 0}
            wanted = len(worker_ids) - len(claimed)
            ready = list(tasks.exclude(queue_name__in=skip).select_for_update(skip_locked=True)[:wanted])
            if not ready:
                break
            new = {db_task.queue_name for db_task in ready} - held
            # The first pass waits for its lanes; later ones (their locks after it) take only free ones.
            locked = _lock_queues(new, wait=not held)
            held |= locked
            passed |= new - locked
            if locked:
                room = _room(lanes)  # counted under the lanes' locks: another claimer may have taken some
            for db_task in ready:
                if db_task.queue_name not in held:
                    continue
                free = room.get(db_task.queue_name, _queue_limit(db_task.queue_name))
                room[db_task.queue_name] = free - 1
                if free <= 0:
                    continue
                worker_id = worker_ids[len(claimed)]
                # The task taken (as django-tasks-db's `claim` writes it) and its run leased, in one statement.
                taken = {"status": TaskResultStatus.RUNNING, "started_at": timezone.now()}
                taken["worker_ids"] = [*db_task.worker_ids, worker_id]
                update_together(
                    Run.objects.filter(id=db_task.args_kwargs["args"][0], status=RunStatus.QUEUED),
                    {"status": RunStatus.RUNNING, "attempts": F("attempts") + 1, **lease(worker_id)},
                    (DBTaskResult.objects.filter(pk=db_task.pk), taken),
                )
                for name, value in taken.items():
                    setattr(db_task, name, value)
                claimed.append(db_task)
    return claimed


def claim(worker_id: str, lanes: list[str] | None = None) -> DBTaskResult | None:
    """Take the next ready task of a lane below its limit and mark its run running under a lease."""
    claimed = claim_batch([worker_id], lanes)
    return claimed[0] if claimed else None


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


def wake_workers(queue: str = "") -> None:
    """A run was queued on `queue` (in this process, or in another: agents/wakeups.py; "": on any): the idle
    workers of the pools that work it look at once instead of at their next poll."""
    for pool in _POOLS:
        if not queue or pool.queues is None or queue in pool.queues:
            pool.wake.set()


@dataclass
class Seat:
    """An idle thread of a pool set aside for a run being queued in this process (`start_queued`): `enqueue` claims
    the run for it (`task`), and once that is committed `hand` gives the thread the run; a seat not used goes back."""

    pool: "WorkerPool"
    index: int
    task: DBTaskResult | None = None

    @property
    def worker_id(self) -> str:
        return self.pool.worker_id(self.index)

    def hand(self, started: StartedRun | None) -> None:
        """Give the thread its run, committed, with what starting it built (None: its lane was full, or the run
        could not be begun: the thread goes back to idle)."""
        if self.task is None or started is None:  # its lane was full: queued as any run, for a claim
            self.free()
            return
        _HANDED[str(started.run.id)] = started
        self.pool.given[self.index].put(self.task)

    def free(self) -> None:
        self.pool.idle(self.index)


def _seat(queue: str) -> Seat | None:
    """An idle thread of a pool of this process that works `queue`, set aside; None when there is none."""
    for pool in _POOLS:
        if pool.queues is None or queue in pool.queues:
            index = pool.take_idle()
            if index is not None:
                return Seat(pool, index)
    return None


class WorkerPool:
    """Threads that run queued runs of `lanes` (None: every lane), and one claimer thread that claims
    for all the idle ones at once (`claim_batch`): on SQLite the threads never collide claiming, on
    PostgreSQL a pool of N threads claims up to N tasks in one transaction. A run queued in this process
    may be handed to an idle thread directly (`Seat`), without a claim."""

    def __init__(self, threads: int, lanes: list[str] | None = None, poll: float | None = None) -> None:
        self.threads, self.lanes = threads, lanes
        self.queues = None if lanes is None else {queue_name(lane) for lane in lanes}
        self.poll = settings.WORKER_POLL_SECONDS if poll is None else poll
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.given: list[SimpleQueue[DBTaskResult | None]] = [SimpleQueue() for _ in range(threads)]
        self._lock = threading.Lock()
        self._idle: list[int] = []
        # Whether ready tasks may be left that the last claim did not take (it took all it asked for, or found no
        # idle thread to claim for): then a thread that turns idle wakes the claimer.
        self._more = True
        self._threads: list[threading.Thread] = []
        self._claimer: threading.Thread | None = None

    def start(self) -> "WorkerPool":
        start_keeper()
        warm_engine()  # once here, not raced by every thread's first turn
        if settings.WORKER_WAKEUPS:
            start_listener(wake_workers)
        _POOLS.append(self)
        for index in range(self.threads):
            thread = threading.Thread(target=self._work, args=(index,), name=f"airlock-worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._claimer = threading.Thread(target=self._claim, name="airlock-claimer", daemon=True)
        self._claimer.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming; wait for the turns running now to end."""
        self.stopping.set()
        self.wake.set()
        if self in _POOLS:
            _POOLS.remove(self)
        if self._claimer is not None:
            self._claimer.join(timeout)
        for given in self.given:
            given.put(None)
        for thread in self._threads:
            thread.join(timeout)

    def worker_id(self, index: int) -> str:
        return f"{PROCESS_ID}:{index}"

    def take_idle(self) -> int | None:
        """An idle thread's index, no longer idle; None when every thread is busy."""
        with self._lock:
            return self._idle.pop() if self._idle and not self.stopping.is_set() else None

    def idle(self, index: int) -> None:
        """The thread `index` waits for work again."""
        with self._lock:
            self._idle.append(index)
            # Without wake-ups (SQLite) a lane full at the last claim has room again once a turn ends: look.
            more = self._more or not settings.WORKER_WAKEUPS
        if more:
            self.wake.set()

    def _claim(self) -> None:
        """Claim for every idle worker thread at once when there may be work; hand each task to its thread."""
        while not self.stopping.is_set():
            self.wake.wait(self.poll)  # woken by a queued run, or a thread idle while more may wait; else the poll
            self.wake.clear()
            if self.stopping.is_set():
                break
            with self._lock:
                idle, self._idle = self._idle, []
                self._more = not idle  # no thread to claim for: the next idle one looks
            if not idle:
                continue
            close_old_connections()
            try:
                claimed = claim_batch([self.worker_id(index) for index in idle], self.lanes)
            except OperationalError as error:
                if not is_locked_database_exception(error):
                    logger.exception("claiming queued runs failed; trying again shortly")
                claimed = []
            except Exception:
                logger.exception("claiming queued runs failed; trying again shortly")
                claimed = []
            close_old_connections()
            for index, db_task in zip(idle[: len(claimed)], claimed, strict=True):
                self.given[index].put(db_task)
            with self._lock:
                self._idle.extend(idle[len(claimed) :])
                if claimed and len(claimed) == len(idle):
                    self._more = True
        close_old_connections()

    def _work(self, index: int) -> None:
        runner = _runner(self.worker_id(index))
        while True:
            self.idle(index)
            db_task = self.given[index].get()
            if db_task is None:
                break
            runner.run_task(db_task)
            close_old_connections()
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
