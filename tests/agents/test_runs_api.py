"""The run API as a client sees it: the approve / client-tool loop across turns, every rejection of a run
request (which changes nothing), who may see which runs, documents and attachments, cancel."""

import hashlib
import json
import uuid
from datetime import datetime

import pytest
from asgiref.sync import async_to_sync
from django.core import mail

from agents import claiming
from agents.models import Attachment, Run, RunStatus, Session
from agents.outcomes import finish_run
from agents.prepare import RunRejected, live_version, prepare_run
from agents.request_kinds import RequestKind
from agents.run_lifecycle import execute, record_run
from agents.run_requests import RunRequest
from approvals.models import PendingRequest, RequestStatus
from tests.helpers import (
    EMAIL,
    ask_to_send,
    assert_problem,
    call_line,
    make_agent,
    run,
    run_ok,
    snapshot,
    stored_events,
    upload,
)


def approve(persona, result, session="s1", **answer):
    request_id = result["pendingRequests"][0]["requestId"]
    return run_ok(persona, {"sessionId": session, "approvals": [{"requestId": request_id, **answer}]})


def ask_location(persona, session="s1"):
    result = run_ok(persona, {"message": call_line("get_user_location", {"precision": "city"}), "sessionId": session})
    assert result["status"] == "awaiting_tool_result", result
    return result


# --- the loop: ask, answer next turn ------------------------------------------------------------


def test_it_asks_before_sending_an_email(operator, assistant):
    result = ask_to_send(operator)

    assert result["output"] is None
    [pending] = result["pendingRequests"]
    assert pending["kind"] == "approval"
    assert pending["toolName"] == "send_email"
    assert pending["callId"]
    assert pending["arguments"] == EMAIL
    assert mail.outbox == []
    state = operator.api("GET", "/api/sessions/s1/state").json()
    assert state == {
        "sessionId": "s1",
        "agent": "assistant",
        "lastRunId": result["runId"],
        "pendingRequests": result["pendingRequests"],
    }
    assert operator.api("GET", f"/api/runs/{result['runId']}").json() == result


def test_it_sends_the_email_when_the_next_turn_approves(operator, assistant):
    asked = ask_to_send(operator)

    result = approve(operator, asked, approved=True)

    assert result["status"] == "completed"
    assert result["output"] == "send_email: sent to ada@example.com"
    assert result["previousRunId"] == asked["runId"]
    assert result["sessionId"] == "s1"
    assert result["pendingRequests"] == []
    [email] = mail.outbox
    assert (email.to, email.subject, email.body) == (["ada@example.com"], "Hello", "Ship it.")
    request = PendingRequest.objects.get()
    assert request.status == RequestStatus.ANSWERED
    assert str(request.answered_in_id) == result["runId"]
    assert request.answered_by == operator.user
    state = operator.api("GET", "/api/sessions/s1/state").json()
    assert state["lastRunId"] == result["runId"]
    assert state["pendingRequests"] == []


def test_it_sends_nothing_when_the_next_turn_denies(operator, assistant):
    asked = ask_to_send(operator)

    result = approve(operator, asked, approved=False, reason="Not on a Friday")

    assert result["status"] == "completed"
    assert result["output"] == "send_email denied: Not on a Friday"
    assert mail.outbox == []
    [decision] = [e for e in stored_events(result["runId"]) if e.type == "permission.completed"]
    assert decision.data["result"] == {"kind": "denied-interactively-by-user", "feedback": "Not on a Friday"}
    [answered] = [e for e in stored_events(result["runId"]) if e.type == "request.answered"]
    assert answered.data["answeredBy"] == "otto"
    # The call never ran: its start is at once completed with the denial.
    [complete] = [e.data for e in stored_events(result["runId"]) if e.type == "tool.execution_complete"]
    assert complete["success"] is False and complete["error"] == {"message": "Not on a Friday", "code": "denied"}


def test_it_sends_to_the_overridden_address(operator, assistant):
    asked = ask_to_send(operator, to="mallory@example.net")

    result = approve(operator, asked, approved=True, overrideArguments={**EMAIL, "to": "bob@example.com"})

    assert result["output"] == "send_email: sent to bob@example.com"
    assert [m.to for m in mail.outbox] == [["bob@example.com"]]
    [answered] = [e for e in stored_events(result["runId"]) if e.type == "request.answered"]
    assert answered.data["overrideArguments"]["to"] == "bob@example.com"
    [start] = [e for e in stored_events(result["runId"]) if e.type == "tool.execution_start"]
    assert start.data["arguments"]["to"] == "bob@example.com"


