"""The engine adapter: one turn of an agent definition on pydantic-ai.

It knows nothing of the database. The caller (agents/runs.py) gives it the definition, the resolved
instructions, the stored conversation, the new prompt or the answers, the active rules and an `emit`
callback; it gets back a TurnOutcome: the output, the calls now waiting on the outside world, the
conversation to store, the usage, or a TurnError.
"""

import asyncio
import contextlib
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

from agent_hooks import DeclarationError
from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    ApprovalRequired,
    CallDeferred,
    Conversation,
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
    ThinkingPart,
    ThinkingPartDelta,
    Tool,
    ToolApproved,
    ToolCallPart,
    ToolDefinition,
    ToolDenied,
    ToolFailed,
    ToolReturn,
    UnexpectedModelBehavior,
    WrapperToolset,
)
from pydantic_ai import exceptions as pai_errors
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.usage import RunUsage

from agents.definitions import DefinitionContent
from agents.engine import permissions, providers
from agents.engine.mcp import McpBridge, McpServerFailed
from agents.engine.scripted import document_prompt
from agents.engine.seams import (
    ClientToolGate,
    LimitReached,
    ModelCall,
    OutputHeld,
    as_text,
    engine_capabilities,
    rewrite_response,
)
from agents.engine.subagents import Counting, Emit, SubAgent, Tagged, totals, way_back
from agents.payloads import (
    Approved,
    AssistantMessage,
    AssistantMessageDelta,
    AssistantReasoning,
    AssistantReasoningDelta,
    AssistantUsage,
    DeniedByHook,
    PolicyAsk,
    SubagentCompleted,
    SubagentFailed,
    SubagentStarted,
    ToolExecutionComplete,
    ToolRequest,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from agents.policies import PolicyBlocked, PolicyScope, TurnPolicies
from agents.request_kinds import RequestKindName
from agents.tools import REGISTRY
from approvals.rules import first_matching
from console.connections import ConnectionSpec


class TurnError(Exception):
    """A turn that could not finish; `code` is stable, `transient` says a retry may help."""

    def __init__(self, code: str, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.code, self.message, self.transient = code, message, transient


BLOCKED_REASON = "The turn that would have answered this call was blocked by a policy; it did not run."


class TurnBlocked(TurnError):
    """A policy denied the turn (SPEC section 8): the run ends `blocked` with `error` as its error."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__("policy_denied", error["message"])
        self.error = error


@dataclass
class PendingCall:
    kind: RequestKindName
    tool_name: str
    call_id: str
    arguments: dict[str, Any]
    message: str = ""
    requested_schema: dict[str, Any] | None = None
    engine_state: dict[str, Any] | None = None
    # A policy's escalation this request stands for: {binding, reason, message}.
    policy: dict[str, Any] | None = None


@dataclass
class Answers:
    """The answers a turn carries to the engine, keyed by tool call id."""

    approvals: dict[str, ToolApproved | ToolDenied] = field(default_factory=dict)
    tool_results: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Operators' decisions on policy escalations, by the escalated context's key (agents.policies).
    decisions: dict[str, bool] = field(default_factory=dict)
    # An answer held for review at `output` (the request's engine state), to release or refuse.
    release: dict[str, Any] | None = None
    # A person's answers to the tools that ask one (`ask_user`, `propose_plan`), as the model reads them.
    people: dict[str, str] = field(default_factory=dict)
    # A run stopped at its model-call limit: its history, and whether to go on (a `continuation` answer).
    resume: dict[str, Any] | None = None
    # Answers for waiting sub-agents, by the parent's call that runs each: (its state, their answers).
    subagents: dict[str, tuple[dict[str, Any], "Answers"]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(
            self.approvals
            or self.tool_results
            or self.inputs
            or self.decisions
            or self.people
            or self.resume
            or self.subagents
        )

    def for_subagent(self, state: dict[str, Any]) -> "Answers":
        """The answers of the sub-agent waiting in the call `state` names (`agents.engine.subagents`); they
        re-run that call, which resumes the sub-agent's turn with them."""
        entry = self.subagents.setdefault(state["parentCallId"], (state, Answers()))
        return entry[1]

    def answer_person(self, call_id: str, text: str) -> None:
        """What a person answered a tool that asked them; the model reads it as the tool's result."""
        self.people[call_id] = text

    def decide(self, key: str, approved: bool) -> None:
        """An operator's decision on a policy's escalation; the policy's context asks again and gets it."""
        self.decisions[key] = approved

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

    def reject(self, call_id: str, reason: str) -> None:
        """The client refused to run the tool; the model reads `TOOL rejected: <reason>`."""
        self.tool_results[call_id] = ToolReturn(return_value=reason, metadata={"outcome": "rejected"})

    def background(self, call_id: str) -> None:
        """The client accepted the call and runs it in the background; a later message may bring the result."""
        self.tool_results[call_id] = ToolReturn(return_value=BACKGROUND, metadata={"outcome": "background"})

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
        results = {call_id: _dump_result(answer) for call_id, answer in self.tool_results.items()}
        return {
            "approvals": approvals,
            "toolResults": results,
            "inputs": self.inputs,
            "decisions": self.decisions,
            "release": self.release,
            "people": self.people,
            "resume": self.resume,
            "subagents": {call_id: [state, answers.dump()] for call_id, (state, answers) in self.subagents.items()},
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> "Answers":
        approvals: dict[str, ToolApproved | ToolDenied] = {
            call_id: ToolApproved(override_args=a.get("overrideArguments"))
            if a["approved"]
            else ToolDenied(a["reason"])
            for call_id, a in data.get("approvals", {}).items()
        }
        results = {call_id: _load_result(r) for call_id, r in data.get("toolResults", {}).items()}
        return cls(
            approvals=approvals,
            tool_results=results,
            inputs=data.get("inputs", {}),
            decisions=data.get("decisions", {}),
            release=data.get("release"),
            people=data.get("people", {}),
            resume=data.get("resume"),
            subagents={
                call_id: (state, cls.load(answers)) for call_id, (state, answers) in data.get("subagents", {}).items()
            },
        )

    def deferred_results(self) -> DeferredToolResults:
        approvals: dict[str, Any] = dict(self.approvals)
        metadata: dict[str, dict[str, Any]] = {}
        for call_id, answer in self.inputs.items():
            # An answered elicitation re-runs the MCP call from its start with the answer at hand.
            approvals[call_id] = ToolApproved()
            metadata[call_id] = {"input_answer": answer}
        for call_id, text in self.people.items():
            approvals[call_id] = ToolApproved()
            metadata[call_id] = {"person_answer": text}
        for call_id, (state, answers) in self.subagents.items():
            approvals[call_id] = ToolApproved()
            metadata[call_id] = {"subagent_resume": {"state": state, "answers": answers.dump()}}
        return DeferredToolResults(approvals=approvals, calls=dict(self.tool_results), metadata=metadata)


BACKGROUND = "accepted, running in the background"


def _dump_result(answer: Any) -> dict[str, Any]:
    if isinstance(answer, ToolFailed):
        return {"error": answer.message}
    if isinstance(answer, ToolReturn):
        return {"result": answer.return_value, "outcome": (answer.metadata or {}).get("outcome")}
    return {"result": answer}


def _load_result(stored: dict[str, Any]) -> Any:
    if "error" in stored:
        return ToolFailed(stored["error"])
    if stored.get("outcome"):
        return ToolReturn(return_value=stored["result"], metadata={"outcome": stored["outcome"]})
    return stored["result"]


@dataclass
class TurnOutcome:
    output: str | None
    pending: list[PendingCall]
    conversation: dict[str, Any] | None
    usage: dict[str, int]
    # The user's message as a policy's `input` verdict left it, when it changed it.
    message: str | None = None


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
        policies = deps.policies
        asks = REGISTRY[name].asks if self.server is None and name in REGISTRY else None
        described = permissions.describe(name, tool.tool_def, self.server)
        if policies is not None:
            checked = await _pre_tool_call(deps, policies, described, call_id, tool_args)
            if isinstance(checked, ToolDenied):
                await permissions.not_run(deps.emit, call_id, name, tool_args, checked.message, "denied", self.server)
                return checked
            tool_args = checked
        metadata = (ctx.tool_call_metadata or {}) if ctx.tool_call_approved else {}
        if asks is not None:
            # A tool that asks a person: its result is their answer, given in a later turn.
            answer = metadata.get("person_answer")
            if answer is None:
                raise ApprovalRequired(metadata={"asks": asks, "arguments": tool_args})
            await deps.emit(permissions.start(call_id, name, tool_args))
            await self._complete(deps, call_id, result=answer)
            return answer
        if not ctx.tool_call_approved:
            mode = self.modes.get(name, self.default_mode)
            if mode == "every_time" or mode == "always":
                rule = first_matching(deps.rules, name, tool_args) if mode == "always" else None
                if rule is None:
                    raise ApprovalRequired(metadata={"approvalMode": mode, "permissionRequest": described})
                approved = Approved(kind="approved")
                await permissions.decided(deps.emit, described, call_id, tool_args, approved, rule_id=str(rule.id))
        # An elicited MCP call runs again from its start with the answer: it started in the turn that asked.
        if "input_answer" not in metadata:
            # MCP tools may do anything; a server tool says whether it has side effects. A run whose tool
            # with side effects started is never retried (agents/queue.py).
            side_effects = self.server is not None or getattr(REGISTRY.get(name), "side_effects", True)
            await deps.emit(permissions.start(call_id, name, tool_args, self.server, side_effects))
        try:
            result = await super().call_tool(name, tool_args, ctx, tool)
        except (ApprovalRequired, CallDeferred):
            raise
        except (ToolFailed, pai_errors.ModelRetry) as error:
            if policies is not None:
                denied = await _post_tool_call(policies, name, call_id, tool_args, str(error), is_error=True)
                if denied is not None:
                    await self._complete(deps, call_id, error=denied.message, code="denied")
                    return denied
            await self._complete(deps, call_id, error=str(error))
            raise
        except Exception as error:
            await self._complete(deps, call_id, error=f"{type(error).__name__}: {error}")
            if isinstance(error, McpServerFailed):
                raise TurnError("mcp_server_failed", str(error)) from error
            if self.server is not None:
                raise TurnError("mcp_server_failed", f"The MCP server {self.server!r} failed: {error}") from error
            # A server tool's own failure is the model's to see (once `post_tool_call` let it), not the end of the run.
            failure = f"{type(error).__name__}: {error}"
            if policies is not None:
                denied = await _post_tool_call(policies, name, call_id, tool_args, failure, is_error=True)
                if denied is not None:
                    return denied
            raise ToolFailed(failure) from error
        if policies is not None:
            checked = await _post_tool_call(policies, name, call_id, tool_args, _jsonable(result), is_error=False)
            if isinstance(checked, ToolDenied):
                await self._complete(deps, call_id, error=checked.message, code="denied")
                return checked
            result = checked
        await self._complete(deps, call_id, result=result)
        return result

    @staticmethod
    async def _complete(
        deps: TurnDeps, call_id: str, *, result: Any = None, error: str | None = None, code: str | None = None
    ) -> None:
        await deps.emit(ToolExecutionComplete.of(call_id, value=_jsonable(result), error=error, code=code))


async def _pre_tool_call(
    deps: TurnDeps, policies: TurnPolicies, described: dict[str, Any], call_id: str, args: dict[str, Any]
) -> dict[str, Any] | ToolDenied:
    """`pre_tool_call` of a server, MCP or sub-agent tool (`described`: as `permissions.describe` has it): the
    arguments to run it with (transformed, or as they were), or the denial the model reads; an escalation raises
    ApprovalRequired (an approval request with the policy)."""
    context = policies.builder.pre_tool_call(call_id=call_id, name=described["toolName"], args=args)
    try:
        checked: dict[str, Any] = await policies.check(context)
    except PolicyBlocked as blocked:
        escalation = blocked.escalation
        if escalation is not None:
            # The request shows the arguments the policy saw (an operator's edit is a new question).
            asked = {"policy": escalation.wire(), "policyKey": escalation.key, "arguments": args}
            raise ApprovalRequired(metadata={**asked, "permissionRequest": described}) from None
        if not policies.decided(context):  # an operator's "no" is recorded with their answer
            denial = DeniedByHook(kind="denied-by-permission-request-hook", message=blocked.message or blocked.reason)
            policy = PolicyAsk(binding=blocked.binding, reason=blocked.reason, message=blocked.message)
            await permissions.decided(deps.emit, described, call_id, args, denial, policy=policy)
        return ToolDenied(blocked.message or blocked.reason or "Denied by policy.")
    return checked


async def _post_tool_call(
    policies: TurnPolicies, name: str, call_id: str, args: dict[str, Any], value: Any, *, is_error: bool
) -> Any:
    """`post_tool_call`: the result to hand the model (a denial, transformed, or as it was); for a
    failure, a denial or None (the failure goes on as it was)."""
    context = policies.builder.post_tool_call(call_id=call_id, name=name, args=args, value=value, is_error=is_error)
    try:
        checked = await policies.check(context)
    except PolicyBlocked as blocked:
        return ToolDenied(f"Denied by policy: {blocked.message or blocked.reason}")
    return None if is_error else checked


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
            external = ExternalToolset[TurnDeps](client_tools)
            # Under policies a client tool passes `pre_tool_call` before its request opens.
            toolsets.append(ClientToolGate(external) if content.hooks is not None else external)
        agent = Agent(
            build_model(connection, content.model.name or "", api_key),
            output_type=[str, DeferredToolRequests],
            deps_type=TurnDeps,
            toolsets=toolsets,
            retries=1,
            capabilities=engine_capabilities(content.hooks is not None),
        )
        if len(_AGENTS) > 256:
            _AGENTS.clear()
        _AGENTS[key] = agent
    return agent


# pydantic-ai's word for two toolsets giving one name (an MCP server's tools are known only when the turn lists
# them, so a definition cannot be refused for it when saved).
_TOOL_CONFLICT = re.compile(r"conflicts with existing tool from .+?: ('[^']+'|\"[^\"]+\")")


def warm_engine() -> None:
    """Build the conversation's serializers now. pydantic-ai defers them to their first use (~80 ms of
    schema building), which every thread of a worker pool starting at once would do side by side."""
    ConversationTypeAdapter.rebuild()
    ModelMessagesTypeAdapter.rebuild()


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
    version: int | None,
    scope: PolicyScope,
    subagents: Mapping[str, SubAgent] | None = None,
) -> TurnOutcome:
    """Run one turn of `content` (its agent's version `version`) and report its events through `emit`;
    raises TurnError when the turn fails.

    With `stream` the model's reply streams (text deltas as ephemeral events); without it the turn
    runs node by node and each reply is reported whole, which is cheaper when nobody watches live.
    The stored events are the same either way. When the definition has `hooks`, the turn's emitter is
    built from them in `scope` (SPEC section 8), with the operators' decisions the answers carry; the
    sub-agents' turns build theirs from their own versions' declarations in the same scope."""
    try:
        policies = scope.policies(
            content.hooks,
            connections=connections,
            decisions=answers.decisions if answers is not None else {},
            agent=content.name,
            version=version,
            emit=emit,
        )
    except DeclarationError as error:  # e.g. a policy webhook connection no longer granted: nothing runs
        raise TurnError("policy_unavailable", f"The policies of {content.name} cannot run: {error}") from None
    agent = agent_for(content, connection_for(connections, content.model.connection))
    bridges = [McpBridge(server, connection_for(connections, server.connection)) for server in content.mcp_servers]
    mcp_toolsets: list[AbstractToolset[TurnDeps]] = [
        GatedToolset(bridge.toolset(), default_mode=bridge.server.approval, server=bridge.server.name)
        for bridge in bridges
    ]
    if subagents:
        mcp_toolsets.append(_subagent_toolset(subagents, scope, stream))
    async with contextlib.AsyncExitStack() as stack:
        for bridge in bridges:
            stack.push_async_callback(bridge.close)
        return await drive(
            agent,
            instructions=instructions,
            conversation=conversation,
            message=message,
            documents=documents,
            answers=answers,
            rules=rules,
            emit=emit,
            stream=stream,
            toolsets=mcp_toolsets,
            policies=policies,
            tools_registered=[t.name for t in content.tools]
            + [t.name for t in content.client_tools]
            + list(subagents or ()),
            max_model_calls=content.max_model_calls,
        )


async def drive(
    agent: Agent[TurnDeps, Any],
    *,
    instructions: str,
    conversation: dict[str, Any] | None,
    message: str | None,
    documents: Sequence[tuple[str, str]] = (),
    answers: Answers | None = None,
    rules: Sequence[Any] = (),
    emit: Emit,
    stream: bool = True,
    toolsets: Sequence[AbstractToolset[TurnDeps]] = (),
    policies: TurnPolicies | None = None,
    tools_registered: Sequence[str] = (),
    max_model_calls: int | None = None,
) -> TurnOutcome:
    """A turn of `agent` (`run_turn` builds it from a definition; the conformance harness from a vector).

    Under `policies` the order is: agent_startup, input (the user's message is recorded as the verdict
    leaves it), then the model loop with pre/post_model_call, pre/post_tool_call and output at their
    seams, and agent_shutdown on every way out. Nothing streams before its verdict: the reply is
    reported whole once `post_model_call` and `output` passed."""
    if answers is not None and answers.resume is not None:
        # The answer to a `continuation`: go on from the request the limit held back, or stop there.
        if not answers.resume.get("approved"):
            return _stopped(conversation)
        message = None
    if policies is None:
        return await _loop(
            agent,
            instructions,
            conversation,
            message,
            documents,
            answers,
            rules,
            emit,
            stream,
            toolsets,
            max_model_calls=max_model_calls,
        )
    reason = "error"
    try:
        await policies.check(policies.builder.agent_startup(tools_registered=list(tools_registered)))
        if answers is not None and answers.release is not None:
            outcome = await _release(answers.release, policies, emit)
        else:
            verdicted = message
            if message:
                target = await policies.check(policies.builder.input(content=message))
                verdicted = target.get("content") if isinstance(target, dict) else target
                verdicted = verdicted if isinstance(verdicted, str) else json.dumps(verdicted)
                if verdicted:
                    await emit(UserMessage(content=verdicted))
            try:
                outcome = await _loop(
                    agent,
                    instructions,
                    conversation,
                    verdicted,
                    documents,
                    answers,
                    rules,
                    emit,
                    False,
                    toolsets,
                    policies=policies,
                    max_model_calls=max_model_calls,
                )
            except OutputHeld as held:
                outcome = _held(held, conversation)
            if verdicted != message:
                outcome.message = verdicted
        reason = "completed"
        return outcome
    except PolicyBlocked as blocked:
        raise TurnBlocked(blocked.wire()) from None
    except asyncio.CancelledError:
        reason = "cancelled"
        raise
    finally:
        await policies.shutdown(reason)


def _held(held: OutputHeld, conversation: dict[str, Any] | None) -> TurnOutcome:
    """The turn whose answer waits for review: an approval request carrying the answer (and the history it
    ends), the session's history left as it was until the answer is released."""
    escalation = held.blocked.escalation
    assert escalation is not None
    conversation_with_answer = Conversation(messages=held.conversation)
    state = {
        "policyKey": escalation.key,
        "heldOutput": held.content,
        "conversation": ConversationTypeAdapter.dump_python(conversation_with_answer, mode="json"),
    }
    call = PendingCall(
        "approval",
        "",
        f"output-{escalation.key[:16]}",
        {"output": held.content},
        message=escalation.message or "",
        engine_state=state,
        policy=escalation.wire(),
    )
    return TurnOutcome(output=None, pending=[call], conversation=conversation, usage=_usage(RunUsage(), RunUsage()))


async def _release(held: dict[str, Any], policies: TurnPolicies, emit: Emit) -> TurnOutcome:
    """The next turn of an answer held at `output`: the same context asks again, the operator's decision
    answers it (a denial is a block), and the answer is released as the verdict leaves it."""
    target = await policies.check(policies.builder.output(content=held["heldOutput"]))
    content = target.get("content") if isinstance(target, dict) else target
    content = content if isinstance(content, str) else json.dumps(content)
    restored = ConversationTypeAdapter.validate_python(held["conversation"])
    last = restored.messages[-1]
    if isinstance(last, ModelResponse) and content != last.text:
        restored.messages[-1] = rewrite_response(last, {"content": content, "tool_calls": []})
    translator = _EventTranslator(emit, [])
    await translator.response(restored.messages[-1])  # type: ignore[arg-type]
    await translator.finish()
    return TurnOutcome(
        output=content,
        pending=[],
        conversation=ConversationTypeAdapter.dump_python(restored, mode="json"),
        usage=_usage(RunUsage(), RunUsage()),
    )


async def _loop(
    agent: Agent[TurnDeps, Any],
    instructions: str,
    conversation: dict[str, Any] | None,
    message: str | None,
    documents: Sequence[tuple[str, str]],
    answers: Answers | None,
    rules: Sequence[Any],
    emit: Emit,
    stream: bool,
    toolsets: Sequence[AbstractToolset[TurnDeps]],
    *,
    policies: TurnPolicies | None = None,
    max_model_calls: int | None = None,
) -> TurnOutcome:
    restored = ConversationTypeAdapter.validate_python(conversation) if conversation else None
    if restored is not None and restored.deferred_tool_requests is not None and message:
        # Calls a blocked turn left without answers (SPEC section 8): closed, so the session goes on.
        answers = answers or Answers()
        waiting = restored.deferred_tool_requests
        answered = {*answers.approvals, *answers.tool_results, *answers.inputs}
        for call in waiting.approvals:
            if call.tool_call_id not in answered:
                answers.deny(call.tool_call_id, BLOCKED_REASON)
        for call in waiting.calls:
            if call.tool_call_id not in answered:
                answers.fail(call.tool_call_id, BLOCKED_REASON)
    prompt: list[str] | None = None
    if message is not None:
        prompt = [document_prompt(name, text) for name, text in documents] + [message]
    usage_before = restored.usage if restored is not None else RunUsage()
    limit = (max_model_calls, usage_before.requests) if max_model_calls is not None else None
    deps = TurnDeps(emit=emit, rules=list(rules), policies=policies, call_limit=limit)
    translator = _EventTranslator(emit, deps.model_calls)
    results = _results_for(answers)
    if results is not None and restored is not None and restored.deferred_tool_requests is not None:
        # The calls the answers resume run in this turn, as the guide's turn flow has them; those that never run
        # (denied, closed unanswered) and the client's are reported here, as pydantic-ai does not call them.
        await translator.resume()
        await _report_settled(emit, restored.deferred_tool_requests, results)
    result = None
    options: dict[str, Any] = {
        "conversation": restored,
        "deferred_tool_results": results,
        "instructions": instructions,
        "deps": deps,
        "toolsets": list(toolsets) or None,
    }
    try:
        if stream:
            async with agent.run_stream_events(prompt, **options) as events:
                async for event in events:
                    if isinstance(event, AgentRunResultEvent):
                        result = event.result
                    else:
                        await translator.translate(event)
        else:
            # Answers resume the last reply's calls: that reply was reported by the turn that made it.
            resumed_reply = restored.messages[-1] if restored is not None and restored.messages else None
            async with agent.iter(prompt, **options) as agent_run:
                async for node in agent_run:
                    # A reply is reported before its tool calls run, as the stream would.
                    if Agent.is_call_tools_node(node) and node.model_response != resumed_reply:
                        await translator.response(node.model_response)
                result = agent_run.result
    except LimitReached as reached:
        await translator.finish()
        return _limited(reached, max_model_calls or 0, usage_before)
    except (TurnError, PolicyBlocked, OutputHeld):
        raise
    except McpServerFailed as error:
        raise TurnError("mcp_server_failed", str(error)) from error
    except pai_errors.ModelAPIError as error:
        raise provider_error(error) from error
    except UnexpectedModelBehavior as error:
        raise TurnError("provider_malformed_reply", f"The model's reply could not be used: {error}") from error
    except pai_errors.UsageLimitExceeded as error:
        raise TurnError("usage_limit_exceeded", str(error)) from error
    except pai_errors.UserError as error:
        conflict = _TOOL_CONFLICT.search(str(error))
        if conflict is None:
            raise
        detail = (
            f"Two of the agent's tools are named {conflict.group(1)}: an MCP server's tool and a client tool, a"
            " sub-agent or another server's tool. Rename one in the definition."
        )
        raise TurnError("tool_name_conflict", detail) from error
    await translator.finish()
    assert result is not None
    output = result.output
    pending = _pending_calls(output) if isinstance(output, DeferredToolRequests) else []
    return TurnOutcome(
        output=output if isinstance(output, str) else None,
        pending=pending,
        conversation=ConversationTypeAdapter.dump_python(result.conversation, mode="json"),
        usage=_usage(result.usage, usage_before),
    )


async def _report_settled(emit: Emit, waiting: DeferredToolRequests, results: DeferredToolResults) -> None:
    """The start and completion of each waiting call the answers settle without running it on the server: a
    denial (approvals), and a client tool's outcome (calls)."""
    for call in waiting.approvals:
        answer = results.approvals.get(call.tool_call_id)
        if isinstance(answer, ToolDenied):
            arguments = call.args_as_dict()
            await permissions.not_run(emit, call.tool_call_id, call.tool_name, arguments, answer.message, "denied")
    for call in waiting.calls:
        if call.tool_call_id not in results.calls:
            continue
        outcome = results.calls[call.tool_call_id]
        await emit(permissions.start(call.tool_call_id, call.tool_name, call.args_as_dict()))
        if isinstance(outcome, ToolFailed):
            complete = ToolExecutionComplete.of(call.tool_call_id, error=outcome.message, code="failed")
        elif isinstance(outcome, ToolReturn) and (outcome.metadata or {}).get("outcome") == "rejected":
            complete = ToolExecutionComplete.of(call.tool_call_id, error=str(outcome.return_value), code="rejected")
        else:
            value = outcome.return_value if isinstance(outcome, ToolReturn) else outcome
            complete = ToolExecutionComplete.of(call.tool_call_id, value=_jsonable(value))
        await emit(complete)


def _results_for(answers: Answers | None) -> DeferredToolResults | None:
    """What the answers say of deferred calls (None when they answer none: a `continuation` answer)."""
    results = answers.deferred_results() if answers else None
    return results if results is not None and (results.approvals or results.calls) else None


def _limited(reached: LimitReached, limit: int, usage_before: RunUsage) -> TurnOutcome:
    """The run stopped at its model-call limit: it asks whether to go on. The history so far is kept (it ends
    with the request not yet sent: a `continue` sends it, a next message joins it)."""
    call = PendingCall(
        "continuation",
        "",
        f"continue-{uuid.uuid4().hex[:16]}",
        {"maxModelCalls": limit, "usedModelCalls": reached.used},
        message=f"The run made {reached.used} model calls, its limit. Go on?",
    )
    return TurnOutcome(
        output=None,
        pending=[call],
        conversation=ConversationTypeAdapter.dump_python(reached.conversation, mode="json"),
        usage=_usage(reached.conversation.usage, usage_before),
    )


def _stopped(conversation: dict[str, Any] | None) -> TurnOutcome:
    """A run told to stop at its model-call limit ends with what it has: the last reply's text."""
    restored = ConversationTypeAdapter.validate_python(conversation) if conversation else None
    replies = [m for m in (restored.messages if restored else []) if isinstance(m, ModelResponse) and m.text]
    return TurnOutcome(
        output=replies[-1].text if replies else None,
        pending=[],
        conversation=conversation,
        usage=_usage(RunUsage(), RunUsage()),
    )


def _usage(usage: RunUsage, before: RunUsage) -> dict[str, int]:
    return {
        "requests": usage.requests - before.requests,
        "inputTokens": usage.input_tokens - before.input_tokens,
        "outputTokens": usage.output_tokens - before.output_tokens,
    }


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
        asks = metadata.get("asks")
        if "subagent" in metadata:
            # A sub-agent's call that waits: the requests are the sub-agent's own.
            for fields, state in way_back(call.tool_call_id, metadata):
                pending.append(PendingCall(**{**fields, "engine_state": state}))
        elif asks is not None:
            arguments = metadata.get("arguments") or call.args_as_dict()
            said = arguments.get("question") if asks == "question" else "Approve this plan?"
            pending.append(PendingCall(asks, call.tool_name, call.tool_call_id, arguments, message=str(said or "")))
        elif question is not None:
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
            policy = metadata.get("policy")
            pending.append(
                PendingCall(
                    "approval",
                    call.tool_name,
                    call.tool_call_id,
                    metadata.get("arguments") or call.args_as_dict(),
                    message=(policy or {}).get("message") or "",
                    engine_state=metadata or None,
                    policy=policy,
                )
            )
    for call in requests.calls:
        pending.append(PendingCall("client_tool", call.tool_name, call.tool_call_id, call.args_as_dict()))
    return pending


def _subagent_toolset(subagents: Mapping[str, SubAgent], scope: PolicyScope, stream: bool) -> FunctionToolset[TurnDeps]:
    """Each sub-agent as a tool `name(task)` (SPEC section 10; agents/engine/subagents.py); with `stream` (someone
    watches the parent's turn) their replies stream too."""

    def tool(sub: SubAgent) -> Tool[TurnDeps]:
        async def delegate(ctx: RunContext[TurnDeps], task: str) -> str | ToolDenied:
            return await _delegate(sub, scope, stream, ctx, task)

        return Tool(delegate, name=sub.name, description=_delegation(sub)["toolDescription"])

    return FunctionToolset([tool(sub) for sub in subagents.values()])


async def _delegate(
    sub: SubAgent, scope: PolicyScope, stream: bool, ctx: RunContext[TurnDeps], task: str
) -> str | ToolDenied:
    """A sub-agent's turn inside the parent's call: started, or resumed with the answers it waited for.

    The parent's policies see the call as any tool's: `pre_tool_call` on `{task}` when it starts (a resumed
    call already passed it), `post_tool_call` on the reply. The sub-agent's own policies (its version's
    `hooks`) govern its turn; a deny that would block its run fails the call instead, with the policy's
    reason for the parent's model."""
    deps, call_id = ctx.deps, ctx.tool_call_id or ""
    parent = deps.policies
    resume = (ctx.tool_call_metadata or {}).get("subagent_resume") if ctx.tool_call_approved else None
    if resume is None:
        if parent is not None:
            checked = await _pre_tool_call(deps, parent, _delegation(sub), call_id, {"task": task})
            if isinstance(checked, ToolDenied):
                await permissions.not_run(deps.emit, call_id, sub.name, {"task": task}, checked.message, "denied")
                return checked
            task = as_text(checked.get("task", task))
        # The instance is named by the call that started it (SPEC section 10); under a sub-agent, whose turns number
        # their calls again from 1, after that sub-agent's own id.
        outer = getattr(deps.emit, "agent_id", None)
        agent_id = f"{outer}/{call_id}" if outer else call_id
        state: dict[str, Any] = {"name": sub.name, "agentId": agent_id, "startedAt": time.time(), "tokens": 0}
        state["toolCalls"], state["task"] = 0, task
        await deps.emit(permissions.start(call_id, sub.name, {"task": task}))
        started = SubagentStarted(
            toolCallId=call_id,
            agentName=sub.name,
            agentDisplayName=sub.display_name,
            agentDescription=sub.description,
            model=sub.model,
        )
        await deps.emit(started)
        if sub.content.hooks is None:  # under policies, its turn records the task as `input` leaves it
            await deps.emit(UserMessage(content=task), agent_id)
        conversation, message, answers = None, task, None
    else:
        state = {key: value for key, value in resume["state"].items() if key not in ("conversation", "parentCallId")}
        conversation, message = resume["state"]["conversation"], None
        answers = Answers.load(resume["answers"])
    arguments = {"task": state.get("task", task)}
    counted = Counting(Tagged(deps.emit, state["agentId"]))
    try:
        outcome = await run_turn(
            sub.content,
            connections=sub.connections,
            instructions=sub.instructions,
            conversation=conversation,
            message=message,
            answers=answers,
            rules=sub.rules,
            emit=counted,
            stream=stream,
            version=sub.version,
            scope=scope.within(state["agentId"]),
            subagents=sub.subagents,
        )
    except TurnError as error:
        state["toolCalls"] += counted.tool_calls
        failure = _failure(sub, error)
        await deps.emit(SubagentFailed(**totals(sub, call_id, state), error=f"{error.code}: {error.message}"))
        denied = await _post_tool_call(parent, sub.name, call_id, arguments, failure, is_error=True) if parent else None
        await deps.emit(ToolExecutionComplete.of(call_id, error=denied.message if denied else error.message))
        if denied is not None:
            return denied
        raise ToolFailed(failure) from None
    state["tokens"] += outcome.usage.get("inputTokens", 0) + outcome.usage.get("outputTokens", 0)
    state["toolCalls"] += counted.tool_calls
    if outcome.pending:
        # The sub-agent waits on a person or a client: so does this call, with the sub-agent's history.
        waiting = {**state, "conversation": outcome.conversation}
        raise ApprovalRequired(metadata={"subagent": waiting, "pending": [asdict(p) for p in outcome.pending]})
    await deps.emit(SubagentCompleted(**totals(sub, call_id, state)))
    reply: Any = outcome.output or ""
    if parent is not None:
        reply = await _post_tool_call(parent, sub.name, call_id, arguments, reply, is_error=False)
        if isinstance(reply, ToolDenied):
            await deps.emit(ToolExecutionComplete.of(call_id, error=reply.message, code="denied"))
            return reply
        reply = as_text(reply)
    await deps.emit(ToolExecutionComplete.of(call_id, value=reply))
    return str(reply)


def _delegation(sub: SubAgent) -> dict[str, Any]:
    """A call to a sub-agent as the SDK's permission requests describe it (a tool of the parent's)."""
    description = f"Ask the sub-agent {sub.display_name} to do a task; it answers with its result."
    return {"kind": "custom-tool", "toolName": sub.name, "toolDescription": f"{description} {sub.description}".strip()}


def _failure(sub: SubAgent, error: TurnError) -> str:
    """What the parent's model reads of a sub-agent's turn that failed; a policy's deny says which and why."""
    if isinstance(error, TurnBlocked):
        said = error.error
        return f"The sub-agent {sub.name} was stopped by its policy at {said['point']}: {said['message']}"
    return f"The sub-agent {sub.name} failed: {error.message}"


class _EventTranslator:
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
