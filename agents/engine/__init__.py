"""The engine adapter: one turn of an agent definition on pydantic-ai.

It knows nothing of the database. The caller (agents/runs.py) gives it the definition, the resolved
instructions, the stored conversation, the new prompt or the answers, the active rules and an `emit`
callback; it gets back a TurnOutcome: the output, the calls now waiting on the outside world, the
conversation to store, the usage, or a TurnError.
"""

import contextlib
import hashlib
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    ApprovalRequired,
    CallDeferred,
    ConversationTypeAdapter,
    DeferredToolRequests,
    DeferredToolResults,
    ExternalToolset,
    FunctionToolCallEvent,
    FunctionToolset,
    ModelResponse,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    RunContext,
    TextPart,
    TextPartDelta,
    ThinkingPartDelta,
    Tool,
    ToolApproved,
    ToolDefinition,
    ToolDenied,
    ToolFailed,
    UnexpectedModelBehavior,
    WrapperToolset,
)
from pydantic_ai import exceptions as pai_errors
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.usage import RunUsage

from agents.definitions import DefinitionContent
from agents.engine import providers
from agents.engine.mcp import McpBridge, McpServerFailed
from agents.engine.scripted import document_prompt
from agents.events import EventType
from agents.tools import REGISTRY
from approvals.rules import first_matching
from console.connections import ConnectionSpec

Emit = Callable[[str, dict[str, Any], bool], Awaitable[None]]
RequestKindName = Literal["approval", "client_tool", "input"]


class TurnError(Exception):
    """A turn that could not finish; `code` is stable, `transient` says a retry may help."""

    def __init__(self, code: str, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.code, self.message, self.transient = code, message, transient


@dataclass
class PendingCall:
    kind: RequestKindName
    tool_name: str
    call_id: str
    arguments: dict[str, Any]
    message: str = ""
    requested_schema: dict[str, Any] | None = None
    engine_state: dict[str, Any] | None = None


@dataclass
class Answers:
    """The answers a turn carries to the engine, keyed by tool call id."""

    approvals: dict[str, ToolApproved | ToolDenied] = field(default_factory=dict)
    tool_results: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.approvals or self.tool_results or self.inputs)

    def approve(self, call_id: str, override_arguments: dict[str, Any] | None = None) -> None:
        self.approvals[call_id] = ToolApproved(override_args=override_arguments)

    def deny(self, call_id: str, reason: str) -> None:
        """The call does not run; the model reads `reason` as its result."""
        self.approvals[call_id] = ToolDenied(reason)

    def result(self, call_id: str, value: Any) -> None:
        """The result a client tool returned."""
        self.tool_results[call_id] = value

    def fail(self, call_id: str, message: str) -> None:
        """The client tool failed (or never ran); the model reads `message` as its error."""
        self.tool_results[call_id] = ToolFailed(message)

    def answer_input(self, call_id: str, answer: dict[str, Any]) -> None:
        """An elicitation's answer (action, content, the engine's state of the call)."""
        self.inputs[call_id] = answer

    def dump(self) -> dict[str, Any]:
        """JSON for a queued run's stored input; `load` reads it back."""
        approvals = {
            call_id: {"approved": True, "overrideArguments": answer.override_args}
            if isinstance(answer, ToolApproved)
            else {"approved": False, "reason": answer.message}
            for call_id, answer in self.approvals.items()
        }
        results = {
            call_id: {"error": answer.message} if isinstance(answer, ToolFailed) else {"result": answer}
            for call_id, answer in self.tool_results.items()
        }
        return {"approvals": approvals, "toolResults": results, "inputs": self.inputs}

    @classmethod
    def load(cls, data: dict[str, Any]) -> "Answers":
        approvals: dict[str, ToolApproved | ToolDenied] = {
            call_id: ToolApproved(override_args=a.get("overrideArguments"))
            if a["approved"]
            else ToolDenied(a["reason"])
            for call_id, a in data.get("approvals", {}).items()
        }
        results = {
            call_id: ToolFailed(r["error"]) if "error" in r else r["result"]
            for call_id, r in data.get("toolResults", {}).items()
        }
        return cls(approvals=approvals, tool_results=results, inputs=data.get("inputs", {}))

    def deferred_results(self) -> DeferredToolResults:
        approvals: dict[str, Any] = dict(self.approvals)
        metadata: dict[str, dict[str, Any]] = {}
        for call_id, answer in self.inputs.items():
            # An answered elicitation re-runs the MCP call from its start with the answer at hand.
            approvals[call_id] = ToolApproved()
            metadata[call_id] = {"input_answer": answer}
        return DeferredToolResults(approvals=approvals, calls=dict(self.tool_results), metadata=metadata)


