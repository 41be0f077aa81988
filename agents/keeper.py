"""The keeper: one thread per process that runs turns. Every second it renews the leases of the turns running here,
writes the events of long turns as they come and cancels turns whose cancel was asked in another process
(agents/turns.py); and it reclaims runs whose lease ran out (their process died): queued again when the failure may
pass and no tool with side effects ran, otherwise failed `worker_lost`. Answers a reclaimed run carried go back to
its session, never lost."""

import logging
from datetime import datetime
from typing import Any

from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents.engine import TurnError
from agents.models import Run, RunStatus
from agents.outcomes import finish_run
from agents.queue import load_started, loaded_runs, retry
from agents.run_lifecycle import ExecutionResult
from agents.turns import PROCESS_ID, keep_held, keeper_started, lease
from console.periodic import start_periodic
from console.sql import Prepared

logger = logging.getLogger(__name__)

# Read every second of every serving process, most often finding none (issue 56: compiling its four joins cost an
# idle console more than the rest of its periodic work): compiled once.
_LOST = Prepared(
    lambda now: loaded_runs().filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)[:100], now=datetime
)


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
    for run in _LOST.all(now=now):
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
        if not retry(started, error):
            finish_run(started, ExecutionResult(None, error))
        reclaimed.append(run)
    return reclaimed


def start_keeper(every_seconds: float = 1.0) -> None:
    """Start the keeper thread of this process (once)."""
    keeper_started()
    start_periodic("keeper", every_seconds, keep)