def test_it_waits_for_a_client_tool_result(operator, assistant):
    asked = ask_location(operator)
    [pending] = asked["pendingRequests"]
    assert (pending["kind"], pending["toolName"], pending["arguments"]) == (
        "client_tool",
        "get_user_location",
        {"precision": "city"},
    )

    result = run_ok(
        operator, {"sessionId": "s1", "toolResults": [{"callId": pending["callId"], "result": {"city": "Izmir"}}]}
    )

    assert result["status"] == "completed"
    assert result["output"] == 'get_user_location: {"city":"Izmir"}'
    assert result["previousRunId"] == asked["runId"]
    [completed] = [e for e in stored_events(result["runId"]) if e.type == "external_tool.completed"]
    assert completed.data == {"requestId": pending["requestId"]}
    # What the client returned is the call's completion, in the continuation's turn.
    [complete] = [e for e in stored_events(result["runId"]) if e.type == "tool.execution_complete"]
    assert (
        complete.data["toolCallId"] == pending["callId"] and complete.data["result"]["content"] == '{"city": "Izmir"}'
    )


def test_it_reports_a_client_tool_error_to_the_model(operator, assistant):
    asked = ask_location(operator)
    call_id = asked["pendingRequests"][0]["callId"]

    result = run_ok(operator, {"sessionId": "s1", "toolResults": [{"callId": call_id, "errorMessage": "GPS is off"}]})

    assert result["status"] == "completed"
    assert result["output"] == "get_user_location failed: GPS is off"


def test_it_runs_a_free_tool_alongside_a_call_that_waits(operator, assistant):
    message = call_line("send_email", EMAIL) + "\n" + call_line("get_time")
    asked = run_ok(operator, {"message": message, "sessionId": "s1"})
    assert asked["status"] == "awaiting_approval"
    assert [p["toolName"] for p in asked["pendingRequests"]] == ["send_email"]
    ran = [e.data["toolName"] for e in stored_events(asked["runId"]) if e.type == "tool.execution_start"]
    assert ran == ["get_time"]
    assert [e.type for e in stored_events(asked["runId"])].count("tool.execution_complete") == 1

    result = approve(operator, asked, approved=True)

    sent, time = result["output"].split("\n")
    assert sent == "send_email: sent to ada@example.com"
    assert time.startswith("get_time: ")
    assert datetime.fromisoformat(time.removeprefix("get_time: ")).tzinfo is not None
    assert len(mail.outbox) == 1


def test_it_needs_every_parallel_request_answered_together(operator, assistant):
    message = call_line("send_email", EMAIL) + "\n" + call_line("get_user_location")
    asked = run_ok(operator, {"message": message, "sessionId": "s1"})
    # The status shows the first pending family in the order approval, input, tool result.
    assert asked["status"] == "awaiting_approval"
    by_kind = {p["kind"]: p for p in asked["pendingRequests"]}
    assert set(by_kind) == {"approval", "client_tool"}
    approval = {"requestId": by_kind["approval"]["requestId"], "approved": True}
    location = {"callId": by_kind["client_tool"]["callId"], "result": "Izmir"}

    before = snapshot()
    assert_problem(run(operator, {"sessionId": "s1", "approvals": [approval]}), 400, "unanswered_requests")
    assert snapshot() == before

    result = run_ok(operator, {"sessionId": "s1", "approvals": [approval], "toolResults": [location]})
    assert result["output"].split("\n") == ["send_email: sent to ada@example.com", "get_user_location: Izmir"]


def test_it_links_the_turns_of_a_session(operator, assistant):
    first = run_ok(operator, {"message": "one", "sessionId": "s1"})
    second = run_ok(operator, {"message": "two", "sessionId": "s1"})
    alone = run_ok(operator, {"message": "three"})

    assert first["previousRunId"] is None
    assert second["previousRunId"] == first["runId"]
    assert second["output"] == "You said: two"
    assert alone["sessionId"] is None
    assert alone["previousRunId"] is None


