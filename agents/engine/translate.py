"""pydantic-ai's stream events and replies as Airlock's event payloads (SPEC section 10): `EventTranslator`."""

import uuid
from typing import Any

from pydantic_ai import (
    FunctionToolCallEvent,
    ModelResponse,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
)

from agents.engine.seams import ModelCall
from agents.engine.subagent_turns import Emit
from agents.payloads import (
    AssistantMessage,
    AssistantMessageDelta,
    AssistantReasoning,
    AssistantReasoningDelta,
    AssistantUsage,
    ToolRequest,
    TurnEnd,
    TurnStart,
)


class EventTranslator:
    """pydantic-ai stream events -> the console's event types (SPEC section 10).

    Each model response is one assistant turn, as the guide's turn flow has it: `assistant.turn_start`, its text as
    `assistant.message_delta`s (and thinking as `assistant.reasoning_delta`s), then, once the response is whole,
    `assistant.reasoning`, `assistant.message` (its text and the tools it calls) and `assistant.usage` (from
    `calls`, the turn's model calls as `ModelCalls` records them); then the tools it called run, and
    `assistant.turn_end` comes when the next response starts or the run ends. A turn that goes on with answered
    calls (`resume`) opens with them, before the model speaks again."""

    def __init__(self, emit: Emit, calls: list[ModelCall]) -> None:
        self.emit = emit
        self.calls = calls
        self.turn_id: str | None = None
        # Whether the open turn's response is whole (reported): its tools run now, the next response is a new turn.
        self.reported = False
        self.message_id = ""
        self.reasoning_id = ""
        self.parts: list[Any] = []

    async def translate(self, event: Any) -> None:
        if isinstance(event, PartStartEvent):
            await self._open()
            part = event.part
            if isinstance(part, TextPart) and part.content:
                await self.emit(AssistantMessageDelta(messageId=self.message_id, deltaContent=part.content))
            elif isinstance(part, ThinkingPart) and part.content:
                await self.emit(AssistantReasoningDelta(reasoningId=self.reasoning_id, deltaContent=part.content))
        elif isinstance(event, PartDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextPartDelta) and delta.content_delta:
                await self.emit(AssistantMessageDelta(messageId=self.message_id, deltaContent=delta.content_delta))
            elif isinstance(delta, ThinkingPartDelta) and delta.content_delta:
                await self.emit(
                    AssistantReasoningDelta(reasoningId=self.reasoning_id, deltaContent=delta.content_delta)
                )
        elif isinstance(event, PartEndEvent):
            self.parts.append(event.part)
        elif isinstance(event, FunctionToolCallEvent):
            await self._report()

    async def response(self, response: ModelResponse) -> None:
        """A whole reply, when the turn does not stream (or is held until its verdict)."""
        await self._open()
        if response.text:  # one delta with the whole text: who follows the session sees it come as it would stream
            await self.emit(AssistantMessageDelta(messageId=self.message_id, deltaContent=response.text))
        self.parts = list(response.parts)
        await self._report()

    async def resume(self) -> None:
        """Open the turn in which answered calls go on (it has no response of its own)."""
        await self._open()
        self.reported = True

    async def _open(self) -> None:
        """The turn of a new response (the turn before it ends first, once its tools ran)."""
        if self.turn_id is not None and self.reported:
            await self._end()
        if self.turn_id is None:
            self.turn_id = str(uuid.uuid4())
            self.message_id, self.reasoning_id, self.parts, self.reported = (
                str(uuid.uuid4()),
                str(uuid.uuid4()),
                [],
                False,
            )
            await self.emit(TurnStart(turnId=self.turn_id))

    async def _report(self) -> None:
        """The open turn's response, whole: its reasoning, message and usage."""
        if self.turn_id is None or self.reported:
            return
        parts, self.reported = self.parts, True
        thinking = "".join(p.content for p in parts if isinstance(p, ThinkingPart))
        if thinking:
            await self.emit(AssistantReasoning(reasoningId=self.reasoning_id, content=thinking))
        call = self.calls[-1] if self.calls else None
        self.calls.clear()
        requests = [
            ToolRequest(toolCallId=p.tool_call_id, name=p.tool_name, arguments=p.args_as_dict())
            for p in parts
            if isinstance(p, ToolCallPart)
        ]
        content = "".join(p.content for p in parts if isinstance(p, TextPart))
        if content or requests:
            await self.emit(
                AssistantMessage(
                    messageId=self.message_id,
                    content=content,
                    toolRequests=requests or None,
                    outputTokens=call.output_tokens if call is not None else None,
                )
            )
        if call is not None:
            usage = AssistantUsage(
                model=call.model,
                inputTokens=call.input_tokens,
                outputTokens=call.output_tokens,
                cacheReadTokens=call.cache_read_tokens or None,
                duration=call.duration_ms,
            )
            await self.emit(usage)

    async def _end(self) -> None:
        turn_id, self.turn_id = self.turn_id, None
        if turn_id is not None:
            await self.emit(TurnEnd(turnId=turn_id))

    async def finish(self) -> None:
        await self._report()
        await self._end()
