"""Claiming queued runs: a claimer takes ready tasks of lanes below their limit (`RUN_LANES`) over all workers, in
one transaction for all the threads it claims for (`claim_batch`: `SKIP LOCKED`, each lane counted under its own
lock, agents/lane_limits.py), and marks each run `running` with a lease held by the thread that runs it. `drain`
runs every ready one in the calling thread (tests, `run_worker --batch`); the pools of agents/workers.py run them on
their threads."""

import threading
from datetime import datetime

from django.db.models import F, Q, QuerySet
from django.tasks import TaskResultStatus
from django.utils import timezone
from django_tasks_db.models import DBTaskResult, get_date_max
from django_tasks_db.utils import exclusive_transaction

from agents.lane_limits import free_turns, lock_queues, queue_limit
from agents.lanes import queue_name
from agents.models import Run, RunStatus
from agents.queue import execute_queued, run_claimed
from agents.turns import PROCESS_ID, lease
from console.sql import Prepared, update_together

_CLAIMING = threading.Lock()


def _ready(now: datetime, lanes: list[str] | None = None) -> QuerySet[DBTaskResult]:
    """The queued runs' tasks of `lanes` (None: every lane) ready at `now` (django-tasks-db's `ready()`, with the time
    given)."""
    tasks = DBTaskResult.objects.filter(
        Q(run_after=get_date_max()) | Q(run_after__lte=now),
        status=TaskResultStatus.READY,
        backend_name="default",
        task_path=execute_queued.module_path,
    )
    return tasks if lanes is None else tasks.filter(queue_name__in=[queue_name(lane) for lane in lanes])


# The next ready task of any lane, locked (issue 56: compiled once; the claim of one idle thread asks it each time).
_NEXT_READY = Prepared(lambda now: _ready(now).select_for_update(skip_locked=True), now=datetime)


def claim_batch(worker_ids: list[str], lanes: list[str] | None = None) -> list[DBTaskResult]:
    """Take up to one ready task per worker, of lanes below their limit, in one transaction; the run of
    the i-th task taken is marked running under a lease held by `worker_ids[i]`."""
    now = timezone.now()
    # Claimers of one process take turns before asking the database: on SQLite, threads that collide
    # on its lock back off in sleeps of many milliseconds.
    claimed: list[DBTaskResult] = []
    with _CLAIMING, exclusive_transaction(DBTaskResult.objects.db):
        # The lanes' free turns, counted once their locks are held (not before: that count could be stale).
        room: dict[str, int] = {}
        held, passed = set[str](), set[str]()
        while len(claimed) < len(worker_ids):
            # Lanes found full are left out, so each pass looks further down the queue.
            skip = passed | {name for name, free in room.items() if free <= 0}
            wanted = len(worker_ids) - len(claimed)
            if wanted == 1 and not skip and lanes is None:  # one thread idle, as a pool's thread turns idle
                ready = [task] if (task := _NEXT_READY.first(now=now)) is not None else []
            else:
                tasks = _ready(now, lanes).exclude(queue_name__in=skip).select_for_update(skip_locked=True)
                ready = list(tasks[:wanted])
            if not ready:
                break
            new = {db_task.queue_name for db_task in ready} - held
            # The first pass waits for its lanes; later ones (their locks after it) take only free ones.
            locked = lock_queues(new, wait=not held)
            held |= locked
            passed |= new - locked
            if locked:
                room = free_turns(lanes)  # counted under the lanes' locks: another claimer may have taken some
            for db_task in ready:
                if db_task.queue_name not in held:
                    continue
                free = room.get(db_task.queue_name, queue_limit(db_task.queue_name))
                room[db_task.queue_name] = free - 1
                if free <= 0:
                    continue
                worker_id = worker_ids[len(claimed)]
                # The task taken (as django-tasks-db's `claim` writes it) and its run leased, in one statement.
                taken = {"status": TaskResultStatus.RUNNING, "started_at": timezone.now()}
                taken["worker_ids"] = [*db_task.worker_ids, worker_id]
                update_together(
                    (
                        Run.objects.filter(id=db_task.args_kwargs["args"][0], status=RunStatus.QUEUED),
                        {"status": RunStatus.RUNNING, "attempts": F("attempts") + 1, **lease(worker_id)},
                    ),
                    (DBTaskResult.objects.filter(pk=db_task.pk), taken),
                )
                for name, value in taken.items():
                    setattr(db_task, name, value)
                claimed.append(db_task)
    return claimed


def claim_task(worker_id: str, lanes: list[str] | None = None) -> DBTaskResult | None:
    """Take the next ready task of a lane below its limit and mark its run running under a lease."""
    claimed = claim_batch([worker_id], lanes)
    return claimed[0] if claimed else None


def drain(lanes: list[str] | None = None) -> int:
    """Run every ready queued run in this thread until none is left; how many ran (tests, `--batch`)."""
    worker_id, ran = f"{PROCESS_ID}:drain", 0
    while (db_task := claim_task(worker_id, lanes)) is not None:
        run_claimed(db_task)
        ran += 1
    return ran
