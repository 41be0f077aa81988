"""What a turn is given (`TurnContext`, shared by `run_turn`, `drive` and the loop) and what its tools see of it
(`TurnDeps`, pydantic-ai's `deps`)."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.engine.answers import Answers
from agents.engine.seams import ModelCall
from agents.engine.subagent_turns import Emit
from agents.policies import TurnPolicies


@dataclass(frozen=True)
class TurnContext:
    """One turn's inputs: the resolved instructions, the stored conversation, the new prompt (None when the turn
    goes on from answers) with its documents, the answers, the active rules and where its events go. With
    `stream` the model's reply streams (text deltas as ephemeral events); without it each reply is reported whole,
    which is cheaper when nobody watches live."""

    instructions: str
    conversation: dict[str, Any] | None
    message: str | None
    emit: Emit
    documents: Sequence[tuple[str, str]] = ()
    answers: Answers | None = None
    rules: Sequence[Any] = ()
    stream: bool = True


@dataclass
class TurnDeps:
    """What tools see of the turn (pydantic-ai's `deps`)."""

    emit: Emit
    rules: Sequence[Any]
    policies: TurnPolicies | None = None
    # The model-call limit of the turn and the requests its conversation had made before it.
    call_limit: tuple[int, int] | None = None
    # The model calls made so far, and when the one under way began (agents.engine.seams.ModelCalls).
    model_calls: list[ModelCall] = field(default_factory=list)
    call_started: float = 0.0
