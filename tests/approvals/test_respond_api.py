"""The respond API and the inbox routes as an API client sees them: every status an answer can get, the
continuation the last answer starts, every refusal (which changes nothing), and who may see or answer."""

import json
import uuid
from typing import Any

import pytest
from django.core import mail
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents.models import Agent, Run
from approvals.models import PendingRequest, RequestStatus, Rule
from console import models as console_models
from tests.conftest import Persona
from tests.helpers import (
    ask_for_a_day,
    assert_problem,
    drain_queued,
    make_agent,
    run,
    run_ok,
    run_queued,
    snapshot,
    stored_events,
)

EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}
SEND = f"call send_email {json.dumps(EMAIL)}"
LOCATE = "call get_user_location {}"


@pytest.fixture
def assistant(admin) -> Agent:
    """send_email asks for approval ("always"); get_user_location is a client tool."""
    return make_agent(admin)


def ask(persona: Persona, message: str = SEND, session: str = "s1") -> dict[str, Any]:
    result = run_ok(persona, {"message": message, "sessionId": session})
    assert result["pendingRequests"], result
    return result


def request_id(result: dict[str, Any], index: int = 0) -> str:
    return result["pendingRequests"][index]["requestId"]


def respond(persona: Persona, run_id: str, body: dict[str, Any]) -> Any:
    return persona.api("POST", f"/api/runs/{run_id}/responses", body)


