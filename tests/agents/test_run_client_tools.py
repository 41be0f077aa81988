"""Client tools a run brings (`clientTools` of the run request, AG-UI's frontend tools): the scripted model is offered
them next to the definition's for that turn, a call of one waits as a `client_tool` request routed as the definition
routes that kind, the turns carrying its answer offer them again, and a bad list is refused with nothing changed."""

import pytest

from agents.models import Run
from agents.starter_policy import starter_hooks
from approvals.models import ApproverGroup, PendingRequest
from tests.helpers import assert_problem, call_line, make_agent, run, run_ok, run_queued, snapshot, stored_events

MODAL = {
    "name": "open_modal",
    "description": "Opens a modal in the user's browser.",
    "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
}


def open_modal(persona, session="s1", tools=(MODAL,), agent="assistant", **more):
    body = {"message": call_line("open_modal", {"title": "Hi"}), "sessionId": session, "clientTools": list(tools)}
    return run(persona, {**body, **more}, agent)


def test_it_offers_a_runs_client_tool_and_waits_for_its_result(operator, assistant):
    asked = open_modal(operator).json()

    assert asked["status"] == "awaiting_tool_result", asked
    [pending] = asked["pendingRequests"]
    assert (pending["kind"], pending["toolName"], pending["arguments"]) == (
        "client_tool",
        "open_modal",
        {"title": "Hi"},
    )
    [requested] = [e for e in stored_events(asked["runId"]) if e.type == "external_tool.requested"]
    assert requested.data["toolName"] == "open_modal"
    assert Run.objects.get(id=asked["runId"]).client_tools == [MODAL]

    # The next turn carries the result and no tools: the run that asked offers them again.
    answer = {"callId": pending["callId"], "result": "opened"}
    result = run_ok(operator, {"sessionId": "s1", "toolResults": [answer], "message": "help"})

    assert result["status"] == "completed"
    assert result["output"].startswith("open_modal: opened\nI am the scripted model.")
    assert result["output"].endswith("Tools I can call here: send_email, get_time, get_user_location, open_modal")
    assert Run.objects.get(id=result["runId"]).client_tools == [MODAL]
    [complete] = [e for e in stored_events(result["runId"]) if e.type == "tool.execution_complete"]
    assert complete.data["toolCallId"] == pending["callId"] and complete.data["success"] is True


def test_a_run_without_the_tools_is_not_offered_them(operator, assistant):
    offered = run_ok(operator, {"message": "help", "sessionId": "s1", "clientTools": [MODAL]})
    assert offered["output"].endswith("Tools I can call here: send_email, get_time, get_user_location, open_modal")

    # The same definition's agent, cached when the run above offered its tools beside it.
    help_only = run_ok(operator, {"message": "help", "sessionId": "s2"})
    result = run_ok(operator, {"message": call_line("open_modal", {"title": "Hi"}), "sessionId": "s3"})

    assert help_only["output"].endswith("Tools I can call here: send_email, get_time, get_user_location")
    assert result["status"] == "completed" and result["pendingRequests"] == []
    assert result["output"].startswith("open_modal failed:")
    assert Run.objects.get(id=result["runId"]).client_tools == []


def test_a_new_message_offers_only_the_tools_it_brings(operator, assistant):
    asked = open_modal(operator).json()
    call_id = asked["pendingRequests"][0]["callId"]
    run_ok(operator, {"sessionId": "s1", "toolResults": [{"callId": call_id, "result": "opened"}]})

    result = run_ok(operator, {"message": call_line("open_modal", {"title": "Again"}), "sessionId": "s1"})

    assert result["pendingRequests"] == [] and result["output"].startswith("open_modal failed:")


def test_an_answer_given_in_the_inbox_continues_with_the_runs_tools(operator, assistant):
    asked = open_modal(operator).json()
    pending = asked["pendingRequests"][0]

    answered = operator.api("POST", f"/api/requests/{pending['requestId']}/responses", {"result": {"ok": True}})

    assert answered.status_code == 200, answered.content
    continuation = run_queued(answered.json()["continuationRunId"])
    assert (continuation.status, continuation.output) == ("completed", 'open_modal: {"ok":true}')
    assert continuation.client_tools == [MODAL]


