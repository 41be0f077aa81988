"""Client-tool outcomes (SPEC section 9): completed, failed, rejected and background, on the respond API, on
the next turn's `toolResults` and from the inbox card; a malformed outcome changes nothing."""

from typing import Any

import pytest

from approvals.models import PendingRequest
from tests.helpers import assert_problem, make_agent, run, run_ok, run_queued, snapshot, stored_events

LOCATE = 'call get_user_location {"precision": "city"}'


def ask(persona: Any) -> dict[str, Any]:
    asked = run_ok(persona, {"message": LOCATE, "sessionId": "s1"})
    assert asked["status"] == "awaiting_tool_result", asked
    return asked


def respond(persona: Any, asked: dict[str, Any], **answer: Any) -> dict[str, Any]:
    body = {"requestId": asked["pendingRequests"][0]["requestId"], **answer}
    response = persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.parametrize(
    ("answer", "reads"),
    [
        ({"result": {"city": "Izmir"}}, 'get_user_location: {"city":"Izmir"}'),
        ({"outcome": "completed", "result": "Izmir"}, "get_user_location: Izmir"),
        ({"outcome": "failed", "errorMessage": "GPS is off"}, "get_user_location failed: GPS is off"),
        ({"errorMessage": "GPS is off"}, "get_user_location failed: GPS is off"),
        ({"outcome": "rejected", "errorMessage": "The user said no"}, "get_user_location rejected: The user said no"),
        ({"outcome": "background"}, "get_user_location: accepted, running in the background"),
    ],
)
def test_each_outcome_reaches_the_model_as_the_spec_says(admin, operator, answer, reads):
    make_agent(admin)
    asked = ask(operator)

    continued = run_queued(respond(operator, asked, **answer)["continuationRunId"])

    assert continued.output == reads
    outcome = answer.get("outcome", "failed" if "errorMessage" in answer else "completed")
    [answered] = [e.data for e in stored_events(str(continued.id)) if e.type == "request.answered"]
    assert answered["outcome"] == outcome
    # What the client said is the call's completion: a failure or a refusal did not succeed.
    [complete] = [e.data for e in stored_events(str(continued.id)) if e.type == "tool.execution_complete"]
    assert complete["success"] is (outcome in ("completed", "background"))
    if not complete["success"]:
        assert complete["error"] == {"message": answer["errorMessage"], "code": outcome}


@pytest.mark.parametrize(
    "answer",
    [
        {"outcome": "rejected"},  # a refusal says why
        {"outcome": "failed"},
        {"outcome": "background", "result": 1},
        {"outcome": "completed", "errorMessage": "x"},
    ],
)
def test_an_outcome_without_what_it_needs_is_refused(admin, operator, answer):
    make_agent(admin)
    asked = ask(operator)
    before = snapshot()

    assert respond(operator, asked, **answer)["status"] == "invalid_response"
    assert snapshot() == before


def test_an_unknown_outcome_is_a_400(admin, operator):
    make_agent(admin)
    asked = ask(operator)
    before = snapshot()
    body = {"requestId": asked["pendingRequests"][0]["requestId"], "outcome": "maybe"}
    assert_problem(operator.api("POST", f"/api/runs/{asked['runId']}/responses", body), 400, "invalid_request")
    assert snapshot() == before


def test_the_next_turn_carries_an_outcome(admin, operator):
    make_agent(admin)
    asked = ask(operator)
    call_id = asked["pendingRequests"][0]["callId"]

    result = run_ok(
        operator,
        {"sessionId": "s1", "toolResults": [{"callId": call_id, "outcome": "rejected", "errorMessage": "No"}]},
    )

    assert result["output"] == "get_user_location rejected: No"
    bad = run(operator, {"sessionId": "s1", "toolResults": [{"callId": call_id, "outcome": "never"}]})
    assert_problem(bad, 400, "invalid_request")


def test_the_inbox_card_refuses_or_backgrounds_a_call(admin, operator):
    make_agent(admin)
    asked = ask(operator)
    request_id = asked["pendingRequests"][0]["requestId"]
    page = operator.client.get("/inbox/").content.decode()
    assert "Refuse to run it" in page and "Running in the background" in page

    operator.client.post(f"/inbox/{request_id}/answer/", {"decision": "reject", "error_message": "Not now"})

    assert PendingRequest.objects.get(id=request_id).answer["outcome"] == "rejected"
