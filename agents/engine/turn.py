"""One turn of an agent on pydantic-ai: `run_turn` builds it from a definition, `drive` runs the policy points
around the loop (agent_startup, input, output held for review, agent_shutdown), the loop runs the model and
the tools and reports their events, and maps what fails to a TurnError."""

import asyncio
import contextlib
import dataclasses
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from agent_hooks import DeclarationError
from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    Conversation,
    ConversationTypeAdapter,
    DeferredToolRequests,
    ModelResponse,
    UnexpectedModelBehavior,
)
from pydantic_ai import exceptions as pai_errors
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import RunUsage

from agents.definitions import DefinitionContent
from agents.engine.builder import agent_for, connection_for
from agents.engine.context import TurnContext, TurnDeps
from agents.engine.deferred import close_unanswered, pending_calls, report_settled, results_for
from agents.engine.delegation import subagent_toolset
from agents.engine.gate import GatedToolset, client_toolset
from agents.engine.outcome import (
    McpServerFailed,
    PendingCall,
    TurnBlocked,
    TurnError,
    TurnOutcome,
    provider_error,
    usage_between,
)
from agents.engine.scripted import document_prompt
from agents.engine.seams import LimitReached, OutputHeld, rewrite_response
from agents.engine.subagent_turns import SubAgent
from agents.engine.translate import EventTranslator
from agents.payloads import UserMessage
from agents.policies import PolicyBlocked, PolicyScope, TurnPolicies
from console.connections import ConnectionSpec

if TYPE_CHECKING:
    from agents.engine.mcp import McpBridge

# Where a turn's sync functions run (a server tool, the scripted model): threads kept for the process. pydantic-ai
# otherwise starts an AnyIO worker thread for each turn, stopped when the turn's task ends (the task a worker's
# `run_until_complete` runs): a thread started and stopped per turn. As many as AnyIO would start for one loop.
SYNC_CALLS = ThreadPoolExecutor(max_workers=40, thread_name_prefix="airlock-tool")

# pydantic-ai's word for two toolsets giving one name (an MCP server's tools are known only when the turn lists
# them, so a definition cannot be refused for it when saved).
_TOOL_CONFLICT = re.compile(r"conflicts with existing tool from .+?: ('[^']+'|\"[^\"]+\")")


def _mcp_bridges(content: DefinitionContent, connections: Mapping[str, ConnectionSpec]) -> list["McpBridge"]:
    """The definition's MCP servers as bridges. The MCP clients (fastmcp, mcp: ~0.9 s of imports) load with
    the first definition that has a server, not with every process that runs turns."""
    if not content.mcp_servers:
        return []
    from agents.engine.mcp import McpBridge

    return [McpBridge(server, connection_for(connections, server.connection)) for server in content.mcp_servers]


async def run_turn(
    content: DefinitionContent,
    turn: TurnContext,
    *,
    connections: Mapping[str, ConnectionSpec],
    version: int | None,
    scope: PolicyScope,
    subagents: Mapping[str, SubAgent] | None = None,
) -> TurnOutcome:
    """Run one turn of `content` (its agent's version `version`, on the `connections` resolved for the run's
    tenant) and report its events through `turn.emit`; raises TurnError when the turn fails.

    The stored events are the same whether the turn streams or not. When the definition has `hooks`, the
    turn's emitter is built from them in `scope` (SPEC section 8), with the operators' decisions the answers
    carry; the sub-agents' turns build theirs from their own versions' declarations in the same scope."""
    try:
        policies = scope.policies(
            content.hooks,
            connections=connections,
            decisions=turn.answers.decisions if turn.answers is not None else {},
            refusals=turn.answers.refusals if turn.answers is not None else {},
            agent=content.name,
            version=version,
            emit=turn.emit,
        )
    except DeclarationError as error:  # e.g. a policy webhook connection no longer granted: nothing runs
        raise TurnError("policy_unavailable", f"The policies of {content.name} cannot run: {error}") from None
    agent = agent_for(content, connection_for(connections, content.model.connection))
    bridges = _mcp_bridges(content, connections)
    turn_toolsets: list[AbstractToolset[TurnDeps]] = [
        GatedToolset(bridge.toolset(), default_mode=bridge.server.approval, server=bridge.server.name)
        for bridge in bridges
    ]
    if subagents:
        turn_toolsets.append(subagent_toolset(subagents, scope, turn.stream, run_subagent))
    if turn.client_tools:
        # The run's own client tools join the turn, not the cached agent: a run without them never sees them.
        turn_toolsets.append(client_toolset(turn.client_tools, under_policies=content.hooks is not None))
    async with contextlib.AsyncExitStack() as stack:
        for bridge in bridges:
            stack.push_async_callback(bridge.close)
        stack.enter_context(Agent.using_thread_executor(SYNC_CALLS))
        return await drive(
            agent,
            turn,
            toolsets=turn_toolsets,
            policies=policies,
            tools_registered=[t.name for t in content.tools]
            + [t.name for t in content.client_tools]
            + [t.name for t in turn.client_tools]
            + list(subagents or ()),
            max_model_calls=content.max_model_calls,
        )


async def run_subagent(sub: SubAgent, turn: TurnContext, scope: PolicyScope) -> TurnOutcome:
    """A sub-agent's turn inside its parent's call (`agents.engine.delegation`): its own definition, version,
    connections and sub-agents."""
    return await run_turn(
        sub.content, turn, connections=sub.connections, version=sub.version, scope=scope, subagents=sub.subagents
    )


