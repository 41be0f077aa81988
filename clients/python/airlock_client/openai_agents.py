"""The OpenAI Agents SDK adapter: a run's tool approvals decided in Airlock's inbox (SPEC section 12).

A function tool declared with `needs_approval=True` pauses the run: `Runner.run` returns with
`result.interruptions` (`ToolApprovalItem`s). `run_with_airlock` opens an Airlock approval for each (the tool's
name, call id and arguments), waits for the decision, approves or rejects the item on `result.to_state()` and
resumes the run with that state, until the run ends without interruptions. Then, for each approved call whose
output the run holds, it reports the outcome (`POST /api/requests/{id}/outcome`).

The request id is derived from the agent, the session and the tool call id (uuid5), so running the same paused
state again finds the same request and its decision instead of asking twice. The tool must be declared in the
external agent's definition with the same name and parameters.

A denial, an expiry or a cancel rejects the call (the model reads why). The SDK cannot change an approved call's
arguments, so an approval with edited arguments rejects the call and tells the model the approved ones.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

from agents import Agent, Runner, RunResult, ToolApprovalItem, ToolCallOutputItem
from airlock_client.client import Airlock, AirlockError, AsyncAirlock, Decision, Opened, RequestClosed

# The namespace of the request ids this adapter derives.
NAMESPACE = uuid.UUID("6f1c3f4e-5d0a-4b8e-9a51-0c2a7e3b9d10")


def request_id_for(airlock_agent: str, session_id: str | None, call_id: str) -> str:
    """The Airlock request id of one tool call: the same call asks once, however often the run is resumed."""
    return str(uuid.uuid5(NAMESPACE, f"openai-agents/{airlock_agent}/{session_id or ''}/{call_id}"))


def tool_arguments(item: ToolApprovalItem) -> dict[str, Any]:
    """The call's arguments: the model's JSON, as an object."""
    raw = item.arguments
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"input": raw}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


async def _call(airlock: Airlock | AsyncAirlock, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call `airlock`'s method, in a thread when the client is the synchronous one."""
    bound = getattr(airlock, method)
    if isinstance(airlock, AsyncAirlock):
        return await bound(*args, **kwargs)
    return await asyncio.to_thread(bound, *args, **kwargs)


async def decide_interruption(
    item: ToolApprovalItem,
    *,
    airlock: Airlock | AsyncAirlock,
    airlock_agent: str,
    session_id: str | None = None,
    wait_timeout: float | None = None,
    on_request: Callable[[Opened], None] | None = None,
) -> tuple[str, Decision | RequestClosed]:
    """Open (or find again) the Airlock approval of one interruption and wait for it: its request id, and the
    decision, or the RequestClosed that says it closed unanswered."""
    call_id = item.call_id or ""
    opened = await _call(
        airlock,
        "request",
        airlock_agent,
        "approval",
        request_id=request_id_for(airlock_agent, session_id, call_id),
        session_id=session_id,
        tool_name=item.tool_name or item.name,
        tool_call_id=call_id or None,
        arguments=tool_arguments(item),
    )
    if on_request is not None:
        on_request(opened)
    rid = opened.request_id  # Airlock's id of it (derived from ours and the tenant): the one its long poll wakes
    decided: Decision | None = opened.decision
    try:
        if decided is None:
            decided = await _call(airlock, "wait", rid, wait_timeout)
        elif decided.closed_unanswered:
            return rid, RequestClosed(rid, str(decided.result.get("reason", "cancelled")), decided)
    except RequestClosed as closed:
        return rid, closed
    assert decided is not None
    return rid, decided


def rejection_message(item: ToolApprovalItem, outcome: Decision | RequestClosed) -> str | None:
    """What the model reads when the call is rejected; None when it is approved as asked."""
    if isinstance(outcome, RequestClosed):
        return f"The approval of {item.name} {outcome.reason}: the call was not run."
    if not outcome.approved:
        who = outcome.answered_by or outcome.via or "Airlock"
        why = f": {outcome.text}" if outcome.text else ""
        return f"{who} denied {item.name}{why}. The call was not run."
    if outcome.arguments is not None and outcome.arguments != tool_arguments(item):
        edited = json.dumps(outcome.arguments, sort_keys=True)
        return f"{outcome.answered_by or 'An approver'} approved {item.name} only with the arguments {edited}."
    return None


async def run_with_airlock(
    agent: Agent[Any],
    input: Any,
    *,
    airlock: Airlock | AsyncAirlock,
    airlock_agent: str,
    session_id: str | None = None,
    wait_timeout: float | None = None,
    report_outcomes: bool = True,
    on_request: Callable[[Opened], None] | None = None,
    max_turns_of_approval: int = 100,
    **run_kwargs: Any,
) -> RunResult:
    """`Runner.run(agent, input, **run_kwargs)`, with every tool approval decided through the Airlock agent
    `airlock_agent` (in its session `session_id`, when given); the final result. `wait_timeout` bounds each
    wait (WaitTimeout); `on_request` is called with each request opened (to log it). `input` may also be a
    `RunState` to resume."""
    result = await Runner.run(agent, input, **run_kwargs)
    approved: dict[str, str] = {}  # call id -> request id, to report its outcome
    for _ in range(max_turns_of_approval):
        if not result.interruptions:
            break
        state = result.to_state()
        for item in result.interruptions:
            rid, outcome = await decide_interruption(
                item,
                airlock=airlock,
                airlock_agent=airlock_agent,
                session_id=session_id,
                wait_timeout=wait_timeout,
                on_request=on_request,
            )
            message = rejection_message(item, outcome)
            if message is None:
                state.approve(item)
                approved[item.call_id or ""] = rid
            else:
                state.reject(item, rejection_message=message)
        result = await Runner.run(agent, state, **run_kwargs)
    else:
        raise RuntimeError(f"the run still asked for approvals after {max_turns_of_approval} rounds")
    if report_outcomes:
        await _report(result, approved, airlock)
    return result


async def _report(result: RunResult, approved: dict[str, str], airlock: Airlock | AsyncAirlock) -> None:
    """Report each approved call's output (once: a repeated report is 409 `outcome_reported`, left alone)."""
    for item in result.new_items:
        if not isinstance(item, ToolCallOutputItem):
            continue
        raw = item.raw_item
        call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
        rid = approved.get(str(call_id))
        if rid is None:
            continue
        output = item.output if isinstance(item.output, (str, int, float, bool, dict, list)) else str(item.output)
        try:
            await _call(airlock, "report", rid, True, output)
        except AirlockError as error:
            if error.code != "outcome_reported":
                raise


def run_with_airlock_sync(
    agent: Agent[Any],
    input: Any,
    *,
    airlock: Airlock | AsyncAirlock,
    airlock_agent: str,
    session_id: str | None = None,
    **kwargs: Any,
) -> RunResult:
    """`run_with_airlock` from synchronous code (not inside a running event loop)."""
    return asyncio.run(
        run_with_airlock(agent, input, airlock=airlock, airlock_agent=airlock_agent, session_id=session_id, **kwargs)
    )