def respond_ok(persona: Persona, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
    response = respond(persona, run_id, body)
    assert response.status_code == 200, response.content
    return response.json()


def approve(persona: Persona, asked: dict[str, Any], index: int = 0, **answer: Any) -> dict[str, Any]:
    return respond_ok(persona, asked["runId"], {"requestId": request_id(asked, index), "approved": True, **answer})


def get_run(persona: Persona, run_id: str) -> dict[str, Any]:
    response = persona.api("GET", f"/api/runs/{run_id}")
    assert response.status_code == 200, response.content
    return response.json()


# --- accepted -------------------------------------------------------------------------------------


def test_it_accepts_an_approval_and_the_continuation_sends_the_email(operator, assistant):
    asked = ask(operator)

    outcome = approve(operator, asked)

    assert outcome["status"] == "accepted"
    assert outcome["requestId"] == request_id(asked)
    assert outcome["message"]
    # The continuation waits in the queue: the answer returned before any turn ran.
    assert get_run(operator, outcome["continuationRunId"])["status"] == "queued"
    assert mail.outbox == []
    drain_queued()
    continuation = get_run(operator, outcome["continuationRunId"])
    assert continuation["status"] == "completed"
    assert continuation["output"] == "send_email: sent to a@b.co"
    assert continuation["previousRunId"] == asked["runId"]
    assert continuation["sessionId"] == "s1"
    [email] = mail.outbox
    assert (email.to, email.subject, email.body) == (["a@b.co"], "s", "b")
    request = operator.api("GET", f"/api/requests/{request_id(asked)}").json()
    assert (request["status"], request["answeredBy"]) == ("answered", "otto")
    [decision] = [e for e in stored_events(continuation["runId"]) if e.type == "permission.completed"]
    assert (decision.data["result"], decision.data["decisionSource"]) == ({"kind": "approved"}, "human_response")
    [answered] = [e for e in stored_events(continuation["runId"]) if e.type == "request.answered"]
    assert answered.data["answeredBy"] == "otto"
    state = operator.api("GET", "/api/sessions/s1/state").json()
    assert (state["lastRunId"], state["pendingRequests"]) == (continuation["runId"], [])


def test_it_accepts_a_denial_and_sends_nothing(operator, assistant):
    asked = ask(operator)

    outcome = respond_ok(
        operator, asked["runId"], {"requestId": request_id(asked), "approved": False, "reason": "Not today"}
    )

    assert outcome["status"] == "accepted"
    drain_queued()
    continuation = get_run(operator, outcome["continuationRunId"])
    assert continuation["output"] == "send_email denied: Not today"
    assert mail.outbox == []


def test_it_accepts_a_client_tools_result(operator, assistant):
    asked = ask(operator, LOCATE)
    assert asked["status"] == "awaiting_tool_result"

    outcome = respond_ok(operator, asked["runId"], {"requestId": request_id(asked), "result": "Lisbon"})

    assert outcome["status"] == "accepted"
    drain_queued()
    continuation = get_run(operator, outcome["continuationRunId"])
    assert (continuation["status"], continuation["output"]) == ("completed", "get_user_location: Lisbon")


def test_it_accepts_a_client_tools_error_message(operator, assistant):
    asked = ask(operator, LOCATE)

    outcome = respond_ok(operator, asked["runId"], {"requestId": request_id(asked), "errorMessage": "No GPS"})

    assert outcome["status"] == "accepted"
    assert run_queued(outcome["continuationRunId"]).output == "get_user_location failed: No GPS"


def test_it_accepts_an_input_answer_that_fits_the_schema(operator, assistant):
    asked = ask(operator)
    question = ask_for_a_day(asked)

    outcome = respond_ok(
        operator, asked["runId"], {"requestId": str(question.id), "action": "accept", "content": {"day": "Monday"}}
    )

    # The approval next to it still waits, so no continuation yet.
    assert (outcome["status"], outcome["continuationRunId"]) == ("accepted", None)
    question.refresh_from_db()
    assert question.answer == {"requestId": str(question.id), "action": "accept", "content": {"day": "Monday"}}
    assert question.answered_via == "api"


def test_it_accepts_a_declined_input_without_content(operator, assistant):
    asked = ask(operator)
    question = ask_for_a_day(asked)

    outcome = respond_ok(operator, asked["runId"], {"requestId": str(question.id), "action": "decline"})

    assert outcome["status"] == "accepted"


# --- already_resolved -----------------------------------------------------------------------------


def test_it_says_already_resolved_when_the_same_answer_comes_again(operator, assistant):
    asked = ask(operator)
    first = approve(operator, asked)
    drain_queued()
    before = snapshot()

    again = approve(operator, asked)

    assert again["status"] == "already_resolved"
    assert (again["requestId"], again["continuationRunId"]) == (request_id(asked), None)
    assert snapshot() == before
    drain_queued(0)
    assert Run.objects.filter(previous_run_id=asked["runId"]).count() == 1
    assert first["continuationRunId"]
    assert len(mail.outbox) == 1


def test_it_keeps_the_first_answer_when_a_different_one_follows(operator, admin, assistant):
    asked = ask(operator)
    approve(operator, asked)
    drain_queued()
    before = snapshot()

    late = respond_ok(admin, asked["runId"], {"requestId": request_id(asked), "approved": False, "reason": "Stop"})

    assert late["status"] == "already_resolved"
    assert snapshot() == before
    drain_queued(0)
    request = PendingRequest.objects.get(id=request_id(asked))
    assert (request.answer["approved"], request.answered_by) == (True, operator.user)
    assert len(mail.outbox) == 1


def test_it_says_already_resolved_for_a_stored_answer_not_yet_delivered(operator, assistant):
    asked = ask(operator, f"{SEND}\n{SEND}")
    approve(operator, asked)
    before = snapshot()

    again = approve(operator, asked, reason="twice")

    assert (again["status"], again["continuationRunId"]) == ("already_resolved", None)
    assert snapshot() == before


def test_it_says_already_resolved_for_a_request_answered_by_a_run_request(operator, assistant):
    asked = ask(operator)
    run_ok(operator, {"sessionId": "s1", "approvals": [{"requestId": request_id(asked), "approved": True}]})
    before = snapshot()

    outcome = approve(operator, asked)

    assert (outcome["status"], outcome["continuationRunId"]) == ("already_resolved", None)
    assert snapshot() == before
    assert len(mail.outbox) == 1


def test_it_refuses_a_run_request_that_repeats_an_answer_given_through_the_api(operator, assistant):
    asked = ask(operator)
    approve(operator, asked)
    drain_queued()  # the continuation ran: the session is free again, only the repeated answer is wrong
    before = snapshot()

    response = run(operator, {"sessionId": "s1", "approvals": [{"requestId": request_id(asked), "approved": True}]})

    assert_problem(response, 409, "already_answered")
    assert snapshot() == before
    assert len(mail.outbox) == 1


def test_it_refuses_a_run_request_that_repeats_a_stored_answer_not_yet_delivered(operator, assistant):
    asked = ask(operator, f"{SEND}\n{SEND}")
    approve(operator, asked)
    before = snapshot()

    response = run(
        operator,
        {
            "sessionId": "s1",
            "approvals": [
                {"requestId": request_id(asked, 0), "approved": True},
                {"requestId": request_id(asked, 1), "approved": True},
            ],
        },
    )

    assert_problem(response, 409, "already_answered")
    assert snapshot() == before
    assert mail.outbox == []


# --- closed requests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("closed_as", "status"),
    [
        (RequestStatus.EXPIRED, "expired"),
        (RequestStatus.CANCELLED, "cancelled"),
        (RequestStatus.ABANDONED, "execution_ended"),
    ],
)
def test_it_says_how_a_closed_request_ended(operator, assistant, closed_as, status):
    asked = ask(operator)
    PendingRequest.objects.filter(id=request_id(asked)).update(status=closed_as)
    before = snapshot()

    outcome = approve(operator, asked)

    assert (outcome["status"], outcome["requestId"], outcome["continuationRunId"]) == (status, request_id(asked), None)
    assert snapshot() == before
    assert mail.outbox == []


