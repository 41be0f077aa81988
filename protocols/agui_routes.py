"""`POST /api/agents/{name}/ag-ui`: an AG-UI 1.0 endpoint for each hosted agent (SPEC section 16; protocols.agui).

A `RunAgentInput` in (validated with the `ag-ui-protocol` package's models: a bad one is a 400 problem), AG-UI
events out as `text/event-stream`. Every refusal comes before the stream starts, as problem+json, and changes
nothing: no token 401, a reader 403, another tenant's agent 404."""

from typing import Any

from ag_ui.core import RunAgentInput
from django.http import StreamingHttpResponse
from ninja import Router

from agents import actions
from agents.getters import get_agent_for
from agents.prepare import RunRejected
from approvals.decisions import Actor, Via
from approvals.responses import ResponseRefused
from console.api import ApiError, Problem, require_role
from console.tenancy import ConsoleRequest
from protocols.agui import (
    ENCODER,
    AguiRefused,
    answered_stream,
    give_answers,
    read_answers,
    run_request,
    thread_session,
    trailing_user_text,
    turn_stream,
)

router = Router(tags=["ag-ui"])
EVENT_STREAM = {
    "description": "AG-UI events as server-sent events (`data: <event JSON>`), from RUN_STARTED to RUN_FINISHED or"
    " RUN_ERROR.",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


@router.post(
    "/agents/{name}/ag-ui", response={200: None, 409: Problem}, openapi_extra={"responses": {"200": EVENT_STREAM}}
)
def agui_run(request: ConsoleRequest, name: str, payload: RunAgentInput) -> Any:
    """Run the agent as an AG-UI agent: `threadId` is the Airlock session, the last user message the run's message,
    `tools` its client tools besides the definition's; `resume` entries (and tool messages for the session's open
    frontend-tool calls) answer its pending requests through the respond contract instead, and the stream follows the
    run that goes on. The run finishes `success` (a frontend tool's calls in `pendingToolCallIds`), `interrupt` (one
    interrupt per pending request) or `cancelled`, or ends with `RUN_ERROR`."""
    membership = require_role(request, "operator")
    agent = get_agent_for(request, name)
    try:
        session = thread_session(agent, payload.thread_id)
        message = trailing_user_text(payload)
        actor = Actor.person(membership.user, Via.AG_UI)
        answers = read_answers(membership, actor, session, payload)
        if answers and session is not None:
            given = give_answers(membership, actor, session, answers, message)
            return _events(answered_stream(payload, session, given, answers.answered_calls))
        if message is None:
            detail = "The input's last message is not a user message, and it answers no pending request."
            raise AguiRefused("no_user_message", detail)
        started = actions.start_run(membership, request.user, name, run_request(agent, payload, message))
    except (AguiRefused, ResponseRefused, RunRejected) as refused:
        raise ApiError.of(refused) from None
    return _events(turn_stream(started, payload))


def _events(stream: Any) -> StreamingHttpResponse:
    response = StreamingHttpResponse(stream, content_type=ENCODER.get_content_type())
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