def test_it_fails_a_sessionless_run_that_asks_for_approval(operator, assistant):
    result = run_ok(operator, {"message": call_line("send_email", EMAIL)})

    assert result["status"] == "failed"
    assert result["error"]["code"] == "session_required"
    assert PendingRequest.objects.count() == 0
    assert mail.outbox == []


# --- rejected requests change nothing -----------------------------------------------------------


def test_it_refuses_a_session_of_another_agent(operator, admin, assistant):
    make_agent(admin, name="other")
    run_ok(operator, {"message": "hi", "sessionId": "s1"})
    before = snapshot()

    response = run(operator, {"message": "hi", "sessionId": "s1"}, agent="other")

    assert_problem(response, 409, "session_agent_mismatch")
    assert snapshot() == before


def test_it_needs_a_session_for_answers(operator, assistant):
    asked = ask_to_send(operator)
    before = snapshot()

    response = run(operator, {"approvals": [{"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}]})

    assert_problem(response, 400, "session_required")
    assert snapshot() == before
    assert mail.outbox == []


@pytest.mark.parametrize(
    "answers",
    [
        pytest.param({"approvals": [{"requestId": str(uuid.uuid4()), "approved": True}]}, id="unknown id"),
        pytest.param({"toolResults": [{"callId": "call_99", "result": 1}]}, id="unknown call"),
        pytest.param({"toolResults": [{"callId": "call_1", "result": 1}]}, id="approval answered as tool result"),
        pytest.param({"inputResponses": [{"requestId": "PENDING", "action": "accept"}]}, id="approval as input"),
    ],
)
def test_it_refuses_an_answer_to_no_pending_request(operator, assistant, answers):
    asked = ask_to_send(operator)
    assert asked["pendingRequests"][0]["callId"] == "call_1"
    body = json.loads(json.dumps(answers).replace("PENDING", asked["pendingRequests"][0]["requestId"]))
    before = snapshot()

    response = run(operator, {"sessionId": "s1", **body})

    assert_problem(response, 400, "unknown_request")
    assert snapshot() == before


def test_it_refuses_an_answer_to_a_request_of_another_session(operator, assistant):
    asked = ask_to_send(operator, session="s1")
    ask_to_send(operator, session="s2")
    before = snapshot()

    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    response = run(operator, {"sessionId": "s2", "approvals": [approval]})

    assert_problem(response, 400, "unknown_request")
    assert snapshot() == before


def test_it_refuses_input_that_does_not_fit_the_requested_schema(operator, assistant):
    # MCP elicitation arrives separately; an `input` request is made here as the engine would store it.
    ran = run_ok(operator, {"message": "book a meeting", "sessionId": "s1"})
    run_row = Run.objects.get(id=ran["runId"])
    question = PendingRequest.objects.create(
        tenant=run_row.tenant,
        agent=run_row.agent,
        session=run_row.session,
        run=run_row,
        kind=RequestKind.INPUT,
        tool_name="book_meeting",
        call_id="call_7",
        arguments={"topic": "review"},
        message="Which day should I book?",
        requested_schema={
            "type": "object",
            "properties": {"day": {"type": "string", "enum": ["monday", "tuesday"]}},
            "required": ["day"],
        },
    )
    before = snapshot()

    for content in ({"day": "sunday"}, {"day": 3}, {}):
        answer = {"requestId": str(question.id), "action": "accept", "content": content}
        body = assert_problem(
            run(operator, {"sessionId": "s1", "inputResponses": [answer]}), 400, "invalid_input_content"
        )
        assert "day" in body["detail"].lower()  # "Day is required."

    assert snapshot() == before


def test_it_refuses_an_answer_to_a_request_answered_before(operator, assistant):
    asked = ask_to_send(operator)
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    run_ok(operator, {"sessionId": "s1", "approvals": [approval]})
    before = snapshot()

    response = run(operator, {"sessionId": "s1", "approvals": [{**approval, "approved": False}]})

    assert_problem(response, 409, "already_answered")
    assert snapshot() == before
    assert len(mail.outbox) == 1


def test_it_refuses_an_answer_to_a_request_answered_from_the_inbox(operator, assistant):
    asked = ask_to_send(operator)
    request = PendingRequest.objects.get()
    request.answer = {"requestId": str(request.id), "approved": False, "reason": "inbox said no"}
    request.save(update_fields=["answer"])
    before = snapshot()

    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    response = run(operator, {"sessionId": "s1", "approvals": [approval]})

    assert_problem(response, 409, "already_answered")
    assert snapshot() == before
    assert mail.outbox == []


def test_it_answers_a_request_once_when_two_turns_race(operator, assistant):
    """Two clients approving at the same moment both pass the checks; only the first turn may record its
    answer, the second is rejected without a trace (the test client cannot interleave two requests)."""
    asked = ask_to_send(operator)
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    body = RunRequest.model_validate({"sessionId": "s1", "approvals": [approval]})
    version = live_version(operator.tenant, assistant.name, None)
    first, second = prepare_run(operator.tenant, version, body), prepare_run(operator.tenant, version, body)
    started = record_run(first, operator.user)
    finish_run(started, async_to_sync(execute)(started))
    before = snapshot()

    with pytest.raises(RunRejected) as rejected:
        record_run(second, operator.user)

    assert (rejected.value.status, rejected.value.code) == (409, "already_answered")
    assert snapshot() == before
    assert len(mail.outbox) == 1


def test_it_refuses_an_answer_given_twice_in_one_request(operator, assistant):
    asked = ask_to_send(operator)
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    before = snapshot()

    response = run(operator, {"sessionId": "s1", "approvals": [approval, {**approval, "approved": False}]})

    assert_problem(response, 400, "duplicate_answer")
    assert snapshot() == before


def test_it_refuses_a_new_message_while_requests_wait(operator, assistant):
    ask_to_send(operator)
    before = snapshot()

    response = run(operator, {"sessionId": "s1", "message": "never mind"})

    assert_problem(response, 409, "pending_requests")
    assert snapshot() == before


def test_it_abandons_waiting_requests_when_asked_to(operator, assistant):
    message = call_line("send_email", EMAIL) + "\n" + call_line("get_user_location")
    asked = run_ok(operator, {"message": message, "sessionId": "s1"})

    result = run_ok(operator, {"sessionId": "s1", "message": "never mind", "abandonPending": True})

    assert result["status"] == "completed"
    assert result["output"].split("\n")[-1] == "You said: never mind"
    assert mail.outbox == []
    statuses = set(PendingRequest.objects.values_list("status", flat=True))
    assert statuses == {RequestStatus.ABANDONED}
    assert not PendingRequest.objects.filter(closed_at=None).exists()
    events = stored_events(result["runId"])
    terminated = [e.data for e in events if e.type == "request.terminated"]
    assert sorted(d["requestId"] for d in terminated) == sorted(p["requestId"] for p in asked["pendingRequests"])
    assert {d["kind"] for d in terminated} == {"abandoned"}
    types = [e.type for e in events]
    assert types.index("request.terminated") < types.index("user.message")
    assert operator.api("GET", "/api/sessions/s1/state").json()["pendingRequests"] == []
    # The session goes on normally afterwards.
    assert run_ok(operator, {"sessionId": "s1", "message": "hello"})["output"] == "You said: hello"


def test_it_refuses_an_attachment_of_another_tenant(operator, outsider, assistant, media):
    uploaded = upload(outsider, "secret.txt", b"globex secrets")
    assert uploaded.status_code == 201
    before = snapshot()

    response = run(operator, {"message": "echo documents", "attachmentIds": [uploaded.json()["id"]]})

    assert_problem(response, 400, "foreign_attachment")
    assert snapshot() == before


@pytest.mark.parametrize(
    ("parameters", "code"),
    [
        ({"nope": "x"}, "unknown_parameter"),
        ({"budget": "12"}, "invalid_parameter"),
        ({"urgent": "yes"}, "invalid_parameter"),
        ({"team": 7}, "invalid_parameter"),
    ],
)
def test_it_refuses_parameters_that_do_not_fit(operator, assistant, parameters, code):
    run_ok(operator, {"message": "hi", "sessionId": "s1"})
    before = snapshot()

    response = run(operator, {"message": "hi", "sessionId": "s1", "parameters": parameters})

    assert_problem(response, 400, code)
    assert snapshot() == before


def test_it_refuses_to_start_without_a_required_parameter(operator, admin):
    make_agent(
        admin,
        name="strict",
        instructions="You help {{team}}.",
        instructionsByCulture={},
        parameters=[{"name": "team", "required": True}],
    )
    before = snapshot()

    assert_problem(run(operator, {"message": "hi", "sessionId": "s1"}, agent="strict"), 400, "missing_parameter")
    assert snapshot() == before
    assert run_ok(operator, {"message": "hi", "parameters": {"team": "core"}}, agent="strict")["status"] == "completed"


@pytest.mark.parametrize("body", [{}, {"message": ""}, {"message": None, "sessionId": "s1"}])
def test_it_needs_a_message_when_no_answers_are_sent(operator, assistant, body):
    before = snapshot()

    assert_problem(run(operator, body), 400, "message_required")
    assert snapshot() == before


def test_it_refuses_to_remember_a_denial(operator, assistant):
    asked = ask_to_send(operator)
    before = snapshot()

    denial = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": False, "remember": True}
    response = run(operator, {"sessionId": "s1", "approvals": [denial]})

    assert_problem(response, 400, "remember_refused")
    assert snapshot() == before


def test_it_refuses_to_remember_a_tool_that_asks_every_time(operator, admin):
    make_agent(admin, tools=[{"name": "send_email", "approval": "every_time"}])
    asked = ask_to_send(operator)
    before = snapshot()

    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True, "remember": True}
    response = run(operator, {"sessionId": "s1", "approvals": [approval]})

    assert_problem(response, 400, "remember_refused")
    assert snapshot() == before
    assert mail.outbox == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": "hi", "culture": "not a culture"}, "culture"),
        ({"message": "hi", "lane": "BAD LANE"}, "lane"),
        ({"message": "hi", "sessionId": ""}, "sessionId"),
        ({"message": "hi", "definitionVersion": 0}, "definitionVersion"),
        # Read as given, not coerced: a boolean or a string is not a version, "yes" is not true.
        ({"message": "hi", "definitionVersion": True}, "definitionVersion"),
        ({"message": "hi", "definitionVersion": "1"}, "definitionVersion"),
        ({"message": "hi", "sessionId": "s1", "abandonPending": "yes"}, "abandonPending"),
        # A session is addressed in paths: a slash would make it unreachable.
        ({"message": "hi", "sessionId": "a/b"}, "sessionId"),
        ({"message": "hi", "sessionId": "a\nb"}, "sessionId"),
        ({"message": "hi", "attachmentIds": ["not-a-uuid"]}, "attachmentIds.0"),
        ({"message": "hi", "documents": [{"name": "", "content": "x"}]}, "documents.0.name"),
        ({"sessionId": "s1", "approvals": [{"requestId": str(uuid.UUID(int=1))}]}, "approvals.0.approved"),
        (
            {"sessionId": "s1", "inputResponses": [{"requestId": str(uuid.UUID(int=1)), "action": "maybe"}]},
            "inputResponses.0.action",
        ),
        ({"mesage": "hi"}, "mesage"),
    ],
)
def test_it_refuses_an_invalid_body_with_the_field_paths(operator, assistant, body, field):
    before = snapshot()

    problem = assert_problem(run(operator, body), 400, "invalid_request")

    assert field in [e["field"] for e in problem["errors"]], problem
    assert snapshot() == before


def test_it_answers_404_for_a_version_the_agent_does_not_have(operator, assistant):
    before = snapshot()

    assert_problem(run(operator, {"message": "hi", "definitionVersion": 9}), 404, "version_not_found")
    assert snapshot() == before


def test_it_runs_the_version_asked_for(operator, admin, assistant):
    from agents.definitions import DefinitionContent
    from tests.helpers import ASSISTANT

    assistant.append_version(
        DefinitionContent.model_validate({**ASSISTANT, "instructions": "Version two."}), admin.user
    )

    assert run_ok(operator, {"message": "echo instructions"})["output"] == "Version two."
    old = run_ok(operator, {"message": "echo instructions", "definitionVersion": 1})
    assert old["definitionVersion"] == 1
    assert old["output"] == "You help the ops team. Sign as Airlock."


# --- who sees what ------------------------------------------------------------------------------


def test_it_lets_no_reader_start_a_run(reader, assistant):
    before = snapshot()

    assert_problem(run(reader, {"message": "hi", "sessionId": "s1"}), 403, "forbidden")
    assert snapshot() == before


def test_it_lets_a_reader_see_runs(reader, operator, assistant):
    ran = run_ok(operator, {"message": "hi", "sessionId": "s1"})

    assert reader.api("GET", f"/api/runs/{ran['runId']}").json()["output"] == "You said: hi"
    assert [r["runId"] for r in reader.api("GET", "/api/runs").json()["items"]] == [ran["runId"]]


def test_it_hides_acme_runs_from_an_outsider(operator, outsider, assistant):
    ran = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "s1"})
    run_id = ran["runId"]
    before = snapshot()

    assert_problem(run(outsider, {"message": "hi", "sessionId": "s1"}), 404, "agent_not_found")
    for method, path in [
        ("GET", f"/api/runs/{run_id}"),
        ("GET", f"/api/runs/{run_id}/events"),
        ("POST", f"/api/runs/{run_id}/cancel"),
        ("GET", "/api/sessions/s1/state"),
    ]:
        response = outsider.api(method, path)
        assert response.status_code == 404, (path, response.content)
        assert response["Content-Type"] == "application/problem+json"
    assert outsider.api("GET", "/api/runs").json()["items"] == []
    assert snapshot() == before