@dataclass
class TurnOutcome:
    output: str | None
    pending: list[PendingCall]
    conversation: dict[str, Any]
    usage: dict[str, int]


@dataclass
class TurnDeps:
    """What tools see of the turn (pydantic-ai's `deps`)."""

    emit: Emit
    rules: Sequence[Any]


@cache
def server_tool_schema(name: str) -> dict[str, Any]:
    """The JSON schema of a server tool's parameters, as the engine gives it to the model."""
    return Tool(REGISTRY[name].function).function_schema.json_schema


def connection_for(connections: Mapping[str, ConnectionSpec], name: str) -> ConnectionSpec:
    """The settings of the connection `name`, as resolved for the run's tenant before the turn."""
    spec = connections.get(name)
    if spec is None:
        raise TurnError("unknown_connection", f"No connection named {name!r} is granted to this tenant.")
    return spec


def api_key_for(spec: ConnectionSpec) -> str | None:
    """The provider key, read from the environment variable the connection names (never stored)."""
    if not spec.api_key_env:
        return None
    api_key = os.environ.get(spec.api_key_env)
    if not api_key:
        raise TurnError("provider_key_missing", f"The environment variable {spec.api_key_env} is not set.")
    return api_key


def build_model(spec: ConnectionSpec, model_name: str, api_key: str | None = None) -> Model:
    model = providers.build_model(spec, model_name, api_key)
    if model is None:
        raise TurnError("unknown_connection", f"The connection {spec.name!r} is not a model provider.")
    return model


@dataclass
class GatedToolset(WrapperToolset[TurnDeps]):
    """Asks for approval where the definition says so (unless a rule answers) and reports each execution.

    `modes` maps tool names to their approval mode; tools not named there use `default_mode`. For an
    MCP server (`server` set) a failure of the server itself ends the turn instead of reaching the model.
    """

    modes: dict[str, str] = field(default_factory=dict)
    default_mode: str = "never"
    server: str | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[TurnDeps], tool: ToolsetTool[TurnDeps]
    ) -> Any:
        deps, call_id = ctx.deps, ctx.tool_call_id or ""
        if not ctx.tool_call_approved:
            mode = self.modes.get(name, self.default_mode)
            if mode == "every_time":
                raise ApprovalRequired(metadata={"approvalMode": mode})
            if mode == "always":
                rule = first_matching(deps.rules, name, tool_args)
                if rule is None:
                    raise ApprovalRequired(metadata={"approvalMode": mode})
                decision = {"kind": "approved-by-rule", "ruleId": str(rule.id)}
                await deps.emit(
                    EventType.PERMISSION_COMPLETED,
                    {"toolName": name, "callId": call_id, "arguments": tool_args, "result": decision},
                    False,
                )
        # MCP tools may do anything; a server tool says whether it has side effects. A run whose tool
        # with side effects started is never retried (agents/queue.py).
        side_effects = self.server is not None or getattr(REGISTRY.get(name), "side_effects", True)
        start = {"toolName": name, "callId": call_id, "arguments": tool_args, "sideEffects": side_effects}
        await deps.emit(EventType.TOOL_EXECUTION_START, start, False)
        try:
            result = await super().call_tool(name, tool_args, ctx, tool)
        except (ApprovalRequired, CallDeferred):
            raise
        except (ToolFailed, pai_errors.ModelRetry) as error:
            await self._complete(deps, name, call_id, error=str(error))
            raise
        except Exception as error:
            await self._complete(deps, name, call_id, error=f"{type(error).__name__}: {error}")
            if isinstance(error, McpServerFailed):
                raise TurnError("mcp_server_failed", str(error)) from error
            if self.server is not None:
                raise TurnError("mcp_server_failed", f"The MCP server {self.server!r} failed: {error}") from error
            # A server tool's own failure is the model's to see, not the end of the run.
            raise ToolFailed(f"{type(error).__name__}: {error}") from error
        await self._complete(deps, name, call_id, result=result)
        return result

    @staticmethod
    async def _complete(
        deps: TurnDeps, name: str, call_id: str, *, result: Any = None, error: str | None = None
    ) -> None:
        data: dict[str, Any] = {"toolName": name, "callId": call_id, "success": error is None}
        data["error" if error is not None else "result"] = error if error is not None else _jsonable(result)
        await deps.emit(EventType.TOOL_EXECUTION_COMPLETE, data, False)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