def test_a_queued_run_keeps_its_tools_for_its_worker(operator, assistant):
    body = {"message": call_line("open_modal", {"title": "Hi"}), "sessionId": "s1", "clientTools": [MODAL]}
    queued = operator.api("POST", "/api/agents/assistant/runs", body, HTTP_PREFER="respond-async")
    assert queued.status_code == 202, queued.content

    ran = run_queued(queued.json()["runId"])

    assert ran.status == "awaiting_tool_result"
    assert PendingRequest.objects.get(run=ran).tool_name == "open_modal"


def test_a_runs_tool_is_routed_as_the_definition_routes_client_tools(admin, operator):
    for name in ("meetings_team", "frontend_team"):
        ApproverGroup.objects.create(tenant=admin.tenant, name=name)
    make_agent(
        admin,
        # An unprefixed MCP server's routing is for its tools, never for a client tool no definition names.
        mcpServers=[{"connection": "meetings", "approvers": "meetings_team"}],
        requestKinds=[{"kind": "client_tool", "approvers": "frontend_team"}],
    )

    asked = open_modal(admin).json()

    assert PendingRequest.objects.get(id=asked["pendingRequests"][0]["requestId"]).approvers == "frontend_team"


def test_an_answering_turn_may_bring_its_own_tools(operator, assistant):
    asked = open_modal(operator).json()
    call_id = asked["pendingRequests"][0]["callId"]
    other = {**MODAL, "name": "close_modal"}

    result = run_ok(
        operator,
        {"sessionId": "s1", "toolResults": [{"callId": call_id, "result": "ok"}], "clientTools": [MODAL, other]},
    )

    assert result["status"] == "completed"
    assert [t["name"] for t in Run.objects.get(id=result["runId"]).client_tools] == ["open_modal", "close_modal"]


TOO_MANY = [{"name": f"tool_{n}"} for n in range(65)]
HUGE = [{"name": f"tool_{n}", "description": "x" * 2000, "parameters": {"description": "y" * 6000}} for n in range(40)]


@pytest.mark.parametrize(
    ("tools", "code"),
    [
        pytest.param([MODAL, MODAL], "invalid_request", id="a name twice"),
        pytest.param([{"name": "open-modal"}], "invalid_request", id="not an identifier"),
        pytest.param([{"name": "t", "parameters": {"type": "string"}}], "invalid_request", id="not an object schema"),
        pytest.param(
            [{"name": "t", "parameters": {"type": "object", "$ref": "https://x"}}], "invalid_request", id="ref"
        ),
        pytest.param([{"name": "t", "approvers": "ops"}], "invalid_request", id="routing of its own"),
        pytest.param(TOO_MANY, "invalid_request", id="65 tools"),
        pytest.param(HUGE, "invalid_request", id="over 256 KiB"),
        pytest.param([{"name": "send_email"}], "tool_name_conflict", id="a server tool's name"),
        pytest.param([{"name": "get_user_location"}], "tool_name_conflict", id="a client tool's name"),
    ],
)
def test_it_refuses_a_bad_tool_list_with_nothing_changed(operator, assistant, tools, code):
    before = snapshot()

    response = open_modal(operator, tools=tools)

    assert_problem(response, 400, code)
    assert snapshot() == before


def test_it_refuses_a_tool_named_as_a_sub_agent(admin, operator):
    make_agent(
        admin, name="researcher", clientTools=[], parameters=[], instructions="Research.", instructionsByCulture={}
    )
    make_agent(admin, subAgents=["researcher"])
    before = snapshot()

    response = open_modal(operator, tools=[{"name": "researcher"}])

    assert_problem(response, 400, "tool_name_conflict")
    assert snapshot() == before


def test_abandoning_the_call_goes_on_with_the_tools_the_message_brings(operator, assistant):
    open_modal(operator)

    result = run_ok(operator, {"sessionId": "s1", "message": "hello", "abandonPending": True})

    assert result["output"] == "open_modal failed: The request was abandoned: the session moved on.\nYou said: hello"
    assert Run.objects.get(id=result["runId"]).client_tools == []


def test_a_runs_tool_passes_the_policies_before_its_request_opens(admin, operator):
    make_agent(admin, name="guarded", hooks=starter_hooks())

    result = open_modal(operator, agent="guarded").json()

    # The starter policy's manifest does not list the tool: its `pre_tool_call` refuses the call, no request opens.
    assert (result["status"], result["pendingRequests"]) == ("completed", [])
    assert result["output"] == "open_modal denied: Request blocked by Agent Control Specification."
    [verdict] = [e for e in stored_events(result["runId"]) if e.type == "policy.verdict"]
    assert verdict.data["toolName"] == "open_modal"
