"""The registry of request kinds, `KINDS` in the order a run waits on them, and what the run lifecycle asks of
the kind of a request: the status a run waits in, giving an answer to the engine, closing a request unanswered.

Every package of approvals/kinds/ is a kind: the `Kind` it declares as `KIND`, placed in `KINDS` by its `waits`.
So a new kind is its package (and its template), not a line here as well.

Its names are `agents.request_kinds.REQUEST_KINDS` (tests/approvals/test_kinds.py holds the two together).
"""

import importlib
import pkgutil
from pathlib import Path
from typing import Any

from agents.engine import Answers
from agents.events import EventLog
from agents.models import RunStatus
from agents.payloads import Payload
from approvals.kinds.base import Kind
from approvals.models import PendingRequest

RAN_IN_FAILED_TURN = (
    "This call already ran, in a turn that failed before its result was kept; it was not run again. "
    "Repeat it only if the user asks."
)


def _found() -> list[Kind]:
    """The `KIND` of every package beside this module, in the order a run waits on them (`Kind.waits`)."""
    packages = sorted(found.name for found in pkgutil.iter_modules([str(Path(__file__).parent)]) if found.ispkg)
    kinds: list[Kind] = [importlib.import_module(f"{__package__}.{name}").KIND for name in packages]
    return sorted(kinds, key=lambda kind: kind.waits)


# In the order a run waits on them: with several kinds open, its status is the first one's `awaiting`.
KINDS: dict[str, Kind] = {kind.name: kind for kind in _found()}


# The kinds a batch or selection bar answers with one yes or no (`Kind.selectable`).
SELECTABLE = [name for name, kind in KINDS.items() if kind.selectable]

# The kinds whose request holds a tool call until a yes (`Kind.gates_call`): what policies and rules decide.
GATING = [name for name, kind in KINDS.items() if kind.gates_call]


def awaiting_status(kinds: set[str]) -> RunStatus:
    """The status of a run waiting on requests of `kinds`."""
    return next(kind.awaiting for name, kind in KINDS.items() if name in kinds)


def to_engine(pending: PendingRequest, answers: Answers) -> None:
    """Put the stored answer of `pending` into the turn's `answers` (where `routed` says), writing nothing: what
    `hand_over` gives the engine, and what a queued run's worker rebuilds. A call that already ran in a failed turn
    is denied, never run twice."""
    if _ran_in_failed_turn(pending):
        routed(pending, answers).deny(pending.call_id, RAN_IN_FAILED_TURN)
    else:
        KINDS[pending.kind].to_engine(pending, routed(pending, answers))


def hand_over(pending: PendingRequest, answers: Answers, log: EventLog) -> None:
    """Give the stored answer of `pending` to the engine (`to_engine`) and record in the run's log that the run
    carries it."""
    to_engine(pending, answers)
    kind = KINDS[pending.kind]
    with log.speaking_for(pending.asker_id):
        if _ran_in_failed_turn(pending):
            # Its SDK completion was recorded by the turn that failed; the call is not run again.
            log.record(kind.answered(pending, ranInFailedTurn=True))
        else:
            kind.record_carried(pending, log)


def _ran_in_failed_turn(pending: PendingRequest) -> bool:
    return bool((pending.answer or {}).get("ranInFailedTurn"))


def parameters_schema(pending: PendingRequest) -> dict[str, Any] | None:
    """The JSON schema of the parameters of the tool `pending` asks about, where the console knows it: a client
    tool's (its definition), a server tool's (its function); None for an MCP tool (its schema lives on its server)
    and for the kinds that ask about no tool's call."""
    return KINDS[pending.kind].parameters(pending)


def closed(pending: PendingRequest) -> Payload:
    """The SDK's completion of `pending`, closed without an answer (its status says how)."""
    return KINDS[pending.kind].unanswered(pending)


def close(pending: PendingRequest, answers: Answers, reason: str) -> None:
    """Tell the engine that the call of `pending` closed without an answer and did not run, for `reason`."""
    KINDS[pending.kind].close(pending, routed(pending, answers), reason)


def routed(pending: PendingRequest, answers: Answers) -> Answers:
    """Where the answer to `pending` goes: the turn's answers, or, for a sub-agent's request, the answers of
    the call that runs the sub-agent (agents/engine/subagent_turns.py)."""
    state = pending.engine_state or {}
    while "subagent" in state:
        answers = answers.for_subagent(state["subagent"])
        state = state.get("inner") or {}
    return answers
