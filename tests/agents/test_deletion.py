"""Deleting an agent closes its future: every open request of its sessions closes `abandoned` (with the
run log's `request.terminated`), its queued turns are cancelled, and no answer given afterwards, by the
respond API or as the next turn's input, is accepted or runs anything. The history of its runs stays."""

import pytest
from asgiref.sync import async_to_sync
from django.core import mail

from agents import claiming
from agents.models import Run, RunStatus
from agents.outcomes import finish_run
from agents.prepare import RunRejected, live_version, prepare_run
from agents.queue import run_claimed
from agents.run_lifecycle import execute, record_run
from agents.run_requests import RunRequest
from approvals.models import PendingRequest, RequestStatus
from tests.helpers import (
    EMAIL,
    ask_for_a_day,
    ask_to_send,
    assert_problem,
    call_line,
    make_agent,
    run,
    run_ok,
    snapshot,
    stored_events,
)

ASYNC = {"HTTP_PREFER": "respond-async"}


def request_id(asked, index=0):
    return asked["pendingRequests"][index]["requestId"]


def delete(persona, agent="assistant"):
    response = persona.api("DELETE", f"/api/agents/{agent}")
    assert response.status_code == 204, response.content


def respond(persona, asked, **answer):
    body = {"requestId": request_id(asked), "approved": True, **answer}
    response = persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)
    assert response.status_code == 200, response.content
    return response.json()


def request_of(persona, rid):
    response = persona.api("GET", f"/api/requests/{rid}")
    assert response.status_code == 200, response.content
    return response.json()


def test_it_closes_every_open_request_of_the_agent_abandoned(admin, operator, assistant):
    first = ask_to_send(operator, session="s1")
    day = ask_for_a_day(first)
    second = ask_to_send(operator, session="s2")
    runs_before = sorted(Run.objects.values_list("id", "status"))

    delete(admin)

    for rid in (request_id(first), str(day.id), request_id(second)):
        closed = request_of(operator, rid)
        assert (closed["status"], closed["answer"], closed["answeredBy"]) == ("abandoned", None, None)
        assert closed["closedAt"]
    assert operator.api("GET", "/api/requests").json()["items"] == []
    # The history stays as it was: no run is rewritten and none starts.
    assert sorted(Run.objects.values_list("id", "status")) == runs_before
    terminated = [e.data for e in stored_events(first["runId"]) if e.type == "request.terminated"]
    assert terminated == [
        {
            "requestId": request_id(first),
            "kind": "abandoned",
            "toolName": "send_email",
            "toolCallId": first["pendingRequests"][0]["callId"],
        },
        {"requestId": str(day.id), "kind": "abandoned", "toolName": "book_meeting", "toolCallId": "call-day"},
    ]
    assert stored_events(first["runId"])[-1].type == "request.terminated"
    [other] = [e.data for e in stored_events(second["runId"]) if e.type == "request.terminated"]
    assert other["requestId"] == request_id(second)
    assert claiming.drain() == 0
    assert mail.outbox == []


def test_it_never_accepts_an_answer_to_a_request_of_a_deleted_agent(admin, operator, assistant):
    asked = ask_to_send(operator)
    delete(admin)
    before = snapshot()

    outcome = respond(operator, asked)

    assert (outcome["status"], outcome["continuationRunId"]) == ("execution_ended", None)
    assert "deleted" in outcome["message"]
    assert snapshot() == before
    assert claiming.drain() == 0
    assert mail.outbox == []


def test_it_refuses_the_next_turns_answer_to_a_request_of_a_deleted_agent(admin, operator, assistant):
    asked = ask_to_send(operator)
    delete(admin)
    before = snapshot()

    approval = {"requestId": request_id(asked), "approved": True}
    response = run(operator, {"sessionId": "s1", "approvals": [approval]})

    assert_problem(response, 404, "agent_not_found")
    assert snapshot() == before
    assert mail.outbox == []


def test_it_cancels_the_queued_continuation_of_a_deleted_agent(admin, operator, assistant):
    asked = ask_to_send(operator)
    answered = respond(operator, asked)
    assert answered["status"] == "accepted"
    continuation = Run.objects.get(id=answered["continuationRunId"])
    assert continuation.status == RunStatus.QUEUED

    delete(admin)

    continuation.refresh_from_db()
    assert continuation.status == RunStatus.CANCELLED
    assert claiming.drain() == 0
    assert mail.outbox == []
    # The answer it carried never reached the engine: its request is closed, the answer kept for the audit.
    request = PendingRequest.objects.get(id=request_id(asked))
    assert (request.status, request.answer["approved"], request.answered_in) == (RequestStatus.ABANDONED, True, None)
    assert respond(operator, asked)["status"] == "execution_ended"
    assert claiming.drain() == 0
    assert mail.outbox == []


