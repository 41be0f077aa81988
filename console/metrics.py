"""What each process counts for `GET /metrics` (SPEC section 18): decisions, turns ended, busy worker threads, open
websockets, waiting long polls, policy evaluation time. What lives in the database (open requests, the queue) is
read when scraped instead (console/views/metrics_pages.py).

Several processes: `manage.py serve` and `run_worker` keep their values in files of a folder they share
(prometheus_client's multiprocess mode, `PROMETHEUS_MULTIPROC_DIR`: console/metric_files.py sets it before this
module is imported), and the console that is scraped sums them. The gauges are `livesum`: a process that ended is
no longer counted (`forget_dead_processes`). Without the variable (tests, a shell) the values are this process's.

Labels are bounded: a tenant (its id here, its slug once scraped: the id costs no query where a decision is
written, and a renamed tenant is shown by its name of now), an agent's name, a request kind, a decision source,
a run status, a policy's interception point. Never an argument value, a model's text or a token.
"""

import glob
import os
import re
from functools import partial
from pathlib import Path
from typing import Any

from django.db import transaction
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from console.metric_files import forget_process

REGISTRY = CollectorRegistry()
# A counter's `_created` series says when this process first counted it: noise once several processes are summed
# (the multiprocess mode never gives them).
disable_created_metrics()

# From a few seconds (a rule, an operator at the inbox) to days (a request escalated over a weekend).
DECISION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 172800, 604800)
# A policy evaluation's budget is POLICY_EVAL_BUDGET_MS (1 s by default).
POLICY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

DECISIONS = Counter(
    "airlock_decisions",
    "Requests decided, by who decided (the receipt's decisionSource: human, rule, policy, approval_mode, expiry,"
    " cancel, abandon, escalation).",
    ["tenant", "source"],
    registry=REGISTRY,
)
DECISION_SECONDS = Histogram(
    "airlock_request_decision_seconds",
    "From a request's opening to its decision, by kind and result (approved, denied, answered, expired, cancelled,"
    " abandoned).",
    ["tenant", "kind", "result"],
    buckets=DECISION_BUCKETS,
    registry=REGISTRY,
)
RUNS = Counter(
    "airlock_runs",
    "Turns ended, by the status each ended in (completed, failed, blocked, cancelled, awaiting_*).",
    ["tenant", "agent", "status"],
    registry=REGISTRY,
)
WORKER_THREADS = Gauge(
    "airlock_worker_threads",
    "Worker threads running queued runs (manage.py serve's WORKER_THREADS, run_worker's --threads).",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
BUSY_WORKER_THREADS = Gauge(
    "airlock_worker_threads_busy",
    "Worker threads running a turn now.",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
WEBSOCKETS = Gauge(
    "airlock_websockets_open",
    "Console websockets open (one per console tab).",
    ["tenant"],
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
LONG_POLLS = Gauge(
    "airlock_long_polls_waiting",
    "Long polls held (GET /api/requests/{id}?wait=N) waiting for their request's decision.",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
POLICY_SECONDS = Histogram(
    "airlock_policy_evaluation_seconds",
    "One policy evaluation at an interception point, in the policy sandbox (its wait for a worker included).",
    ["tenant", "point"],
    buckets=POLICY_BUCKETS,
    registry=REGISTRY,
)


def request_decided(pending: Any, source: str, now: Any) -> None:
    """Count the decision just written on `pending` (approvals.decisions, the one door) once it is committed."""
    seconds = max((now - pending.opened_at).total_seconds(), 0.0)
    tenant, kind, result = str(pending.tenant_id), str(pending.kind), _result(pending)
    transaction.on_commit(partial(_decided, tenant, source, kind, result, seconds))


def _decided(tenant: str, source: str, kind: str, result: str, seconds: float) -> None:
    DECISIONS.labels(tenant, source).inc()
    DECISION_SECONDS.labels(tenant, kind, result).observe(seconds)


def _result(pending: Any) -> str:
    answer = pending.answer
    if answer is None:
        return str(pending.status)  # closed unanswered: expired, cancelled, abandoned
    if isinstance(answer, dict) and "approved" in answer:
        return "approved" if answer["approved"] else "denied"
    return "answered"


def run_ended(tenant_id: int, agent: str, status: str) -> None:
    """Count a turn's end (agents.outcomes.finish_run) once it is committed."""
    transaction.on_commit(RUNS.labels(str(tenant_id), agent, str(status)).inc)


def websocket_opened(tenant_id: int) -> None:
    WEBSOCKETS.labels(str(tenant_id)).inc()


def websocket_closed(tenant_id: int) -> None:
    WEBSOCKETS.labels(str(tenant_id)).dec()


def policy_evaluated(tenant: str, point: str, seconds: float) -> None:
    """One evaluation in the policy sandbox; `tenant` as the sandbox knows its tasks' tenant (the id)."""
    POLICY_SECONDS.labels(tenant, point).observe(seconds)


_PROCESS_FILE = re.compile(r"_(\d+)\.db$")


def forget_dead_processes(folder: str) -> list[int]:
    """Drop the live gauges of processes of `folder` that ended without saying so (killed, a machine's crash), so
    their busy threads, sockets and polls no longer count; their counters stay, as Prometheus expects of a counter.
    The processes sharing a folder run on one machine (the folder is local), so a process id says whether one
    lives. The ids forgotten."""
    dead: set[int] = set()
    for path in glob.glob(os.path.join(folder, "gauge_live*_*.db")):
        found = _PROCESS_FILE.search(path)
        if found is not None and not _alive(int(found[1])):
            dead.add(int(found[1]))
    for pid in dead:
        forget_process(pid, Path(folder))
    return sorted(dead)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True
