"""Deleting a session (SPEC section 9): its open requests close `abandoned`, its turns stop, its history
stays, and a later run with its id starts a new session."""

from django.core import mail

from agents.models import Run, RunStatus, Session
from approvals.audit_queries import Criteria, iter_entries
from approvals.models import PendingRequest, RequestStatus
from tests.helpers import ask_to_send, assert_problem, run, run_ok, snapshot, stored_events


def test_it_abandons_the_open_requests_and_frees_the_id(operator, assistant):
    asked = ask_to_send(operator)
    request_id = asked["pendingRequests"][0]["requestId"]

    response = operator.api("DELETE", "/api/sessions/s1")

    assert response.status_code == 204, response.content
    assert PendingRequest.objects.get(id=request_id).status == RequestStatus.ABANDONED
    assert stored_events(asked["runId"])[-1].type == "request.terminated"
    assert Run.objects.get(id=asked["runId"]).status == RunStatus.AWAITING_APPROVAL  # its history stays
    late = operator.api("POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id, "approved": True})
    assert late.json()["status"] == "execution_ended"
    assert late.json()["message"] == "The request was closed: its session was deleted."
    assert_problem(operator.api("GET", "/api/sessions/s1/state"), 404, "session_not_found")
    [entry] = iter_entries(operator.tenant, Criteria(decision="abandoned"))
    assert entry.reason == "The session was deleted."

    # The id starts a new session: no history, nothing pending; the mail was never sent.
    fresh = run_ok(operator, {"message": "hello again", "sessionId": "s1"})
    assert fresh["status"] == "completed" and fresh["previousRunId"] is None
    live = Session.objects.get(key="s1", deleted_at=None)
    assert live.pk != Session.objects.get(key="s1", deleted_at__isnull=False).pk
    assert operator.api("GET", "/api/sessions/s1/state").json()["lastRunId"] == fresh["runId"]
    assert mail.outbox == []


def test_it_cancels_a_queued_turn_of_the_session(operator, assistant):
    queued = run(operator, {"message": "hi", "sessionId": "q1"}, HTTP_PREFER="respond-async").json()

    assert operator.api("DELETE", "/api/sessions/q1").status_code == 204

    assert Run.objects.get(id=queued["runId"]).status == RunStatus.CANCELLED


def test_it_refuses_a_missing_or_deleted_session_a_reader_and_another_tenant(operator, reader, outsider, assistant):
    ask_to_send(operator)
    before = snapshot()

    assert_problem(operator.api("DELETE", "/api/sessions/nope"), 404, "session_not_found")
    assert_problem(reader.api("DELETE", "/api/sessions/s1"), 403, "forbidden")
    assert_problem(outsider.api("DELETE", "/api/sessions/s1"), 404, "session_not_found")
    assert snapshot() == before

    assert operator.api("DELETE", "/api/sessions/s1").status_code == 204
    after = snapshot()
    assert_problem(operator.api("DELETE", "/api/sessions/s1"), 404, "session_not_found")
    assert snapshot() == after
