"""The worker pools of this process as the queue sees them: their idle threads, one of which a run queued here may
be handed to (`Seat`), and their claimers, woken when a run is queued (`wake_workers`). The pools themselves, their
threads and their claimer, are agents/workers.py's."""

import threading
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Protocol

from django_tasks_db.models import DBTaskResult

from agents.run_lifecycle import StartedRun


class Pool(Protocol):
    """What seats and wake-ups ask of a pool of worker threads (`agents.workers.WorkerPool`)."""

    queues: set[str] | None
    wake: threading.Event
    given: list[SimpleQueue[DBTaskResult | None]]

    def worker_id(self, index: int) -> str: ...

    def take_idle(self) -> int | None: ...

    def idle(self, index: int) -> None: ...


# The pools started in this process (`agents.workers.WorkerPool.start`).
POOLS: list[Pool] = []

# Runs handed to a thread of this process with what starting them built (`Seat.hand`), by run id: its task runs the
# turn from there, as a turn run for its caller would.
_HANDED: dict[str, StartedRun] = {}


def wake_workers(queue: str = "") -> None:
    """A run was queued on `queue` (in this process, or in another: agents/wakeups.py; "": on any): the idle
    workers of the pools that work it look at once instead of at their next poll."""
    for pool in POOLS:
        if not queue or pool.queues is None or queue in pool.queues:
            pool.wake.set()


@dataclass
class Seat:
    """An idle thread of a pool set aside for a run being queued in this process (`agents.queue.start_queued`):
    `enqueue` claims the run for it (`task`), and once that is committed `hand` gives the thread the run; a seat not
    used goes back."""

    pool: Pool
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


def take_seat(queue: str) -> Seat | None:
    """An idle thread of a pool of this process that works `queue`, set aside; None when there is none."""
    for pool in POOLS:
        if pool.queues is None or queue in pool.queues:
            index = pool.take_idle()
            if index is not None:
                return Seat(pool, index)
    return None


def take_handed(run_id: str) -> StartedRun | None:
    """The run handed to this thread with what starting it built (`Seat.hand`); None when it was claimed."""
    return _HANDED.pop(run_id, None)
