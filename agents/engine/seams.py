"""Where Airlock's checks sit in a pydantic-ai turn: the model-call limit (SPEC section 9), and the policy
points (SPEC section 8) with how their targets map to and from pydantic-ai's messages. `PolicyCapability`
holds the model points; the tool points are in the engine's tool gate (`agents.engine.gate`) and
`ClientToolGate`; startup, input and shutdown in `agents.engine.turn.drive`.
"""

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

from pydantic_ai import (
    CallDeferred,
    Conversation,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RunContext,
    TextPart,
    ToolCallPart,
    ToolDenied,
    WrapperToolset,
)
from pydantic_ai.capabilities import AbstractCapability, ToolSearch
from pydantic_ai.messages import RetryPromptPart, SystemPromptPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.toolsets.abstract import ToolsetTool

from agents.engine import permissions
from agents.payloads import DeniedByHook, PolicyAsk
from agents.policies import PolicyBlocked, TurnPolicies


class LimitReached(Exception):
    """The run made its definition's `maxModelCalls` and asks whether to go on (a `continuation` request);
    `conversation` is the history so far, ending with the request not yet sent."""

    def __init__(self, used: int, conversation: Conversation) -> None:
        super().__init__(f"The run made {used} model calls, its limit.")
        self.used, self.conversation = used, conversation


@dataclass
class ModelCall:
    """What a model call cost, for its `assistant.usage` event."""

    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    duration_ms: int


