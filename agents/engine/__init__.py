"""The engine adapter: one turn of an agent definition on pydantic-ai, the only package that talks to it.

It knows nothing of the database. The caller (agents/run_lifecycle.py) gives it the definition and a `TurnContext` (the
resolved instructions, the stored conversation, the new prompt or the answers, the active rules and an `emit`
callback); it gets back a TurnOutcome: the output, the calls now waiting on the outside world, the
conversation to store, the usage, or a TurnError.

Its modules, from the bottom: `subagent_turns` (what a turn needs of a sub-agent), `scripted` and `providers` (the
models), `permissions`, `mcp`, `seams` (the model-call limit and the policy points in a pydantic-ai turn),
`outcome`, `answers`, `context`, `gate` (the tool gate), `builder` (the cached agents), `deferred` (deferred calls
and requests), `translate` (stream events to payloads), `delegation` (sub-agents as tools) and `turn`.
"""

from agents.engine.answers import Answers
from agents.engine.builder import server_tool_schema, warm_engine
from agents.engine.context import TurnContext, TurnDeps
from agents.engine.gate import GatedToolset
from agents.engine.outcome import PendingCall, RequestKindName, TurnBlocked, TurnError, TurnOutcome
from agents.engine.turn import drive, run_turn

__all__ = [
    "Answers",
    "GatedToolset",
    "PendingCall",
    "RequestKindName",
    "TurnBlocked",
    "TurnContext",
    "TurnDeps",
    "TurnError",
    "TurnOutcome",
    "drive",
    "run_turn",
    "server_tool_schema",
    "warm_engine",
]