_AGENTS: dict[str, Agent[TurnDeps, Any]] = {}


def agent_for(content: DefinitionContent, connection: ConnectionSpec) -> Agent[TurnDeps, Any]:
    """An agent for the definition's model and tools on `connection`; cached by content and connection,
    as versions never change and a changed connection must take effect.

    The key is read at every turn and is part of the cache key, so that a changed or removed variable
    takes effect on the next turn (the key itself is held only by the provider's client)."""
    api_key = api_key_for(connection)
    key_digest = hashlib.sha256((api_key or "").encode()).hexdigest()
    key = f"{key_digest} {connection!r} {content.identity}"
    agent = _AGENTS.get(key)
    if agent is None:
        server_tools = FunctionToolset[TurnDeps](
            [
                Tool(REGISTRY[t.name].function, name=t.name, description=REGISTRY[t.name].description)
                for t in content.tools
            ]
        )
        modes: dict[str, str] = {t.name: t.approval for t in content.tools}
        toolsets: list[AbstractToolset[TurnDeps]] = [GatedToolset(server_tools, modes=modes)]
        if content.client_tools:
            # Only when there are some: every toolset costs each model request a little.
            client_tools = [
                ToolDefinition(name=t.name, description=t.description, parameters_json_schema=t.parameters)
                for t in content.client_tools
            ]
            toolsets.append(ExternalToolset[TurnDeps](client_tools))
        agent = Agent(
            build_model(connection, content.model.name or "", api_key),
            output_type=[str, DeferredToolRequests],
            deps_type=TurnDeps,
            toolsets=toolsets,
            retries=1,
        )
        if len(_AGENTS) > 256:
            _AGENTS.clear()
        _AGENTS[key] = agent
    return agent


async def run_turn(
    content: DefinitionContent,
    *,
    connections: Mapping[str, ConnectionSpec],
    instructions: str,
    conversation: dict[str, Any] | None,
    message: str | None,
    documents: Sequence[tuple[str, str]] = (),
    answers: Answers | None = None,
    rules: Sequence[Any] = (),
    emit: Emit,
    stream: bool = True,
) -> TurnOutcome:
    """Run one turn and report its events through `emit`; raises TurnError when the turn fails.

    With `stream` the model's reply streams (text deltas as ephemeral events); without it the turn
    runs node by node and each reply is reported whole, which is cheaper when nobody watches live.
    The stored events are the same either way."""
    agent = agent_for(content, connection_for(connections, content.model.connection))
    restored = ConversationTypeAdapter.validate_python(conversation) if conversation else None
    prompt: list[str] | None = None
    if message is not None:
        prompt = [document_prompt(name, text) for name, text in documents] + [message]
    deps = TurnDeps(emit=emit, rules=list(rules))
    bridges = [McpBridge(server, connection_for(connections, server.connection)) for server in content.mcp_servers]
    mcp_toolsets: list[AbstractToolset[TurnDeps]] = [
        GatedToolset(bridge.toolset(), default_mode=bridge.server.approval, server=bridge.server.name)
        for bridge in bridges
    ]
    usage_before = restored.usage if restored is not None else RunUsage()
    translator = _EventTranslator(emit)
    result = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            for bridge in bridges:
                stack.push_async_callback(bridge.close)
            options: dict[str, Any] = {
                "conversation": restored,
                "deferred_tool_results": answers.deferred_results() if answers else None,
                "instructions": instructions,
                "deps": deps,
                "toolsets": mcp_toolsets or None,
            }
            if stream:
                async with agent.run_stream_events(prompt, **options) as events:
                    async for event in events:
                        if isinstance(event, AgentRunResultEvent):
                            result = event.result
                        else:
                            await translator.translate(event)
            else:
                async with agent.iter(prompt, **options) as agent_run:
                    async for node in agent_run:
                        # A reply is reported before its tool calls run, as the stream would.
                        if Agent.is_call_tools_node(node):
                            await translator.response(node.model_response)
                    result = agent_run.result
    except TurnError:
        raise
    except McpServerFailed as error:
        raise TurnError("mcp_server_failed", str(error)) from error
    except pai_errors.ModelAPIError as error:
        raise provider_error(error) from error
    except UnexpectedModelBehavior as error:
        raise TurnError("provider_malformed_reply", f"The model's reply could not be used: {error}") from error
    except pai_errors.UsageLimitExceeded as error:
        raise TurnError("usage_limit_exceeded", str(error)) from error
    await translator.finish()
    assert result is not None
    usage = result.usage
    output = result.output
    pending = _pending_calls(output) if isinstance(output, DeferredToolRequests) else []
    return TurnOutcome(
        output=output if isinstance(output, str) else None,
        pending=pending,
        conversation=ConversationTypeAdapter.dump_python(result.conversation, mode="json"),
        usage={
            "requests": usage.requests - usage_before.requests,
            "inputTokens": usage.input_tokens - usage_before.input_tokens,
            "outputTokens": usage.output_tokens - usage_before.output_tokens,
        },
    )