def test_it_lists_only_the_callers_tenant_with_filters(operator, outsider, admin, assistant):
    make_agent(outsider)
    theirs = run_ok(outsider, {"message": "hi", "sessionId": "s1"})
    make_agent(admin, name="other")
    chat = run_ok(operator, {"message": "hi", "sessionId": "s1"})
    waiting = ask_to_send(operator, session="s2")
    other = run_ok(operator, {"message": "hi"}, agent="other")

    def listed(query=""):
        response = operator.api("GET", f"/api/runs{query}")
        assert response.status_code == 200, response.content
        return {r["runId"] for r in response.json()["items"]}

    assert listed() == {chat["runId"], waiting["runId"], other["runId"]}
    assert theirs["runId"] not in listed()
    assert listed("?agent=other") == {other["runId"]}
    assert listed("?status=awaiting_approval") == {waiting["runId"]}
    assert listed("?sessionId=s1") == {chat["runId"]}
    assert listed("?agent=assistant&status=completed") == {chat["runId"]}
    assert listed("?agent=nobody") == set()
    assert {r["runId"] for r in outsider.api("GET", "/api/runs").json()["items"]} == {theirs["runId"]}


def test_it_pages_the_run_list(operator, assistant):
    ids = {run_ok(operator, {"message": f"hi {n}"})["runId"] for n in range(5)}

    first = operator.api("GET", "/api/runs?limit=2").json()
    second = operator.api("GET", f"/api/runs?limit=2&offset={first['next']}").json()
    last = operator.api("GET", f"/api/runs?limit=2&offset={second['next']}").json()

    assert (first["limit"], first["offset"], first["next"]) == (2, 0, 2)
    assert (second["offset"], second["next"]) == (2, 4)
    assert last["next"] is None
    pages = [first, second, last]
    assert [len(p["items"]) for p in pages] == [2, 2, 1]
    assert {r["runId"] for p in pages for r in p["items"]} == ids