def test_it_cancels_a_queued_run_of_a_deleted_agent(admin, operator):
    make_agent(admin, tools=[{"name": "send_email", "approval": "never"}])
    response = run(operator, {"message": call_line("send_email", EMAIL), "sessionId": "s1"}, **ASYNC)
    assert response.status_code == 202, response.content

    delete(admin)

    assert Run.objects.get(id=response.json()["runId"]).status == RunStatus.CANCELLED
    assert claiming.drain() == 0
    assert mail.outbox == []


def test_it_never_starts_a_claimed_turn_of_a_deleted_agent(admin, operator):
    make_agent(admin, tools=[{"name": "send_email", "approval": "never"}])
    response = run(operator, {"message": call_line("send_email", EMAIL), "sessionId": "s1"}, **ASYNC)
    assert response.status_code == 202, response.content
    claimed = claiming.claim_task("worker-a")
    assert claimed is not None

    delete(admin)
    run_claimed(claimed)

    assert Run.objects.get(id=response.json()["runId"]).status == RunStatus.CANCELLED
    assert mail.outbox == []


def test_it_closes_what_a_turn_running_during_the_deletion_leaves_open(admin, operator, assistant):
    version = live_version(operator.tenant, "assistant", None)
    started = record_run(
        prepare_run(operator.tenant, version, RunRequest(message=call_line("send_email", EMAIL), session_id="s1")),
        operator.user,
    )

    delete(admin)
    opened = finish_run(started, async_to_sync(execute)(started))

    run = Run.objects.get(id=started.run.id)
    assert (run.status, opened) == (RunStatus.AWAITING_APPROVAL, [])
    [request] = PendingRequest.objects.filter(run=run)
    assert request.status == RequestStatus.ABANDONED
    assert operator.api("GET", "/api/requests").json()["items"] == []
    assert [e.type for e in stored_events(str(run.id))][-3:] == [
        "run.awaiting",
        "permission.completed",
        "request.terminated",
    ]
    asked = {"runId": str(run.id), "pendingRequests": [{"requestId": str(request.id)}]}
    assert respond(operator, asked)["status"] == "execution_ended"
    assert claiming.drain() == 0
    assert mail.outbox == []


def test_it_refuses_to_start_a_turn_of_an_agent_deleted_after_its_checks(admin, operator):
    make_agent(admin, tools=[{"name": "send_email", "approval": "never"}])
    run_ok(operator, {"message": "hello", "sessionId": "s1"})
    version = live_version(operator.tenant, "assistant", None)
    prepared = prepare_run(
        operator.tenant, version, RunRequest(message=call_line("send_email", EMAIL), session_id="s1")
    )
    delete(admin)
    before = snapshot()

    with pytest.raises(RunRejected) as rejected:
        record_run(prepared, operator.user)

    assert (rejected.value.status, rejected.value.code) == (404, "agent_not_found")
    assert snapshot() == before
    assert claiming.drain() == 0
    assert mail.outbox == []


def test_it_deletes_from_the_console_the_same_way(admin, operator, assistant):
    asked = ask_to_send(operator)

    response = admin.client.post("/agents/assistant/delete/", follow=True)

    assert "Deleted agent “assistant”." in response.content.decode()
    assert request_of(operator, request_id(asked))["status"] == "abandoned"
    assert respond(operator, asked)["status"] == "execution_ended"
    assert claiming.drain() == 0
    assert mail.outbox == []


def test_it_leaves_other_agents_requests_open(admin, operator, assistant):
    make_agent(admin, name="other")
    mine = ask_to_send(operator, session="s1")
    theirs = run(operator, {"message": call_line("send_email", EMAIL), "sessionId": "s2"}, "other").json()

    delete(admin)

    assert request_of(operator, request_id(mine))["status"] == "abandoned"
    assert request_of(operator, request_id(theirs))["status"] == "pending"
    assert respond(operator, theirs)["status"] == "accepted"


# --- answers whose requestId is not a UUID (SPEC section 4: unknown_request) -----------------------


@pytest.mark.parametrize("rid", ["not-a-uuid", "", "1234", "0b1c2d3e-0000-4000-8000-00000000000"])
@pytest.mark.parametrize("field", ["approvals", "inputResponses"])
def test_it_answers_unknown_request_for_a_request_id_that_is_not_a_uuid(operator, assistant, field, rid):
    asked = ask_to_send(operator)
    ask_for_a_day(asked)
    before = snapshot()
    answer = {"requestId": rid, "approved": True} if field == "approvals" else {"requestId": rid, "action": "decline"}

    response = run(operator, {"sessionId": "s1", field: [answer]})

    assert_problem(response, 400, "unknown_request")
    assert snapshot() == before
    assert mail.outbox == []
