"""What each process counts for `GET /metrics` (SPEC section 18): decisions, turns ended, busy worker threads, open
websockets, waiting long polls, policy evaluation time. What lives in the database (open requests, the queue) is
read when scraped instead (console/views/metrics_pages.py).

Several processes: `manage.py serve` and `run_worker` keep their values in files of a folder they share
(prometheus_client's multiprocess mode, `PROMETHEUS_MULTIPROC_DIR`: console/metric_files.py sets it before the
first metric is made), and the console that is scraped sums them. The gauges are `livesum`: a process that ended is
no longer counted (`console.metric_files.forget_dead_processes`). Without the variable (tests, a shell) the values
are this process's.

Labels are bounded: a tenant (its id here, its slug once scraped: the id costs no query where a decision is
written, and a renamed tenant is shown by its name of now), an agent's name, a request kind, a decision source,
a run status, a policy's interception point. Never an argument value, a model's text or a token.
"""

import threading
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from django.db import transaction
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

REGISTRY = CollectorRegistry()
# A counter's `_created` series says when this process first counted it: noise once several processes are summed
# (the multiprocess mode never gives them).
disable_created_metrics()

# From a few seconds (a rule, an operator at the inbox) to days (a request escalated over a weekend).
DECISION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 172800, 604800)
# A policy evaluation's budget is POLICY_EVAL_BUDGET_MS (1 s by default).
POLICY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """The metrics, made on first use (`made()`): prometheus_client keeps a metric's values in memory or in files as
    it was set when the metric was made, and `manage.py serve` sets it (console.metric_files) after Django's setup
    has imported this module."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "airlock_decisions",
            "Requests decided, by who decided (the receipt's decisionSource: human, rule, policy, approval_mode,"
            " expiry, cancel, abandon, escalation).",
            ["tenant", "source"],
            registry=registry,
        )
        self.decision_seconds = Histogram(
            "airlock_request_decision_seconds",
            "From a request's opening to its decision, by kind and result (approved, denied, answered, expired,"
            " cancelled, abandoned).",
            ["tenant", "kind", "result"],
            buckets=DECISION_BUCKETS,
            registry=registry,
        )
        self.runs = Counter(
            "airlock_runs",
            "Turns ended, by the status each ended in (completed, failed, blocked, cancelled, awaiting_*).",
            ["tenant", "agent", "status"],
            registry=registry,
        )
        self.worker_threads = Gauge(
            "airlock_worker_threads",
            "Worker threads running queued runs (manage.py serve's WORKER_THREADS, run_worker's --threads).",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.busy_worker_threads = Gauge(
            "airlock_worker_threads_busy",
            "Worker threads running a turn now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.websockets = Gauge(
            "airlock_websockets_open",
            "Console websockets open (one per console tab).",
            ["tenant"],
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.long_polls = Gauge(
            "airlock_long_polls_waiting",
            "Long polls held (GET /api/requests/{id}?wait=N) waiting for their request's decision.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.policy_seconds = Histogram(
            "airlock_policy_evaluation_seconds",
            "One policy evaluation at an interception point, in the policy sandbox (its wait for a worker included).",
            ["tenant", "point"],
            buckets=POLICY_BUCKETS,
            registry=registry,
        )


_MADE: list[Metrics] = []
_MAKING = threading.Lock()


def made() -> Metrics:
    """The process's metrics, made by the first caller."""
    if not _MADE:
        with _MAKING:
            if not _MADE:
                _MADE.append(Metrics(REGISTRY))
    return _MADE[0]


def made_yet() -> bool:
    return bool(_MADE)


def count_decision(pending: Any, source: str, now: Any) -> None:
    """Count the decision just written on `pending` (approvals.decisions, the one door) once it is committed."""
    seconds = max((now - pending.opened_at).total_seconds(), 0.0)
    tenant, kind, result = str(pending.tenant_id), str(pending.kind), _result(pending)
    transaction.on_commit(partial(_decided, tenant, source, kind, result, seconds))


def _decided(tenant: str, source: str, kind: str, result: str, seconds: float) -> None:
    made().decisions.labels(tenant, source).inc()
    made().decision_seconds.labels(tenant, kind, result).observe(seconds)


def _result(pending: Any) -> str:
    answer = pending.answer
    if answer is None:
        return str(pending.status)  # closed unanswered: expired, cancelled, abandoned
    if isinstance(answer, dict) and "approved" in answer:
        return "approved" if answer["approved"] else "denied"
    return "answered"


def run_ended(tenant_id: int, agent: str, status: str) -> None:
    """Count a turn's end (agents.outcomes.finish_run) once it is committed."""
    transaction.on_commit(partial(_ran, str(tenant_id), agent, str(status)))


def _ran(tenant: str, agent: str, status: str) -> None:
    made().runs.labels(tenant, agent, status).inc()


def worker_threads(change: int) -> None:
    """A pool of `change` threads started (or, negative, stopped)."""
    made().worker_threads.inc(change)


def worker_busy() -> AbstractContextManager[object]:
    """Around a worker thread's turn."""
    return made().busy_worker_threads.track_inprogress()


def long_poll() -> AbstractContextManager[object]:
    """Around a long poll held."""
    return made().long_polls.track_inprogress()


def websocket_opened(tenant_id: int) -> None:
    made().websockets.labels(str(tenant_id)).inc()


def websocket_closed(tenant_id: int) -> None:
    made().websockets.labels(str(tenant_id)).dec()


def policy_evaluated(tenant: str, point: str, seconds: float) -> None:
    """One evaluation in the policy sandbox; `tenant` as the sandbox knows its tasks' tenant (the id)."""
    made().policy_seconds.labels(tenant, point).observe(seconds)