def test_it_says_execution_ended_when_the_session_moved_on(operator, assistant):
    asked = ask(operator)
    moved_on = run_ok(operator, {"message": "hello", "sessionId": "s1", "abandonPending": True})
    assert moved_on["output"].endswith("You said: hello")
    before = snapshot()

    outcome = approve(operator, asked)

    assert outcome["status"] == "execution_ended"
    assert snapshot() == before
    assert mail.outbox == []


# --- answers that do not fit ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "answer"),
    [
        (LOCATE, {"approved": True}),
        (LOCATE, {"action": "accept", "content": {}}),
        (LOCATE, {"result": "Lisbon", "content": {"city": "Lisbon"}}),
        (LOCATE, {"errorMessage": "No GPS", "reason": "denied"}),
        (SEND, {"result": {"sent": True}}),
        (SEND, {"approved": True, "result": {"sent": True}}),
        (SEND, {"approved": False, "errorMessage": "SMTP is down"}),
        (SEND, {"action": "accept"}),
        (SEND, {}),
    ],
)
def test_it_says_response_type_mismatch_for_an_answer_of_another_kind(operator, assistant, message, answer):
    asked = ask(operator, message)
    before = snapshot()

    outcome = respond_ok(operator, asked["runId"], {"requestId": request_id(asked), **answer})

    assert (outcome["status"], outcome["continuationRunId"]) == ("response_type_mismatch", None)
    assert snapshot() == before
    assert mail.outbox == []


@pytest.mark.parametrize(
    "answer",
    [
        {"approved": True},
        {"result": "Monday"},
        {"content": {"day": "Monday"}},
        {"action": "accept", "content": {"day": "Monday"}, "result": "Monday"},
        {"action": "decline", "reason": "Busy"},
    ],
)
def test_it_says_response_type_mismatch_for_an_input_request_answered_otherwise(operator, assistant, answer):
    asked = ask(operator)
    question = ask_for_a_day(asked)
    before = snapshot()

    outcome = respond_ok(operator, asked["runId"], {"requestId": str(question.id), **answer})

    assert outcome["status"] == "response_type_mismatch"
    assert snapshot() == before