@dataclass
class ModelCalls(ToolSearch[Any]):
    """Counts and times the turn's model calls. Stops the run before its model request number `limit + 1`
    (the turn's `call_limit` in its deps: (limit, the requests the conversation had made before this run));
    appends each call's `ModelCall` to the deps' `model_calls`. Part of every engine agent.

    It is the agent's `ToolSearch` too, as it is: pydantic-ai gives every agent one (for tools marked
    `defer_loading`), and each capability an agent holds costs every step of a turn its hooks (about 460 Python calls
    a turn, issue 56), so the count rides on the one the agent has anyway instead of adding another."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        request_context = await super().before_model_request(ctx, request_context)
        ctx.deps.call_started = time.perf_counter()
        if ctx.deps.call_limit is None:
            return request_context
        limit, start = ctx.deps.call_limit
        used = ctx.usage.requests - start
        if used >= limit:
            conversation = Conversation(messages=list(ctx.messages), usage=dataclasses.replace(ctx.usage))
            raise LimitReached(used, conversation)
        return request_context

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        usage = response.usage
        ctx.deps.model_calls.append(
            ModelCall(
                model=response.model_name or _model_id(request_context),
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                duration_ms=round((time.perf_counter() - ctx.deps.call_started) * 1000),
            )
        )
        return response


class OutputHeld(Exception):
    """An escalation at `output`: the final answer waits for an operator (the run waits on a request)."""

    def __init__(self, blocked: PolicyBlocked, content: str, conversation: Any) -> None:
        super().__init__(blocked.message or "The answer is held for review.")
        self.blocked, self.content, self.conversation = blocked, content, conversation


def as_text(content: Any) -> str:
    """A message's (or a verdict's) content as text: JSON when it is not a string."""
    return content if isinstance(content, str) else json.dumps(content, default=str)


def generic_messages(messages: list[ModelMessage]) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """The contract's `[{role, content}]` form of a request's messages, and where each came from
    (message index, part index; -1 for a whole response) so that a transform can be written back."""
    out: list[dict[str, Any]] = []
    where: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if isinstance(message, ModelRequest):
            for j, part in enumerate(message.parts):
                if isinstance(part, SystemPromptPart):
                    out.append({"role": "system", "content": part.content})
                elif isinstance(part, UserPromptPart):
                    out.append({"role": "user", "content": as_text(part.content)})
                elif isinstance(part, ToolReturnPart):
                    out.append(
                        {
                            "role": "tool",
                            "content": part.model_response_str(),
                            "tool_call_id": part.tool_call_id,
                            "name": part.tool_name,
                        }
                    )
                elif isinstance(part, RetryPromptPart):
                    out.append({"role": "tool" if part.tool_name else "user", "content": part.model_response()})
                else:
                    continue
                where.append((i, j))
        elif isinstance(message, ModelResponse):
            calls = [{"id": c.tool_call_id, "name": c.tool_name, "args": c.args_as_dict()} for c in message.tool_calls]
            entry: dict[str, Any] = {"role": "assistant", "content": message.text}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            where.append((i, -1))
    return out, where


def rewrite_messages(
    messages: list[ModelMessage], where: list[tuple[int, int]], before: list[dict[str, Any]], after: Any
) -> list[ModelMessage]:
    """`messages` with the contents a transform changed written back, by position (a transform that adds
    or removes messages cannot be mapped onto pydantic-ai's and is refused by raising ValueError)."""
    if not isinstance(after, list) or len(after) != len(before):
        raise ValueError("a pre_model_call transform may change the messages' contents, not their number")
    rewritten = list(messages)
    for (i, j), old, new in zip(where, before, after, strict=True):
        content = new.get("content") if isinstance(new, dict) else None
        if content == old.get("content"):
            continue
        text = as_text(content) if content is not None else ""
        message = rewritten[i]
        if j == -1:
            assert isinstance(message, ModelResponse)
            parts = [p for p in message.parts if not isinstance(p, TextPart)]
            rewritten[i] = dataclasses.replace(message, parts=[TextPart(text), *parts] if text else parts)
        else:
            assert isinstance(message, ModelRequest)
            request_parts: list[Any] = list(message.parts)
            request_parts[j] = dataclasses.replace(request_parts[j], content=text)
            rewritten[i] = dataclasses.replace(message, parts=request_parts)
    return rewritten


def response_target(response: ModelResponse) -> dict[str, Any]:
    calls = [{"id": c.tool_call_id, "name": c.tool_name, "args": c.args_as_dict()} for c in response.tool_calls]
    return {"content": response.text, "tool_calls": calls, "finish_reason": "tool_calls" if calls else "stop"}


def rewrite_response(response: ModelResponse, after: Any) -> ModelResponse:
    """`response` with a post_model_call (or output) transform's content and tool arguments written back."""
    if not isinstance(after, dict):
        raise ValueError("a post_model_call transform must keep the response an object")
    new_args = {c.get("id"): c.get("args") for c in after.get("tool_calls") or [] if isinstance(c, dict)}
    parts: list[Any] = []
    text = after.get("content")
    if text is not None and text != "":
        parts.append(TextPart(as_text(text)))
    for part in response.parts:
        if isinstance(part, TextPart):
            continue
        if isinstance(part, ToolCallPart) and isinstance(new_args.get(part.tool_call_id), dict):
            part = dataclasses.replace(part, args=new_args[part.tool_call_id])
        parts.append(part)
    return dataclasses.replace(response, parts=parts)


@dataclass
class PolicyCapability(AbstractCapability[Any]):
    """`pre_model_call` and `post_model_call` around every model request (when the declaration's surface has
    them); `output` on the final answer (a response with text and no tool calls), so history, output and events
    only hold verdicted text. Part of an agent whose definition has hooks; the turn's emitter is in its deps
    (`policies`)."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        policies: TurnPolicies | None = ctx.deps.policies
        if policies is None or "pre_model_call" not in policies.surface:
            return request_context
        messages, where = generic_messages(request_context.messages)
        tools = [
            {"name": t.name, "description": t.description or "", "schema": t.parameters_json_schema}
            for t in request_context.model_request_parameters.function_tools
        ]
        context = policies.builder.pre_model_call(model_id=_model_id(request_context), messages=messages, tools=tools)
        before = context["target"]
        after = await policies.check(context)
        if after is before:
            return request_context
        original, _ = generic_messages(request_context.messages)  # the emitter may have rewritten `before`
        return dataclasses.replace(
            request_context, messages=rewrite_messages(request_context.messages, where, original, after)
        )

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        policies: TurnPolicies | None = ctx.deps.policies
        if policies is None:
            return response
        if "post_model_call" in policies.surface:
            target = response_target(response)
            context = policies.builder.post_model_call(
                model_id=_model_id(request_context),
                content=target["content"],
                tool_calls=target["tool_calls"],
                finish_reason=target["finish_reason"],
            )
            before = context["target"]
            after = await policies.check(context)
            if after is not before:
                response = rewrite_response(response, after)
        if response.tool_calls or not response.text:
            return response
        try:
            verdicted = await policies.check(policies.builder.output(content=response.text))
        except PolicyBlocked as blocked:
            if blocked.escalation is None:
                raise
            raise OutputHeld(blocked, response.text, [*ctx.messages, response]) from None
        content = verdicted.get("content") if isinstance(verdicted, dict) else verdicted
        if content != response.text:
            response = rewrite_response(response, {"content": content, "tool_calls": []})
        return response


def engine_capabilities(hooks: bool) -> list[AbstractCapability[Any]]:
    """What every engine agent carries (built once per agent, so a turn adds none): the model-call limit, and
    the policy seams when its definition has hooks."""
    return [ModelCalls(), PolicyCapability()] if hooks else [ModelCalls()]


def _model_id(request_context: ModelRequestContext) -> str:
    return request_context.model.model_name or "model"


@dataclass
class ClientToolGate(WrapperToolset[Any]):
    """Client tools under policies: `pre_tool_call` before the request is opened. pydantic-ai never calls an
    external toolset's `call_tool`, so the tools are offered as functions whose call asks the policies and
    then defers (the call becomes a client-tool request) or answers the model with the denial."""

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        return {
            name: dataclasses.replace(tool, tool_def=dataclasses.replace(tool.tool_def, kind="function"))
            for name, tool in tools.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        policies: TurnPolicies | None = ctx.deps.policies
        if policies is not None:
            call_id = ctx.tool_call_id or ""
            context = policies.builder.pre_tool_call(call_id=call_id, name=name, args=tool_args)
            try:
                await policies.check(context)
            except PolicyBlocked as blocked:
                message = blocked.message or blocked.reason or "Denied by policy."
                # As a server tool's deny: the SDK's permission pair, then the call that never runs.
                emit = ctx.deps.emit
                denial = DeniedByHook(kind="denied-by-permission-request-hook", message=message)
                described = permissions.describe(name, tool.tool_def, None)
                policy = PolicyAsk(binding=blocked.binding, reason=blocked.reason, message=blocked.message)
                await permissions.decided(emit, described, call_id, tool_args, denial, policy=policy)
                await permissions.not_run(emit, call_id, name, tool_args, message, "denied")
                return ToolDenied(message)
        raise CallDeferred()
