"""What a turn is given (`TurnContext`, shared by `run_turn`, `drive` and the loop) and what its tools see of it
(`TurnDeps`, pydantic-ai's `deps`)."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.engine.answers import Answers
from agents.engine.seams import ModelCall
from agents.engine.subagent_turns import Emit
from agents.policies import TurnPolicies


class OfferedClientTool(Protocol):
    """A client tool as the model is offered it: a definition's (`agents.definitions.ClientTool`) or one the run's
    caller gives for the turn (`agents.run_requests.RunClientTool`)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TurnContext:
    """One turn's inputs: the resolved instructions, the stored conversation, the new prompt (None when the turn
    goes on from answers) with its documents, the answers, the active rules, the client tools the run's caller offers
    besides the definition's (`client_tools`, never the cached agent's: `agents.engine.builder`) and where its events
    go. With
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
    client_tools: Sequence[OfferedClientTool] = ()


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