@pytest.mark.parametrize("content", [None, {}, {"day": 3}, {"day": None}])
def test_it_says_invalid_response_for_content_that_does_not_fit_the_schema(operator, assistant, content):
    asked = ask(operator)
    question = ask_for_a_day(asked)
    before = snapshot()

    outcome = respond_ok(
        operator, asked["runId"], {"requestId": str(question.id), "action": "accept", "content": content}
    )

    assert (outcome["status"], outcome["continuationRunId"]) == ("invalid_response", None)
    assert "day" in outcome["message"].lower()  # the form's words: "Day is required."
    assert snapshot() == before
    # A valid answer is still welcome afterwards.
    fixed = {"requestId": str(question.id), "action": "accept", "content": {"day": "Monday"}}
    assert respond_ok(operator, asked["runId"], fixed)["status"] == "accepted"


# --- malformed and refused ------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ['{"requestId": ', "[1]", '"approve"', ""])
def test_it_answers_400_for_a_body_that_is_not_a_json_object(operator, assistant, raw):
    asked = ask(operator)
    before = snapshot()

    response = Client().post(
        f"/api/runs/{asked['runId']}/responses",
        data=raw,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {operator.token}",
    )

    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert snapshot() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"approved": "yes"}, "approved"),
        ({"approved": 1}, "approved"),
        ({"approved": True, "remember": "true"}, "remember"),
        ({"approved": True, "comment": "hi"}, "comment"),
        ({"approved": True, "request_id": "x"}, "request_id"),
        ({"action": "maybe"}, "action"),
        ({"approved": True, "overrideArguments": ["a@b.co"]}, "overrideArguments"),
    ],
)
def test_it_answers_400_for_a_malformed_body(operator, assistant, body, field):
    asked = ask(operator)
    before = snapshot()

    response = respond(operator, asked["runId"], {"requestId": request_id(asked), **body})

    problem = assert_problem(response, 400, "invalid_request")
    assert field in [e["field"] for e in problem["errors"]]
    assert snapshot() == before
    assert mail.outbox == []


@pytest.mark.parametrize("request_id_value", [None, "not-a-uuid", 42])
def test_it_answers_400_without_a_request_id(operator, assistant, request_id_value):
    asked = ask(operator)
    body = {"approved": True} if request_id_value is None else {"requestId": request_id_value, "approved": True}
    before = snapshot()

    response = respond(operator, asked["runId"], body)

    problem = assert_problem(response, 400, "invalid_request")
    assert "requestId" in [e["field"] for e in problem["errors"]]
    assert snapshot() == before


def test_it_refuses_to_remember_a_denial(operator, assistant):
    asked = ask(operator)
    before = snapshot()

    response = respond(operator, asked["runId"], {"requestId": request_id(asked), "approved": False, "remember": True})

    assert_problem(response, 400, "remember_refused")
    assert snapshot() == before
    assert Rule.objects.count() == 0


def test_it_refuses_to_remember_a_client_tools_result(operator, assistant):
    asked = ask(operator, LOCATE)
    before = snapshot()

    response = respond(operator, asked["runId"], {"requestId": request_id(asked), "result": "Lisbon", "remember": True})

    assert_problem(response, 400, "remember_refused")
    assert snapshot() == before


def test_it_refuses_to_remember_an_input_answer(operator, assistant):
    asked = ask(operator)
    question = ask_for_a_day(asked)
    before = snapshot()
    body = {"requestId": str(question.id), "action": "accept", "content": {"day": "Monday"}, "remember": True}

    response = respond(operator, asked["runId"], body)

    assert_problem(response, 400, "remember_refused")
    assert snapshot() == before


def test_it_refuses_to_remember_a_tool_that_asks_every_time(operator, admin):
    make_agent(admin, tools=[{"name": "send_email", "approval": "every_time"}])
    asked = ask(operator)
    before = snapshot()

    response = respond(operator, asked["runId"], {"requestId": request_id(asked), "approved": True, "remember": True})

    problem = assert_problem(response, 400, "remember_refused")
    assert problem["detail"].startswith("send_email asks every time")
    assert snapshot() == before


# --- not found, forbidden -------------------------------------------------------------------------


