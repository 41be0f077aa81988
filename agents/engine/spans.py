"""The spans of a turn's model and tool calls (SPEC section 18): pydantic-ai's own instrumentation, which follows
the OpenTelemetry GenAI conventions (`chat <model>`, `execute_tool <tool>`), with its content capture off.

The run's span is Airlock's (`agents.run_lifecycle.execute`, `invoke_agent <agent>`, current while the turn
runs), so pydantic-ai's agent-run span is left out: the calls' spans are the run span's children, and a
sub-agent's calls nest under the tool call that runs it.
"""

from typing import Any

from pydantic_ai.capabilities import AbstractCapability, Instrumentation, WrapRunHandler
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext

from console import telemetry

# Built once per tracer provider: the settings make their histograms when built.
_SETTINGS: dict[int, InstrumentationSettings] = {}


class CallSpans(Instrumentation):
    """pydantic-ai's model-request and tool spans, without its run span (the run's span is Airlock's)."""

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        return await handler()


def call_spans() -> list[AbstractCapability[Any]]:
    """The capability an engine agent carries for its calls' spans while tracing is on; none when it is off."""
    provider = telemetry.tracer_provider()
    if provider is None:
        return []
    settings = _SETTINGS.get(id(provider))
    if settings is None:
        _SETTINGS.clear()  # a provider replaced (tests install their own): its settings are not used again
        settings = _SETTINGS[id(provider)] = InstrumentationSettings(
            tracer_provider=provider,
            # No prompts, completions, instructions, tool arguments or results, no binary content, and not the
            # request's parameters (the output schema and tool metadata): names, ids, models, token counts only.
            include_content=False,
            include_binary_content=False,
            include_model_request_parameters=False,
        )
    return [CallSpans(settings=settings)]


def tracing_key() -> str:
    """What tells an agent built while tracing from one built without (`agents.engine.builder.agent_for`'s key)."""
    provider = telemetry.tracer_provider()
    return "" if provider is None else f" traced:{id(provider)}"
