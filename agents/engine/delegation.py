"""Sub-agent delegation (SPEC section 10; what a sub-agent is and its way back: `agents.engine.subagent_turns`): each
sub-agent as a tool of the parent's turn, whose call runs the sub-agent's own turn, started or resumed with the
answers it waited for. The turn itself comes in as `run` (`agents.engine.turn` offers this toolset, so it sits
above this module)."""

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from typing import Any

from pydantic_ai import ApprovalRequired, FunctionToolset, RunContext, Tool, ToolDenied, ToolFailed

from agents.engine import permissions
from agents.engine.answers import Answers
from agents.engine.context import TurnContext, TurnDeps
from agents.engine.gate import post_tool_call, pre_tool_call
from agents.engine.outcome import TurnBlocked, TurnError, TurnOutcome
from agents.engine.seams import as_text
from agents.engine.subagent_turns import Counting, SubAgent, Tagged, totals
from agents.payloads import SubagentCompleted, SubagentFailed, SubagentStarted, ToolExecutionComplete, UserMessage
from agents.policies import PolicyScope

# A turn of a sub-agent's own definition, in its policy scope (`agents.engine.turn.run_subagent`).
RunSubAgent = Callable[[SubAgent, TurnContext, PolicyScope], Awaitable[TurnOutcome]]


def subagent_toolset(
    subagents: Mapping[str, SubAgent], scope: PolicyScope, stream: bool, run: RunSubAgent
) -> FunctionToolset[TurnDeps]:
    """Each sub-agent as a tool `name(task)` (SPEC section 10; agents/engine/subagent_turns.py), whose call runs the
    sub-agent's turn through `run`; with `stream` (someone watches the parent's turn) their replies stream too."""

    def tool(sub: SubAgent) -> Tool[TurnDeps]:
        async def delegate(ctx: RunContext[TurnDeps], task: str) -> str | ToolDenied:
            return await _delegate(sub, ctx, task, scope=scope, stream=stream, run=run)

        return Tool(delegate, name=sub.name, description=_delegation(sub)["toolDescription"])

    return FunctionToolset([tool(sub) for sub in subagents.values()])


async def _delegate(
    sub: SubAgent, ctx: RunContext[TurnDeps], task: str, *, scope: PolicyScope, stream: bool, run: RunSubAgent
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
            checked = await pre_tool_call(deps, parent, _delegation(sub), call_id, {"task": task})
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
        turn = TurnContext(
            instructions=sub.instructions,
            conversation=conversation,
            message=message,
            emit=counted,
            answers=answers,
            rules=sub.rules,
            stream=stream,
        )
        outcome = await run(sub, turn, scope.within(state["agentId"]))
    except TurnError as error:
        state["toolCalls"] += counted.tool_calls
        failure = _failure(sub, error)
        await deps.emit(SubagentFailed(**totals(sub, call_id, state), error=f"{error.code}: {error.message}"))
        denied = await post_tool_call(parent, sub.name, call_id, arguments, failure, is_error=True) if parent else None
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
        reply = await post_tool_call(parent, sub.name, call_id, arguments, reply, is_error=False)
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
