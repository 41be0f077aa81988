"""How a turn's deferred calls (pydantic-ai's `DeferredToolRequests`) become Airlock's requests (`pending_calls`),
and how answers settle them in the next turn: the deferred results they make (`results_for`), the events of the
calls they settle without running (`report_settled`), and the calls a blocked turn left without answers
(`close_unanswered`)."""

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolDenied, ToolFailed, ToolReturn

from agents.engine import permissions
from agents.engine.answers import Answers
from agents.engine.gate import jsonable
from agents.engine.outcome import PendingCall
from agents.engine.subagent_turns import Emit, way_back
from agents.payloads import ToolExecutionComplete

BLOCKED_REASON = "The turn that would have answered this call was blocked by a policy; it did not run."


def pending_calls(requests: DeferredToolRequests) -> list[PendingCall]:
    """The requests a turn's deferred calls open: approvals (a sub-agent's call stands for the sub-agent's own
    requests), a person's question or plan, an elicitation's input, and client tools."""
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
            said = str(metadata.get("message") or "")
            pending.append(PendingCall(asks, call.tool_name, call.tool_call_id, arguments, message=said))
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


async def report_settled(emit: Emit, waiting: DeferredToolRequests, results: DeferredToolResults) -> None:
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
            complete = ToolExecutionComplete.of(call.tool_call_id, value=jsonable(value))
        await emit(complete)


def results_for(answers: Answers | None) -> DeferredToolResults | None:
    """What the answers say of deferred calls (None when they answer none: a `continuation` answer)."""
    results = answers.deferred_results() if answers else None
    return results if results is not None and (results.approvals or results.calls) else None


def close_unanswered(waiting: DeferredToolRequests, answers: Answers | None) -> Answers:
    """The answers with the calls a blocked turn left waiting (SPEC section 8) closed, so the session goes on
    with a new message: each call the answers leave open is denied, or failed for a client tool."""
    answers = answers or Answers()
    answered = {*answers.approvals, *answers.tool_results, *answers.inputs}
    for call in waiting.approvals:
        if call.tool_call_id not in answered:
            answers.deny(call.tool_call_id, BLOCKED_REASON)
    for call in waiting.calls:
        if call.tool_call_id not in answered:
            answers.fail(call.tool_call_id, BLOCKED_REASON)
    return answers
