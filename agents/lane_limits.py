"""How many turns a lane may run at once (`RUN_LANES`) and how many it has free now, counted under the lane's lock
as every claim (agents/claims.py) and every hand-over (`agents.queue.enqueue`) counts it."""

from django.conf import settings
from django.db import connection
from django.db.models import Count

from agents.lanes import queue_name
from agents.models import Run, RunStatus
from console.sql import Constant


def lane_limit(lane: str) -> int:
    return settings.RUN_LANES.get(lane, settings.RUN_LANE_CONCURRENCY)


def queue_limit(name: str) -> int:
    """The limit of the lane a task queue carries (`queue_name` shortens long lane names)."""
    return next((limit for lane, limit in settings.RUN_LANES.items() if queue_name(lane) == name), lane_limit(name))


# The running turns of each lane that has some (a queued run's: a turn run in a request has no task).
_BUSY = Constant(
    lambda: (
        Run.objects.filter(status=RunStatus.RUNNING)
        .exclude(task_id="")
        .values("lane")
        .annotate(n=Count("id"))
        .values_list("lane", "n")
    )
)


def free_turns(lanes: list[str] | None) -> dict[str, int]:
    """Free turns per task queue of the lanes (None: all) that have running runs (the others have their whole
    limit). Every lane's are counted: one statement, compiled once (console.sql), whichever lanes are asked."""
    return {queue_name(lane): lane_limit(lane) - n for lane, n in _BUSY.rows() if lanes is None or lane in lanes}


def lock_queues(names: set[str], wait: bool) -> set[str]:
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


def has_room(lane: str) -> bool:
    """Whether `lane` may run one more turn now, counted under its lock (held until the caller's transaction ends)
    as a claim counts it."""
    name = queue_name(lane)
    lock_queues({name}, wait=True)
    return free_turns([lane]).get(name, queue_limit(name)) > 0
