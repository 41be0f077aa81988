"""Request kinds (SPEC section 4): what a run may ask while it runs. Each kind says, once, in its own package,
which answer fields it takes and what it stores, the checks an answer must pass, how the answer reaches the
engine and which event records it, the event and run status that announce it, and how the audit describes it.

`base` is what every kind declares (`Kind`) and shares, `answer_form` what their inbox forms share; `registry` finds
them (`KINDS`: each package's `KIND`) and is what the run lifecycle calls. A new kind: docs/architecture.md, "A new
request kind".
"""

from approvals.kinds.base import AnswerRefused, Kind, own_state, schema_problems
from approvals.kinds.registry import (
    GATING,
    KINDS,
    RAN_IN_FAILED_TURN,
    SELECTABLE,
    awaiting_status,
    close,
    closed,
    hand_over,
    parameters_schema,
    routed,
    to_engine,
)

__all__ = [
    "GATING",
    "KINDS",
    "RAN_IN_FAILED_TURN",
    "SELECTABLE",
    "AnswerRefused",
    "Kind",
    "awaiting_status",
    "close",
    "closed",
    "hand_over",
    "own_state",
    "parameters_schema",
    "routed",
    "schema_problems",
    "to_engine",
]
