"""Sub-agents (section 10): the parent's events around a sub-agent's, which carry the envelope's `agentId` (the
`toolCallId` of the call that started it; under a sub-agent, prefixed with that sub-agent's `agentId` and "/")."""

from agents.payloads.base import EventType, Payload, optional


class SubagentStarted(Payload):
    type = EventType.SUBAGENT_STARTED
    toolCallId: str
    agentName: str
    agentDisplayName: str
    agentDescription: str
    model: str | None = optional()


class SubagentCompleted(Payload):
    type = EventType.SUBAGENT_COMPLETED
    toolCallId: str
    agentName: str
    agentDisplayName: str
    model: str | None = optional()
    durationMs: int
    totalTokens: int
    totalToolCalls: int


class SubagentFailed(SubagentCompleted):
    type = EventType.SUBAGENT_FAILED
    error: str