def test_it_answers_404_for_an_unknown_run(operator, assistant):
    asked = ask(operator)
    before = snapshot()

    response = respond(operator, str(uuid.uuid4()), {"requestId": request_id(asked), "approved": True})

    assert_problem(response, 404, "run_not_found")
    assert snapshot() == before


def test_it_answers_404_for_a_request_the_run_never_issued(operator, assistant):
    asked = ask(operator)
    before = snapshot()

    response = respond(operator, asked["runId"], {"requestId": str(uuid.uuid4()), "approved": True})

    assert_problem(response, 404, "request_not_found")
    assert snapshot() == before


def test_it_answers_404_for_a_request_of_another_run(operator, assistant):
    first, second = ask(operator, session="s1"), ask(operator, session="s2")
    before = snapshot()

    response = respond(operator, first["runId"], {"requestId": request_id(second), "approved": True})

    assert_problem(response, 404, "request_not_found")
    assert snapshot() == before
    assert mail.outbox == []


def test_it_answers_404_to_an_outsider_and_keeps_the_request_open(operator, outsider, assistant):
    asked = ask(operator)
    make_agent(outsider)
    theirs = ask(outsider)
    before = snapshot()

    mine_from_outside = respond(outsider, asked["runId"], {"requestId": request_id(asked), "approved": True})
    mixed = respond(outsider, theirs["runId"], {"requestId": request_id(asked), "approved": True})

    assert_problem(mine_from_outside, 404, "run_not_found")
    assert_problem(mixed, 404, "request_not_found")
    assert_problem(outsider.api("GET", f"/api/requests/{request_id(asked)}"), 404, "request_not_found")
    assert [r["requestId"] for r in outsider.api("GET", "/api/requests").json()["items"]] == [request_id(theirs)]
    assert snapshot() == before
    assert mail.outbox == []


def test_it_lets_no_reader_answer(operator, reader, assistant):
    asked = ask(operator)
    before = snapshot()

    response = respond(reader, asked["runId"], {"requestId": request_id(asked), "approved": True})

    assert_problem(response, 403, "forbidden")
    assert snapshot() == before
    # ...but a reader sees the inbox.
    assert [r["requestId"] for r in reader.api("GET", "/api/requests").json()["items"]] == [request_id(asked)]
    assert reader.api("GET", f"/api/requests/{request_id(asked)}").status_code == 200


def test_it_answers_401_without_credentials(operator, assistant):
    asked = ask(operator)
    before = snapshot()

    response = Client(enforce_csrf_checks=True).post(
        f"/api/runs/{asked['runId']}/responses",
        data=json.dumps({"requestId": request_id(asked), "approved": True}),
        content_type="application/json",
    )

    assert_problem(response, 401, "unauthenticated")
    assert snapshot() == before
    assert mail.outbox == []


# --- parallel calls -------------------------------------------------------------------------------


def test_it_continues_when_the_last_of_parallel_requests_is_answered(operator, assistant):
    asked = ask(operator, f"{SEND}\ncall send_email {json.dumps({**EMAIL, 'to': 'x@y.co'})}")
    assert len(asked["pendingRequests"]) == 2

    first = approve(operator, asked, 0)

    assert (first["status"], first["continuationRunId"]) == ("accepted", None)
    assert mail.outbox == []
    waiting = operator.api("GET", "/api/requests").json()["items"]
    assert [r["requestId"] for r in waiting] == [request_id(asked, 1)]

    second = respond_ok(
        operator, asked["runId"], {"requestId": request_id(asked, 1), "approved": False, "reason": "No"}
    )

    assert second["status"] == "accepted"
    assert get_run(operator, second["continuationRunId"])["status"] == "queued"
    assert mail.outbox == []
    drain_queued()
    continuation = get_run(operator, second["continuationRunId"])
    assert continuation["status"] == "completed"
    assert continuation["output"] == "send_email: sent to a@b.co\nsend_email denied: No"
    assert continuation["previousRunId"] == asked["runId"]
    assert [m.to for m in mail.outbox] == [["a@b.co"]]
    assert Run.objects.filter(previous_run_id=asked["runId"]).count() == 1
    assert operator.api("GET", "/api/requests").json()["items"] == []


