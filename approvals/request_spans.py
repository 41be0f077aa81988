"""A request's span (SPEC section 18): `airlock.request`, from opened to decided, recorded once its decision is
committed (`approvals.decisions` calls `trace_decision` for every decision it writes), in whichever process decided
it, with its run's span as parent and link (`console.telemetry.run_span_context`, from the run's row alone).

An external agent's request (its run is no turn of Airlock's, so it has no span) is recorded in the trace of the
call that opened it, when that call carried a `traceparent`. What the span says: the request's kind, tool, result,
who decided (the receipt's decision source), how long it waited, its approvals, agent and tenant; never the
arguments, the answer's words, or who the person is.
"""

import copy
from datetime import datetime
from functools import partial
from typing import Any

from django.db import transaction

from approvals.receipts import result_kind
from console import telemetry


def trace_decision(pending: Any, source: str, now: datetime) -> None:
    """Record the span of `pending`, just decided by `source` at `now`, once the decision is committed (nothing
    with tracing off, nor when the decision rolls back)."""
    if not telemetry.tracing():
        return
    transaction.on_commit(partial(_record, copy.copy(pending), source, now), robust=True)


def _record(pending: Any, source: str, now: datetime) -> None:
    run = pending.run
    answer = pending.answer  # None: closed unanswered
    attributes: dict[str, str | int] = {
        "airlock.request.id": str(pending.id),
        "airlock.request.kind": str(pending.kind),
        "airlock.request.result": result_kind(pending.kind, pending.status, answer) if answer else str(pending.status),
        "airlock.decision.source": source,
        "airlock.request.wait_ms": max(0, round((now - pending.opened_at).total_seconds() * 1000)),
        "airlock.request.approvals": len((answer or {}).get("approvals") or ()),
        "gen_ai.agent.name": pending.agent.name,
        "airlock.tenant": pending.tenant.slug,
        "airlock.run.id": str(run.id),
    }
    if pending.tool_name:
        attributes["gen_ai.tool.name"] = pending.tool_name
    if pending.answered_via and answer:
        attributes["airlock.request.via"] = str(pending.answered_via)
    if "external" in (pending.engine_state or {}):
        caller = telemetry.span_context_of(run.traceparent)
        parent, links = caller, [caller] if caller is not None else []
    else:
        parent = telemetry.run_span_context(run.id, run.traceparent)
        links = [parent]
    telemetry.record_span("airlock.request", pending.opened_at, now, parent=parent, links=links, attributes=attributes)