def test_it_refuses_to_cancel_a_finished_run(operator, assistant):
    ran = run_ok(operator, {"message": "hi"})
    before = snapshot()

    assert_problem(operator.api("POST", f"/api/runs/{ran['runId']}/cancel"), 409, "run_finished")
    assert snapshot() == before
    assert Run.objects.get().status == RunStatus.COMPLETED


def test_it_lets_no_reader_cancel(reader, operator, assistant):
    queued = run(operator, {"message": "hi", "sessionId": "s1"}, HTTP_PREFER="respond-async").json()
    before = snapshot()

    problem = assert_problem(reader.api("POST", f"/api/runs/{queued['runId']}/cancel"), 403, "forbidden")

    assert "needs the operator role; you are reader" in problem["detail"]
    assert snapshot() == before
    # The run was one a cancel stops: an operator's does.
    assert operator.api("POST", f"/api/runs/{queued['runId']}/cancel").json()["status"] == "cancelled"


def test_it_answers_404_for_an_unknown_run_or_session(operator, assistant):
    missing = uuid.uuid4()
    assert_problem(operator.api("GET", f"/api/runs/{missing}"), 404, "run_not_found")
    assert_problem(operator.api("POST", f"/api/runs/{missing}/cancel"), 404, "run_not_found")
    assert_problem(operator.api("GET", "/api/sessions/nope/state"), 404, "session_not_found")