def provider_error(error: pai_errors.ModelAPIError) -> TurnError:
    categories: list[tuple[type[Exception], str, bool]] = [
        (pai_errors.ModelRateLimitError, "provider_rate_limited", True),
        (pai_errors.ModelAuthenticationError, "provider_auth_failed", False),
        (pai_errors.ModelNotFoundError, "provider_model_not_found", False),
        (pai_errors.ModelTimeoutError, "provider_timeout", True),
        (pai_errors.ModelConnectionError, "provider_unreachable", True),
        (pai_errors.ModelUnavailableError, "provider_unavailable", True),
        (pai_errors.ModelServerError, "provider_server_error", True),
        (pai_errors.ModelRequestRejectedError, "provider_rejected", False),
    ]
    for kind, code, transient in categories:
        if isinstance(error, kind):
            return TurnError(code, f"The model provider failed: {error}", transient=transient)
    if isinstance(error.__cause__, json.JSONDecodeError | UnicodeDecodeError):
        # pydantic-ai reports a body the SDK could not decode as a bare ModelAPIError.
        return TurnError("provider_malformed_reply", f"The model's reply could not be used: {error}")
    return TurnError("provider_error", f"The model provider failed: {error}")


def _pending_calls(requests: DeferredToolRequests) -> list[PendingCall]:
    pending: list[PendingCall] = []
    for call in requests.approvals:
        metadata = requests.metadata.get(call.tool_call_id) or {}
        question = metadata.get("question")
        if question is not None:
            pending.append(
                PendingCall(
                    "input",
                    call.tool_name,
                    call.tool_call_id,
                    call.args_as_dict(),
                    message=question["message"],
                    requested_schema=question["schema"],
                    engine_state=metadata.get("engine_state"),
                )
            )
        else:
            pending.append(
                PendingCall(
                    "approval", call.tool_name, call.tool_call_id, call.args_as_dict(), engine_state=metadata or None
                )
            )
    for call in requests.calls:
        pending.append(PendingCall("client_tool", call.tool_name, call.tool_call_id, call.args_as_dict()))
    return pending


class _EventTranslator:
    """pydantic-ai stream events -> the console's event types (SPEC section 5)."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.in_turn = False

    async def translate(self, event: Any) -> None:
        if isinstance(event, PartStartEvent):
            await self._turn_start()
            if isinstance(event.part, TextPart) and event.part.content:
                await self.emit(EventType.ASSISTANT_MESSAGE_DELTA, {"delta": event.part.content}, True)
        elif isinstance(event, PartDeltaEvent):
            if isinstance(event.delta, TextPartDelta) and event.delta.content_delta:
                await self.emit(EventType.ASSISTANT_MESSAGE_DELTA, {"delta": event.delta.content_delta}, True)
            elif isinstance(event.delta, ThinkingPartDelta) and event.delta.content_delta:
                await self.emit(EventType.ASSISTANT_REASONING_DELTA, {"delta": event.delta.content_delta}, True)
        elif isinstance(event, PartEndEvent):
            if isinstance(event.part, TextPart):
                await self.emit(EventType.ASSISTANT_MESSAGE, {"content": event.part.content}, False)
        elif isinstance(event, FunctionToolCallEvent):
            await self._turn_end()

    async def response(self, response: ModelResponse) -> None:
        """A whole reply, when the turn does not stream."""
        await self._turn_start()
        for part in response.parts:
            if isinstance(part, TextPart):
                await self.emit(EventType.ASSISTANT_MESSAGE, {"content": part.content}, False)
        await self._turn_end()

    async def _turn_start(self) -> None:
        if not self.in_turn:
            self.in_turn = True
            await self.emit(EventType.ASSISTANT_TURN_START, {}, False)

    async def _turn_end(self) -> None:
        if self.in_turn:
            self.in_turn = False
            await self.emit(EventType.ASSISTANT_TURN_END, {}, False)

    async def finish(self) -> None:
        await self._turn_end()
