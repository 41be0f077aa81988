"""The eight interception points of AGENT-HOOKS-0.1 (SPEC section 8), each declared once: what a verdict there is
about, what a deny does, whether an escalation waits for an operator, and which later event carries the target a
verdict let through. The engine emits each where it sits (agents/engine/turn.py, gate.py, seams.py);
the declaration checks (`declarations.py`), the turn's emitter (`turn_policies.py`), the Try form and the run page read
them here."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from agents.payloads import EventType

# What a deny does at a point: the run ends `blocked`; the call does not run (its `permission.completed` says
# `denied-by-permission-request-hook`); the model reads the denial as the call's result; or nothing, as the
# point's verdict is recorded and never enforced.
Deny = Literal["blocks_run", "denies_call", "fails_call", "recorded"]


@dataclass(frozen=True)
class Point:
    """One interception point. `about`: what a verdict there is about, in words (`{tool}`: the call's tool);
    `liftable`: an escalation there waits for an operator (an approval request), elsewhere it is a deny;
    `tool_call`: its context names a tool call; `carried_by`: the later events that carry the target it let
    through, by type: the key of their data and the run page's label for it."""

    name: str
    about: str
    deny: Deny
    liftable: bool = False
    tool_call: bool = False
    carried_by: Mapping[str, tuple[str, str]] = field(default_factory=dict)


INTERCEPTION_POINTS: dict[str, Point] = {
    point.name: point
    for point in (
        Point("agent_startup", "the start of the turn", "blocks_run"),
        Point(
            "input",
            "the user's message",
            "blocks_run",
            carried_by={EventType.USER_MESSAGE: ("content", "The message as recorded")},
        ),
        Point("pre_model_call", "a model request", "blocks_run"),
        Point("post_model_call", "a model response", "blocks_run"),
        Point(
            "pre_tool_call",
            "{tool}",
            "denies_call",
            liftable=True,
            tool_call=True,
            # A call the policy let through may still wait for an approval, or be a client's to run.
            carried_by={
                EventType.TOOL_EXECUTION_START: ("arguments", "The tool ran with"),
                # An approval asked of a person, or decided by a rule (its requested / completed pair).
                EventType.PERMISSION_REQUESTED: ("args", "Approval was asked for"),
                EventType.EXTERNAL_TOOL_REQUESTED: ("arguments", "The client was asked to run it with"),
            },
        ),
        Point(
            "post_tool_call",
            "the result of {tool}",
            "fails_call",
            tool_call=True,
            carried_by={EventType.TOOL_EXECUTION_COMPLETE: ("result", "The model was given")},
        ),
        Point(
            "output",
            "the answer",
            "blocks_run",
            liftable=True,
            carried_by={EventType.ASSISTANT_MESSAGE: ("content", "The answer as stored")},
        ),
        Point("agent_shutdown", "the end of the turn", "recorded"),
    )
}
# In the order a turn passes them.
POINTS = tuple(INTERCEPTION_POINTS)
# Where an escalation waits for an operator; elsewhere it is a deny.
LIFTABLE = tuple(name for name, point in INTERCEPTION_POINTS.items() if point.liftable)
