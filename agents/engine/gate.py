"""The tool gate: server and MCP tools run behind `GatedToolset` (the approval modes, remembered rules, the policy
tool points and each execution's events), client tools (the definition's, and those a run's caller offers) are
declared to the model as external ones (`client_toolset`; under policies behind `agents.engine.seams.ClientToolGate`);
`pre_tool_call` and `post_tool_call` are the tool points every tool of the engine passes, a sub-agent's too
(`agents.engine.delegation`)."""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import (
    ApprovalRequired,
    CallDeferred,
    ExternalToolset,
    FunctionToolset,
    RunContext,
    Tool,
    ToolDefinition,
    ToolDenied,
    ToolFailed,
    WrapperToolset,
)
from pydantic_ai import exceptions as pai_errors
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from agents.definitions import DefinitionContent
from agents.engine import permissions
from agents.engine.context import OfferedClientTool, TurnDeps
from agents.engine.outcome import McpServerFailed, TurnError
from agents.engine.seams import ClientToolGate
from agents.payloads import Approved, DeniedByHook, PolicyAsk, ToolExecutionComplete
from agents.policies import PolicyBlocked, TurnPolicies
from agents.rule_matching import first_matching
from agents.server_tools import REGISTRY


def definition_toolsets(content: DefinitionContent) -> list[AbstractToolset[TurnDeps]]:
    """The definition's own tools as its agent offers them: its server tools behind the gate, and its client
    tools (only when there are some: every toolset costs each model request a little)."""
    server_tools = FunctionToolset[TurnDeps](
        [Tool(REGISTRY[t.name].function, name=t.name, description=REGISTRY[t.name].description) for t in content.tools]
    )
    modes: dict[str, str] = {t.name: t.approval for t in content.tools}
    toolsets: list[AbstractToolset[TurnDeps]] = [GatedToolset(server_tools, modes=modes)]
    if content.client_tools:
        toolsets.append(client_toolset(content.client_tools, under_policies=content.hooks is not None))
    return toolsets


def client_toolset(tools: Sequence[OfferedClientTool], *, under_policies: bool) -> AbstractToolset[TurnDeps]:
    """Client tools declared to the model as external ones: a call of one defers (a `client_tool` request). Under
    policies a client tool passes `pre_tool_call` before its request opens."""
    definitions = [
        ToolDefinition(name=t.name, description=t.description, parameters_json_schema=t.parameters) for t in tools
    ]
    external = ExternalToolset[TurnDeps](definitions)
    return ClientToolGate(external) if under_policies else external


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
        asking = REGISTRY[name] if self.server is None and name in REGISTRY else None
        asks = asking.asks if asking is not None else None
        described = permissions.describe(name, tool.tool_def, self.server)
        if policies is not None:
            checked = await pre_tool_call(deps, policies, described, call_id, tool_args)
            if isinstance(checked, ToolDenied):
                await permissions.not_run(deps.emit, call_id, name, tool_args, checked.message, "denied", self.server)
                return checked
            tool_args = checked
        metadata = (ctx.tool_call_metadata or {}) if ctx.tool_call_approved else {}
        if asks is not None:
            # A tool that asks a person: its result is their answer, given in a later turn.
            answer = metadata.get("person_answer")
            if answer is None:
                said = asking.says(tool_args) if asking is not None and asking.says is not None else ""
                raise ApprovalRequired(metadata={"asks": asks, "arguments": tool_args, "message": said})
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
                denied = await post_tool_call(policies, name, call_id, tool_args, str(error), is_error=True)
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
                denied = await post_tool_call(policies, name, call_id, tool_args, failure, is_error=True)
                if denied is not None:
                    return denied
            raise ToolFailed(failure) from error
        if policies is not None:
            checked = await post_tool_call(policies, name, call_id, tool_args, jsonable(result), is_error=False)
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
        await deps.emit(ToolExecutionComplete.of(call_id, value=jsonable(result), error=error, code=code))


async def pre_tool_call(
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


async def post_tool_call(
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


def jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
