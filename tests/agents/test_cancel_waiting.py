"""Cancelling a run that waits on requests (SPEC section 9): the run ends `cancelled`, its open requests
close `cancelled` with who cancelled them, and the next turn tells the model the calls did not run."""

from django.core import mail

from agents.models import Event, Run, RunStatus
from approvals.audit_queries import Criteria, iter_entries
from approvals.models import PendingRequest, RequestStatus
from tests.helpers import EMAIL, ask_to_send, assert_problem, call_line, run_ok, snapshot, stored_events


def respond(persona, run_id, request_id, **answer):
    return persona.api("POST", f"/api/runs/{run_id}/responses", {"requestId": request_id, **answer})


def test_it_cancels_a_run_waiting_for_an_approval_and_tells_the_next_turn(operator, assistant):
    asked = ask_to_send(operator)
    request_id = asked["pendingRequests"][0]["requestId"]

    response = operator.api("POST", f"/api/runs/{asked['runId']}/cancel")

    assert response.status_code == 200, response.content
    assert response.json() == {"runId": asked["runId"], "status": "cancelled"}
    run = Run.objects.get(id=asked["runId"])
    assert (run.status, run.finished_at is not None) == (RunStatus.CANCELLED, True)
    pending = PendingRequest.objects.get(id=request_id)
    assert (pending.status, pending.closed_by, pending.answer) == (RequestStatus.CANCELLED, operator.user, None)
    # Closed when cancelled: the SDK's completion, Airlock's closing, the SDK's abort, the run's end.
    events = [(e.type, e.data) for e in stored_events(asked["runId"])][-4:]
    assert events[0] == (
        "permission.completed",
        {"requestId": request_id, "toolCallId": "call_1", "result": {"kind": "cancelled", "reason": "cancelled"}},
    )
    assert events[1][0] == "request.terminated" and events[1][1]["kind"] == "cancelled"
    assert events[2:] == [("abort", {"reason": "user_initiated"}), ("run.cancelled", {"cancelledBy": "otto"})]
    # An answer that comes later is told so, and changes nothing.
    before = snapshot()
    late = respond(operator, asked["runId"], request_id, approved=True)
    assert late.json()["status"] == "cancelled"
    assert snapshot() == before

    # The session goes on: the model hears that the call did not run, and no mail is sent.
    after = run_ok(operator, {"message": "anything else?", "sessionId": "s1"})
    assert after["status"] == "completed"
    told = Event.objects.get(run_id=after["runId"], type="tool.execution_complete").data
    assert told == {
        "toolCallId": "call_1",
        "success": False,
        "error": {"message": "The request was cancelled.", "code": "denied"},
    }
    assert not Event.objects.filter(run_id=after["runId"], type="permission.completed").exists()  # told once
    assert mail.outbox == []


def test_the_audit_says_who_cancelled(operator, assistant):
    asked = ask_to_send(operator)
    operator.api("POST", f"/api/runs/{asked['runId']}/cancel")

    [entry] = iter_entries(operator.tenant, Criteria(who="otto"))
    assert (entry.decision, entry.who, entry.tool_name) == ("cancelled", "otto", "send_email")
    assert list(iter_entries(operator.tenant, Criteria(who="system"))) == []


def test_it_cancels_with_the_answers_stored_so_far(operator, assistant):
    """Two calls asked, one answered in the inbox: the cancel closes both, the stored answer stays for the audit."""
    two = call_line("send_email", EMAIL) + "\n" + call_line("send_email", {**EMAIL, "to": "b@example.com"})
    asked = run_ok(operator, {"message": two, "sessionId": "s2"})
    first, second = (p["requestId"] for p in asked["pendingRequests"])
    assert respond(operator, asked["runId"], first, approved=True).json()["status"] == "accepted"

    assert operator.api("POST", f"/api/runs/{asked['runId']}/cancel").json()["status"] == "cancelled"

    closed = {str(p.id): (p.status, p.answer is not None) for p in PendingRequest.objects.all()}
    assert closed == {first: (RequestStatus.CANCELLED, True), second: (RequestStatus.CANCELLED, False)}


def test_it_refuses_to_cancel_a_run_whose_answers_moved_on(operator, assistant):
    asked = ask_to_send(operator)
    request_id = asked["pendingRequests"][0]["requestId"]
    run_ok(operator, {"sessionId": "s1", "approvals": [{"requestId": request_id, "approved": False}]})
    before = snapshot()

    assert_problem(operator.api("POST", f"/api/runs/{asked['runId']}/cancel"), 409, "run_finished")

    assert snapshot() == before


def test_it_lets_no_reader_cancel_a_waiting_run(reader, operator, assistant):
    asked = ask_to_send(operator)
    before = snapshot()

    assert_problem(reader.api("POST", f"/api/runs/{asked['runId']}/cancel"), 403, "forbidden")
    assert reader.client.post(f"/runs/{asked['runId']}/cancel/").status_code == 403

    assert snapshot() == before


def test_an_operator_cancels_a_waiting_run_from_its_page(operator, assistant):
    asked = ask_to_send(operator)
    page = operator.client.get(f"/runs/{asked['runId']}/").content.decode()
    assert "data-confirm=" in page and "Cancel run" in page

    response = operator.client.post(f"/runs/{asked['runId']}/cancel/", follow=True)

    assert "Cancelled the run" in response.content.decode()
    assert Run.objects.get(id=asked["runId"]).status == RunStatus.CANCELLED
    assert "Cancel run" not in operator.client.get(f"/runs/{asked['runId']}/").content.decode()