def _queries_of_each_answer(persona: Persona, session: str, count: int) -> list[int]:
    """Ask for `count` approvals at once and approve them one by one: the queries each answer asked."""
    lines = [f"call send_email {json.dumps({**EMAIL, 'subject': f's{n}'})}" for n in range(count)]
    asked = ask(persona, "\n".join(lines), session)
    counts = []
    for index in range(count):
        with CaptureQueriesContext(connection) as captured:
            outcome = approve(persona, asked, index)
        assert outcome["status"] == "accepted"
        counts.append(len(captured))
    assert outcome["continuationRunId"]
    return counts


def test_an_answer_asks_as_many_queries_for_ten_requests_as_for_two(operator, assistant, monkeypatch):
    """Neither a plain answer nor the one that starts the continuation reads or writes request by request
    (the continuation read each answerer and updated each request on its own: 20 more queries for 10)."""
    # The token is read once, not again each TOKEN_KEPT_SECONDS: on a slow machine it was read by one answer of ten.
    monkeypatch.setattr(console_models, "TOKEN_KEPT_SECONDS", 600.0)
    two = _queries_of_each_answer(operator, "two", 2)
    ten = _queries_of_each_answer(operator, "ten", 10)

    assert set(ten[:-1]) == {two[0]}
    assert ten[-1] == two[-1]
    drain_queued(2)
    assert len(mail.outbox) == 12


def test_it_continues_with_a_client_tool_result_and_an_approval_together(operator, assistant):
    asked = ask(operator, f"{SEND}\n{LOCATE}")
    kinds = {p["kind"]: p["requestId"] for p in asked["pendingRequests"]}
    assert asked["status"] == "awaiting_approval"

    first = respond_ok(operator, asked["runId"], {"requestId": kinds["client_tool"], "result": "Lisbon"})
    last = respond_ok(operator, asked["runId"], {"requestId": kinds["approval"], "approved": True})

    assert first["continuationRunId"] is None
    drain_queued()
    continuation = get_run(operator, last["continuationRunId"])
    assert set(continuation["output"].splitlines()) == {"send_email: sent to a@b.co", "get_user_location: Lisbon"}


# --- the inbox routes -----------------------------------------------------------------------------


def test_it_lists_the_tenants_open_requests(operator, outsider, assistant):
    first, second = ask(operator, session="s1"), ask(operator, LOCATE, session="s2")
    answered = ask(operator, session="s3")
    approve(operator, answered)
    make_agent(outsider)
    ask(outsider)

    listed = operator.api("GET", "/api/requests").json()

    assert [r["requestId"] for r in listed["items"]] == [request_id(first), request_id(second)]
    assert (listed["limit"], listed["offset"], listed["next"]) == (50, 0, None)
    item = listed["items"][0]
    assert item == {
        **first["pendingRequests"][0],
        "status": "pending",
        "answered": False,
        "agent": "assistant",
        "runId": first["runId"],
        "sessionId": "s1",
        "openedAt": item["openedAt"],
        "closedAt": None,
        "answer": None,
        "answeredBy": None,
        "onBehalfOf": None,
        "answeredAt": None,
        "claimedBy": None,
        "claimedAt": None,
        "approvers": None,
        "decision": None,
    }
    assert operator.api("GET", "/api/requests?status=pending").json()["items"] == listed["items"]
    done = operator.api("GET", "/api/requests?status=answered").json()["items"]
    assert [(r["requestId"], r["answeredBy"]) for r in done] == [(request_id(answered), "otto")]


