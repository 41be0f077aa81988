"""Sub-agents (SPEC section 10): another agent of the tenant offered to the model as a tool, `name(task)`. Its
call runs a turn of the sub-agent's own definition (its tools, approval modes, rules, connections) inside the
parent's turn; its events join the parent's with the envelope's `agentId` (the id of the call that runs it), between
`subagent.started` and `subagent.completed` (or `subagent.failed`).

When the sub-agent asks something (an approval, a question, a client tool), its turn stops with its history,
and so does the parent's call: the requests it opens are the sub-agent's, each carrying in its engine state the
way back (`{"subagent": {parentCallId, name, agentId, conversation, ...}, "inner": the sub-agent's own state}`).
Their answers, routed by `Answers.for_subagent`, re-run the parent's call, which resumes the sub-agent's turn
where it waited (`subagent_resume` in the call's metadata). The tool itself is in `agents.engine.delegation`."""

import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.definitions import DefinitionContent
from agents.payloads import Payload, ToolExecutionStart
from console.connections import ConnectionSpec


class Emit(Protocol):
    def __call__(self, payload: Payload, agent_id: str | None = None) -> Awaitable[None]: ...


@dataclass(frozen=True)
class SubAgent:
    """What a turn needs of one sub-agent, resolved before the turn (`agents.prepare.subagents_for`)."""

    name: str
    display_name: str
    description: str
    content: DefinitionContent
    # Its version's number (its policies' contexts name it; `content.hooks` is that version's declaration).
    version: int
    connections: Mapping[str, ConnectionSpec]
    instructions: str
    rules: Sequence[Any] = ()
    subagents: Mapping[str, "SubAgent"] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return self.content.model.name or self.content.model.connection


class Tagged:
    """`emit` for a sub-agent's events: each gets the sub-agent's `agentId` (a deeper sub-agent's keep theirs)."""

    def __init__(self, emit: Emit, agent_id: str) -> None:
        self.emit, self.agent_id = emit, agent_id

    async def __call__(self, payload: Payload, agent_id: str | None = None) -> None:
        await self.emit(payload, agent_id or self.agent_id)


def totals(sub: SubAgent, call_id: str, state: dict[str, Any]) -> dict[str, Any]:
    """The figures of `subagent.completed` / `.failed` from the call's state."""
    return {
        "toolCallId": call_id,
        "agentName": sub.name,
        "agentDisplayName": sub.display_name,
        "model": sub.model,
        "durationMs": round((time.time() - state["startedAt"]) * 1000),
        "totalTokens": state["tokens"],
        "totalToolCalls": state["toolCalls"],
    }


class Counting:
    """A sub-agent's emit that counts the tool calls it starts."""

    def __init__(self, emit: Emit) -> None:
        self.emit, self.tool_calls = emit, 0

    @property
    def agent_id(self) -> str | None:
        """The `agentId` the events it counts are tagged with (a sub-agent's own sub-agents are named under it)."""
        return getattr(self.emit, "agent_id", None)

    async def __call__(self, payload: Payload, agent_id: str | None = None) -> None:
        if isinstance(payload, ToolExecutionStart):
            self.tool_calls += 1
        await self.emit(payload, agent_id)


def way_back(call_id: str, metadata: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The requests a waiting sub-agent's call stands for (`metadata`: what the call deferred with): each of
    the sub-agent's own, as the fields of its `PendingCall`, with the engine state that leads back to it."""
    state = {**metadata["subagent"], "parentCallId": call_id}
    return [(pending, {"subagent": state, "inner": pending.get("engine_state")}) for pending in metadata["pending"]]
