"""The conversation: the user's message, its documents, the assistant's turns, messages, reasoning, usage."""

from typing import Any

from pydantic import Field

from agents.payloads.base import EventType, Kept, Payload, Shape, Transient, optional


class UserMessage(Payload):
    type = EventType.USER_MESSAGE
    content: str


class DocumentAttached(Payload):
    type = EventType.DOCUMENT_ATTACHED
    name: str
    size: int


class TurnStart(Payload):
    type = EventType.ASSISTANT_TURN_START
    turnId: str


class TurnEnd(Payload):
    type = EventType.ASSISTANT_TURN_END
    turnId: str


class ToolRequest(Shape):
    toolCallId: str
    name: str
    arguments: dict[str, Any]


class AssistantMessage(Payload):
    type = EventType.ASSISTANT_MESSAGE
    messageId: str
    content: str
    toolRequests: list[ToolRequest] | None = optional()
    outputTokens: int | None = optional()


class AssistantMessageDelta(Transient):
    type = EventType.ASSISTANT_MESSAGE_DELTA
    messageId: str
    deltaContent: str


class AssistantReasoning(Payload):
    type = EventType.ASSISTANT_REASONING
    reasoningId: str
    content: str


class AssistantReasoningDelta(Transient):
    type = EventType.ASSISTANT_REASONING_DELTA
    reasoningId: str
    deltaContent: str


class AssistantUsage(Kept):
    """One per model call."""

    type = EventType.ASSISTANT_USAGE
    model: str
    inputTokens: int
    outputTokens: int
    cacheReadTokens: int | None = optional()
    duration: int = Field(description="milliseconds")
    cost: float | None = optional()