# --- documents and attachments ------------------------------------------------------------------


def test_it_gives_the_model_the_documents_by_name(operator, assistant):
    documents = [{"name": "spec.md", "content": "# Spec"}, {"name": "notes.txt", "content": "remember the milk"}]

    result = run_ok(operator, {"message": "echo documents", "documents": documents})

    assert result["output"] == "spec.md\nnotes.txt"
    assert run_ok(operator, {"message": "echo documents"})["output"] == "No documents attached."


def test_it_stores_an_uploaded_attachment(operator, media):
    content = b"Zeynep's notes: ship on Monday.\n"

    response = upload(operator, "notes.txt", content)

    assert response.status_code == 201, response.content
    body = response.json()
    assert body == {
        "id": body["id"],
        "name": "notes.txt",
        "contentType": "text/plain",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    stored = Attachment.objects.get(id=body["id"])
    assert stored.tenant == operator.tenant
    with stored.file.open("rb") as stream:
        assert stream.read() == content


def test_it_refuses_an_attachment_over_the_limit(operator, settings, media):
    settings.ATTACHMENT_MAX_BYTES = 16

    assert upload(operator, "small.txt", b"x" * 16).status_code == 201
    assert_problem(upload(operator, "big.txt", b"x" * 17), 413, "attachment_too_large")
    assert list(Attachment.objects.values_list("name", flat=True)) == ["small.txt"]


def test_it_refuses_a_content_type_too_long_to_store_and_keeps_no_file(operator, media):
    refused = upload(operator, "notes.txt", b"hi", content_type="text/" + "a" * 300)

    problem = assert_problem(refused, 400, "invalid_request")
    assert problem["errors"] == [{"field": "file", "message": "its content type is longer than 255 characters"}]
    assert Attachment.objects.count() == 0
    assert not [path for path in media.rglob("*") if path.is_file()]


def test_it_lets_no_reader_upload(reader, media):
    assert_problem(upload(reader, "notes.txt", b"hi"), 403, "forbidden")
    assert Attachment.objects.count() == 0


def test_it_reads_an_attachment_as_a_document(operator, assistant, media):
    attachment = upload(operator, "plan.md", b"# Plan").json()

    result = run_ok(
        operator,
        {
            "message": "echo documents",
            "attachmentIds": [attachment["id"]],
            "documents": [{"name": "a.txt", "content": "a"}],
        },
    )

    assert result["output"] == "a.txt\nplan.md"
    attached = [e.data for e in stored_events(result["runId"]) if e.type == "document.attached"]
    assert attached == [{"name": "a.txt", "size": 1}, {"name": "plan.md", "size": 6}]


def test_it_keeps_a_session_per_tenant(operator, outsider, assistant):
    make_agent(outsider)
    run_ok(operator, {"message": "hi", "sessionId": "s1"})

    theirs = run_ok(outsider, {"message": "hello", "sessionId": "s1"})

    assert theirs["previousRunId"] is None
    assert Session.objects.filter(key="s1").count() == 2


@pytest.mark.parametrize("claimed", [False, True], ids=["queued", "running"])
def test_it_refuses_a_second_turn_while_one_of_the_session_is_queued_or_running(operator, assistant, claimed):
    first = run(operator, {"message": "hello", "sessionId": "busy"}, HTTP_PREFER="respond-async")
    assert first.status_code == 202, first.content
    if claimed:
        assert claiming.claim_task("worker-elsewhere") is not None
    assert Run.objects.get().status == (RunStatus.RUNNING if claimed else RunStatus.QUEUED)
    before = snapshot()

    response = run(operator, {"message": "again", "sessionId": "busy"})

    problem = assert_problem(response, 409, "session_busy")
    assert "still running" in problem["detail"]
    assert snapshot() == before


def test_it_refuses_a_non_boolean_approval(operator, assistant):
    asked = ask_to_send(operator, "strict")
    before = snapshot()

    answer = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": "yes"}
    response = run(operator, {"sessionId": "strict", "approvals": [answer]})

    problem = assert_problem(response, 400, "invalid_request")
    assert [e["field"] for e in problem["errors"]] == ["approvals.0.approved"]
    assert snapshot() == before
    assert mail.outbox == []