def test_it_filters_the_requests_by_agent_kind_and_tool(operator, admin, assistant):
    make_agent(admin, name="other")
    mail_request = ask(operator, session="s1")
    where_request = ask(operator, LOCATE, session="s2")
    other = run_ok(operator, {"message": SEND, "sessionId": "s3"}, agent="other")

    def listed(query: str) -> list[str]:
        response = operator.api("GET", f"/api/requests?{query}")
        assert response.status_code == 200, response.content
        return [r["requestId"] for r in response.json()["items"]]

    assert listed("agent=other") == [request_id(other)]
    assert listed("agent=assistant") == [request_id(mail_request), request_id(where_request)]
    assert listed("kind=client_tool") == [request_id(where_request)]
    assert listed("tool=send_email") == [request_id(mail_request), request_id(other)]
    assert listed("agent=assistant&tool=send_email") == [request_id(mail_request)]
    assert listed("agent=nobody") == []
    assert_problem(operator.api("GET", "/api/requests?kind=email"), 400, "invalid_request")
    assert_problem(operator.api("GET", "/api/requests?status=open"), 400, "invalid_request")


def test_it_pages_the_requests(operator, assistant):
    asked = [request_id(ask(operator, session=f"s{i}")) for i in range(5)]

    first = operator.api("GET", "/api/requests?limit=2").json()
    second = operator.api("GET", f"/api/requests?limit=2&offset={first['next']}").json()
    last = operator.api("GET", f"/api/requests?limit=2&offset={second['next']}").json()

    assert [r["requestId"] for r in first["items"] + second["items"] + last["items"]] == asked
    assert (first["next"], second["next"], last["next"]) == (2, 4, None)
    assert_problem(operator.api("GET", "/api/requests?offset=-1"), 400, "invalid_request")


def test_it_shows_one_request(operator, assistant):
    asked = ask(operator)

    shown = operator.api("GET", f"/api/requests/{request_id(asked)}")

    assert shown.status_code == 200
    body = shown.json()
    assert (body["requestId"], body["kind"], body["toolName"], body["arguments"]) == (
        request_id(asked),
        "approval",
        "send_email",
        EMAIL,
    )
    assert (body["status"], body["runId"], body["sessionId"]) == ("pending", asked["runId"], "s1")
    assert_problem(operator.api("GET", f"/api/requests/{uuid.uuid4()}"), 404, "request_not_found")


# --- remembered approvals -------------------------------------------------------------------------


def test_it_remembers_an_approval_and_the_next_identical_call_does_not_ask(operator, assistant):
    asked = ask(operator)

    outcome = approve(operator, asked, remember=True, rememberArgumentsOnly=True)

    assert outcome["status"] == "accepted"
    [rule] = Rule.objects.all()
    assert (rule.agent, rule.tool_name, rule.created_by) == (assistant, "send_email", operator.user)
    assert rule.arguments_hash
    listed = operator.api("GET", "/api/rules").json()
    assert str(rule.id) in json.dumps(listed)
    drain_queued()
    assert len(mail.outbox) == 1

    again = run_ok(operator, {"message": SEND, "sessionId": "s2"})

    assert (again["status"], again["output"]) == ("completed", "send_email: sent to a@b.co")
    decided = [e for e in stored_events(again["runId"]) if e.type == "permission.completed"]
    assert [(e.data["result"]["kind"], e.data["decisionSource"]) for e in decided] == [("approved", "host_policy")]
    assert [e.data["ruleId"] for e in stored_events(again["runId"]) if e.type == "request.answered"] == [str(rule.id)]
    assert len(mail.outbox) == 2
    # Only the exact arguments were remembered: another recipient still asks.
    other = run_ok(operator, {"message": f"call send_email {json.dumps({**EMAIL, 'to': 'x@y.co'})}", "sessionId": "s3"})
    assert other["status"] == "awaiting_approval"


def test_it_refuses_override_arguments_that_do_not_fit_a_server_tool(operator, assistant):
    asked = ask(operator)
    before = snapshot()

    outcome = respond_ok(
        operator, asked["runId"], {"requestId": request_id(asked), "approved": True, "overrideArguments": {"to": 5}}
    )

    assert outcome["status"] == "invalid_response"
    assert outcome["message"].startswith("The arguments do not fit the parameters of send_email: ")
    assert snapshot() == before
