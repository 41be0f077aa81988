"""Worker pools: the threads of `manage.py serve` or `manage.py run_worker` that run queued runs. A pool has one
claimer thread that claims for all its idle threads in one transaction (`agents.claiming.claim_batch`), and hands
each thread its task; a run queued in this process may be handed to an idle thread directly (agents/seats.py).

Idle workers do not wait for their poll: a run queued in this process wakes its pools after the commit
(`agents.seats.wake_workers`), and on PostgreSQL one queued in any process wakes every process's pools
(agents/wakeups.py: a trigger's NOTIFY, one LISTEN connection per process). A claimer asks the database only when
woken, when its last claim took all it asked for (more may wait), and at its poll (without wake-ups, SQLite, also
whenever a thread turns idle: a turn that ended may have made room in its lane). Starting a pool starts this
process's keeper (agents/keeper.py)."""

import logging
import threading
from queue import SimpleQueue

from django.conf import settings
from django.db import OperationalError, close_old_connections
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import is_locked_database_exception

from agents import seats
from agents.claiming import claim_batch
from agents.engine import warm_engine
from agents.keeper import start_keeper
from agents.lanes import queue_name
from agents.queue import run_claimed
from agents.turns import PROCESS_ID
from agents.wakeups import start_listener
from console import metrics

logger = logging.getLogger(__name__)


class WorkerPool:
    """Threads that run queued runs of `lanes` (None: every lane), and one claimer thread that claims
    for all the idle ones at once (`claim_batch`): on SQLite the threads never collide claiming, on
    PostgreSQL a pool of N threads claims up to N tasks in one transaction. A run queued in this process
    may be handed to an idle thread directly (`agents.seats.Seat`), without a claim."""

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
            start_listener(seats.wake_workers)
        seats.POOLS.append(self)
        metrics.worker_threads(self.threads)
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
        if self in seats.POOLS:
            seats.POOLS.remove(self)
            metrics.worker_threads(-self.threads)
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
        while True:
            self.idle(index)
            db_task = self.given[index].get()
            if db_task is None:
                break
            with metrics.worker_busy():
                run_claimed(db_task)
            close_old_connections()
        close_old_connections()