async def drive(
    agent: Agent[TurnDeps, Any],
    turn: TurnContext,
    *,
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
    answers = turn.answers
    if answers is not None and answers.resume is not None:
        # The answer to a `continuation`: go on from the request the limit held back, or stop there.
        if not answers.resume.get("approved"):
            return _stopped(turn.conversation)
        turn = dataclasses.replace(turn, message=None)
    if policies is None:
        return await _loop(agent, turn, toolsets, max_model_calls=max_model_calls)
    reason = "error"
    try:
        await policies.check(policies.builder.agent_startup(tools_registered=list(tools_registered)))
        if answers is not None and answers.release is not None:
            outcome = await _release(answers.release, policies, turn)
        else:
            message = verdicted = turn.message
            if message:
                target = await policies.check(policies.builder.input(content=message))
                verdicted = target.get("content") if isinstance(target, dict) else target
                verdicted = verdicted if isinstance(verdicted, str) else json.dumps(verdicted)
                if verdicted:
                    await turn.emit(UserMessage(content=verdicted))
            verdicted_turn = dataclasses.replace(turn, message=verdicted, stream=False)
            try:
                outcome = await _loop(
                    agent, verdicted_turn, toolsets, policies=policies, max_model_calls=max_model_calls
                )
            except OutputHeld as held:
                outcome = _held(held, turn.conversation)
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
    usage = usage_between(RunUsage(), RunUsage())
    return TurnOutcome(output=None, pending=[call], conversation=conversation, usage=usage)


async def _release(held: dict[str, Any], policies: TurnPolicies, turn: TurnContext) -> TurnOutcome:
    """The next turn of an answer held at `output`: the same context asks again, the operator's decision
    answers it (a denial is a block), and the answer is released as the verdict leaves it."""
    target = await policies.check(policies.builder.output(content=held["heldOutput"]))
    content = target.get("content") if isinstance(target, dict) else target
    content = content if isinstance(content, str) else json.dumps(content)
    restored = ConversationTypeAdapter.validate_python(held["conversation"])
    last = restored.messages[-1]
    if isinstance(last, ModelResponse) and content != last.text:
        restored.messages[-1] = rewrite_response(last, {"content": content, "tool_calls": []})
    translator = EventTranslator(turn.emit, [])
    await translator.response(restored.messages[-1])  # type: ignore[arg-type]
    await translator.finish()
    return TurnOutcome(
        output=content,
        pending=[],
        conversation=ConversationTypeAdapter.dump_python(restored, mode="json"),
        usage=usage_between(RunUsage(), RunUsage()),
    )


async def _loop(
    agent: Agent[TurnDeps, Any],
    turn: TurnContext,
    toolsets: Sequence[AbstractToolset[TurnDeps]],
    *,
    policies: TurnPolicies | None = None,
    max_model_calls: int | None = None,
) -> TurnOutcome:
    conversation, message, answers = turn.conversation, turn.message, turn.answers
    restored = ConversationTypeAdapter.validate_python(conversation) if conversation else None
    if restored is not None and restored.deferred_tool_requests is not None and message:
        # Calls a blocked turn left without answers (SPEC section 8): closed, so the session goes on.
        answers = close_unanswered(restored.deferred_tool_requests, answers)
    prompt: list[str] | None = None
    if message is not None:
        prompt = [document_prompt(name, text) for name, text in turn.documents] + [message]
    usage_before = restored.usage if restored is not None else RunUsage()
    limit = (max_model_calls, usage_before.requests) if max_model_calls is not None else None
    deps = TurnDeps(emit=turn.emit, rules=list(turn.rules), policies=policies, call_limit=limit)
    translator = EventTranslator(turn.emit, deps.model_calls)
    results = results_for(answers)
    if results is not None and restored is not None and restored.deferred_tool_requests is not None:
        # The calls the answers resume run in this turn, as the guide's turn flow has them; those that never run
        # (denied, closed unanswered) and the client's are reported here, as pydantic-ai does not call them.
        await translator.resume()
        await report_settled(turn.emit, restored.deferred_tool_requests, results)
    result = None
    options: dict[str, Any] = {
        "conversation": restored,
        "deferred_tool_results": results,
        "instructions": turn.instructions,
        "deps": deps,
        "toolsets": list(toolsets) or None,
    }
    try:
        if turn.stream:
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
            f"Two of the agent's tools are named {conflict.group(1)}: an MCP server's tool and a client tool (the"
            " definition's or one the run offers), a sub-agent or another server's tool. Rename one."
        )
        raise TurnError("tool_name_conflict", detail) from error
    await translator.finish()
    assert result is not None
    output = result.output
    pending = pending_calls(output) if isinstance(output, DeferredToolRequests) else []
    return TurnOutcome(
        output=output if isinstance(output, str) else None,
        pending=pending,
        conversation=ConversationTypeAdapter.dump_python(result.conversation, mode="json"),
        usage=usage_between(result.usage, usage_before),
    )


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
        usage=usage_between(reached.conversation.usage, usage_before),
    )


def _stopped(conversation: dict[str, Any] | None) -> TurnOutcome:
    """A run told to stop at its model-call limit ends with what it has: the last reply's text."""
    restored = ConversationTypeAdapter.validate_python(conversation) if conversation else None
    replies = [m for m in (restored.messages if restored else []) if isinstance(m, ModelResponse) and m.text]
    return TurnOutcome(
        output=replies[-1].text if replies else None,
        pending=[],
        conversation=conversation,
        usage=usage_between(RunUsage(), RunUsage()),
    )
