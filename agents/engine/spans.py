"""The spans of a turn's model and tool calls (SPEC section 18), in the OpenTelemetry GenAI conventions: `chat
<model>` (a client span: the provider, the model asked and the one that answered, token counts, finish reason) and
`execute_tool <tool>` (the tool's name and call id). Names, ids, models and counts only: never a prompt, a reply,
instructions, a tool's description, arguments or result.

The run's span is Airlock's (`agents.run_lifecycle.execute`, `invoke_agent <agent>`, current while the turn
runs): the calls' spans are its children, a sub-agent's calls nest under the tool call that runs it, and each
carries the run span's baggage (the agent's name and the conversation id, `console.telemetry.run_span`).

Not pydantic-ai's own instrumentation (`Instrumentation`): with its content capture off it still prepared each
request a second time and serialized the conversation's shape and the tools' schemas into every `chat` span, which
cost a traced turn about 9% (bench/tracing_overhead.py: 1.10x with it, 1.00x without the call spans).
"""

import itertools
from typing import Any

from opentelemetry import baggage
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from pydantic_ai.capabilities import AbstractCapability, WrapModelRequestHandler, WrapToolExecuteHandler
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext, ToolDefinition

from console import telemetry

SCOPE = "airlock.engine"


class CallSpans(AbstractCapability[Any]):
    """A `chat` span around each model request and an `execute_tool` span around each tool call of the turn."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def _span(self, name: str, attributes: dict[str, Any], kind: SpanKind) -> Any:
        # An exception's message and traceback may quote content: the span keeps its type only (`_failed`).
        return self.tracer.start_as_current_span(
            name, kind=kind, attributes=attributes, record_exception=False, set_status_on_exception=False
        )

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: WrapModelRequestHandler
    ) -> ModelResponse:
        model = request_context.model
        attributes = {
            **_carried(),
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": model.system,
            "gen_ai.request.model": model.model_name,
        }
        name = f"chat {model.model_name}"
        with self._span(name, attributes, SpanKind.CLIENT) as span:
            try:
                response = await handler(request_context)
            except Exception as error:
                _failed(span, error)
                raise
            usage = response.usage
            answered = {
                "gen_ai.response.model": response.model_name or model.model_name,
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
            }
            if response.finish_reason:
                answered["gen_ai.response.finish_reasons"] = (response.finish_reason,)
            span.set_attributes(answered)
            return response

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        attributes = {
            **_carried(),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool_name,
            "gen_ai.tool.call.id": call.tool_call_id,
            "gen_ai.tool.type": "function",
        }
        name = f"execute_tool {call.tool_name}"
        with self._span(name, attributes, SpanKind.INTERNAL) as span:
            try:
                return await handler(args)
            except (ApprovalRequired, CallDeferred) as waiting:
                span.set_attribute("airlock.tool.deferral", type(waiting).__name__)  # it waits for an answer
                raise
            except ModelRetry:
                raise  # the model is asked again: the call has not failed
            except Exception as error:
                _failed(span, error)
                raise


# What the run's span carries to its calls' spans as baggage (`console.telemetry.run_span`).
CARRIED = ("gen_ai.agent.name", "gen_ai.conversation.id")


def _carried() -> dict[str, Any]:
    """The run span's agent name and conversation id, as attributes of a call's span (nothing else a context may
    carry as baggage)."""
    return {key: value for key in CARRIED if (value := baggage.get_baggage(key)) is not None}


def _failed(span: Any, error: BaseException) -> None:
    """A call that raised: the error's type, never its message (which may quote content)."""
    span.set_attribute("error.type", type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR))


# The tracer provider the engine's agents are built for now (tests install their own), held so that its id is
# never another's; a number of its own, part of `agent_for`'s key (an agent built for an earlier provider is not used
# again: a later one may take the earlier one's id, never its number); and its calls' capability, built once.
_CURRENT: list[tuple[Any, int, CallSpans]] = []
_NUMBERS = itertools.count(1)


def _for(provider: Any) -> tuple[int, CallSpans]:
    if not _CURRENT or _CURRENT[0][0] is not provider:
        _CURRENT[:] = [(provider, next(_NUMBERS), CallSpans(provider.get_tracer(SCOPE)))]
    _, number, capability = _CURRENT[0]
    return number, capability


def call_spans() -> list[AbstractCapability[Any]]:
    """The capability an engine agent carries for its calls' spans while tracing is on; none when it is off."""
    provider = telemetry.tracer_provider()
    return [] if provider is None else [_for(provider)[1]]


def tracing_key() -> str:
    """What tells an agent built while tracing from one built without (`agents.engine.builder.agent_for`'s key)."""
    provider = telemetry.tracer_provider()
    return "" if provider is None else f" traced:{_for(provider)[0]}"
