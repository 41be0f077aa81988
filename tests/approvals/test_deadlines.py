"""Request deadlines: the sweep closes overdue requests `expired`, the run goes on with the call denied
for expiry (recorded apart from a human "no"), and nothing answered or not yet due is touched."""

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core import mail
from django.core.management import call_command
from django.utils import timezone

from agents.models import Agent, Run, RunStatus
from approvals.actions import answers, expire_due, expiry
from approvals.models import PendingRequest, RequestStatus
from tests.conftest import Persona
from tests.helpers import drain_queued, make_agent, run_ok, run_queued, snapshot, stored_events

EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}
SEND = f"call send_email {json.dumps(EMAIL)}"
SEND_TWO = f"{SEND}\ncall send_email {json.dumps({**EMAIL, 'to': 'x@y.co'})}"
EXPIRED = "The request expired before anyone answered it."


@pytest.fixture
def assistant(admin) -> Agent:
    """send_email asks for approval; every request it opens expires 60 s after its run ends."""
    return make_agent(admin, requestDeadlineSeconds=60)


def ask(persona: Persona, message: str = SEND, session: str = "s1") -> dict[str, Any]:
    result = run_ok(persona, {"message": message, "sessionId": session})
    assert result["status"] == "awaiting_approval", result
    return result


def request_id(result: dict[str, Any], index: int = 0) -> str:
    return result["pendingRequests"][index]["requestId"]


def after(seconds: float) -> Any:
    return timezone.now() + timedelta(seconds=seconds)


def respond(persona: Persona, asked: dict[str, Any], index: int = 0, **answer: Any) -> dict[str, Any]:
    body = {"requestId": request_id(asked, index), "approved": True, **answer}
    response = persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)
    assert response.status_code == 200, response.content
    return response.json()


def continuations(asked: dict[str, Any]) -> list[Run]:
    return list(Run.objects.filter(previous_run_id=asked["runId"]))


def test_it_gives_each_request_its_deadline(operator, assistant):
    asked = ask(operator)

    [pending] = asked["pendingRequests"]

    request = PendingRequest.objects.get(id=pending["requestId"])
    assert request.expires_at == request.run.finished_at + timedelta(seconds=60)
    assert pending["expiresAt"] == request.expires_at.isoformat()


def test_it_expires_an_overdue_request_and_the_run_goes_on_with_the_call_denied(operator, assistant):
    asked = ask(operator)

    expired = expire_due(after(61))

    assert [str(p.id) for p in expired] == [request_id(asked)]
    request = operator.api("GET", f"/api/requests/{request_id(asked)}").json()
    assert (request["status"], request["answer"], request["answeredBy"]) == ("expired", None, None)
    assert request["closedAt"]
    [queued] = continuations(asked)
    # The sweep only queues the continuation; a worker runs it.
    assert mail.outbox == []
    continuation = run_queued(queued.id)
    assert continuation.status == RunStatus.COMPLETED
    assert continuation.output == f"send_email denied: {EXPIRED}"
    assert continuation.created_by is None
    assert mail.outbox == []
    # Closed when it expired, in the log of the run that asked: the SDK's completion, then Airlock's closing.
    closing = [(e.type, e.data) for e in stored_events(asked["runId"])][-2:]
    call_id = asked["pendingRequests"][0]["callId"]
    assert closing == [
        (
            "permission.completed",
            {
                "requestId": request_id(asked),
                "toolCallId": call_id,
                "result": {"kind": "cancelled", "reason": "expired"},
            },
        ),
        (
            "request.terminated",
            {"requestId": request_id(asked), "kind": "expired", "toolCallId": call_id, "toolName": "send_email"},
        ),
    ]
    # The continuation tells the model: the call never ran.
    events = stored_events(str(continuation.id))
    assert not [e for e in events if e.type in ("permission.completed", "request.terminated", "request.answered")]
    [complete] = [e.data for e in events if e.type == "tool.execution_complete"]
    assert complete == {"toolCallId": call_id, "success": False, "error": {"message": EXPIRED, "code": "denied"}}
    state = operator.api("GET", "/api/sessions/s1/state").json()
    assert (state["lastRunId"], state["pendingRequests"]) == (str(continuation.id), [])
    assert operator.api("GET", "/api/requests").json()["items"] == []
    listed = operator.api("GET", "/api/requests?status=expired").json()["items"]
    assert [r["requestId"] for r in listed] == [request_id(asked)]


def test_it_answers_expired_to_an_answer_that_comes_too_late(operator, assistant):
    asked = ask(operator)
    expire_due(after(61))
    before = snapshot()

    outcome = respond(operator, asked)

    assert (outcome["status"], outcome["continuationRunId"]) == ("expired", None)
    assert snapshot() == before
    # The late approval came while the continuation waited in the queue: it runs with the call expired.
    [continuation] = continuations(asked)
    assert run_queued(continuation.id).output == f"send_email denied: {EXPIRED}"
    assert mail.outbox == []


def test_it_answers_expired_to_an_answer_that_loses_the_race_with_the_sweep(operator, assistant, monkeypatch):
    asked = ask(operator)
    checked = answers._payload

    def sweep_meanwhile(pending: PendingRequest, response: answers.Response) -> Any:
        # The sweep closes the request after the answer was read and checked, before it is stored.
        payload = checked(pending, response)
        assert [str(p.id) for p in expire_due(after(61))] == [request_id(asked)]
        return payload

    monkeypatch.setattr(answers, "_payload", sweep_meanwhile)

    outcome = respond(operator, asked)

    assert (outcome["status"], outcome["continuationRunId"]) == ("expired", None)
    assert PendingRequest.objects.get().answer is None
    drain_queued()
    assert continuations(asked)[0].output == f"send_email denied: {EXPIRED}"
    assert mail.outbox == []


def test_it_refuses_a_run_request_that_answers_an_expired_request(operator, assistant):
    asked = ask(operator)
    expire_due(after(61))
    drain_queued()  # the continuation ran: the session is free again, only the answer is refused
    before = snapshot()

    response = operator.api(
        "POST",
        "/api/agents/assistant/runs",
        {"sessionId": "s1", "approvals": [{"requestId": request_id(asked), "approved": True}]},
    )

    assert response.status_code == 409, response.content
    assert response.json()["code"] == "request_closed"
    assert "closed (expired)" in response.json()["detail"]
    assert snapshot() == before


def test_it_expires_a_client_tool_request_as_a_failed_call(operator, assistant):
    asked = run_ok(operator, {"message": "call get_user_location {}", "sessionId": "s1"})
    assert asked["status"] == "awaiting_tool_result"

    expire_due(after(61))

    drain_queued()
    [continuation] = continuations(asked)
    assert continuation.output == f"get_user_location failed: {EXPIRED}"
    [completed] = [e for e in stored_events(asked["runId"]) if e.type == "external_tool.completed"]
    assert completed.data == {"requestId": request_id(asked)}
    [complete] = [e.data for e in stored_events(str(continuation.id)) if e.type == "tool.execution_complete"]
    assert complete["error"] == {"message": EXPIRED, "code": "failed"}


def test_it_leaves_a_request_alone_before_its_deadline(operator, assistant):
    asked = ask(operator)
    before = snapshot()

    assert expire_due(after(59)) == []
    assert expire_due() == []

    assert snapshot() == before
    assert PendingRequest.objects.get(id=request_id(asked)).status == RequestStatus.PENDING
    assert respond(operator, asked)["status"] == "accepted"


def test_it_expires_a_request_once(operator, assistant):
    asked = ask(operator)
    assert len(expire_due(after(61))) == 1
    before = snapshot()

    again = expire_due(after(120))

    assert again == []
    assert snapshot() == before
    assert len(continuations(asked)) == 1
    drain_queued(1)


def test_it_never_expires_a_request_answered_before_its_deadline(operator, assistant):
    asked = ask(operator)
    outcome = respond(operator, asked)
    before = snapshot()

    assert expire_due(after(61)) == []

    assert snapshot() == before
    assert PendingRequest.objects.get(id=request_id(asked)).status == RequestStatus.ANSWERED
    # The sweep came while the continuation waited in the queue; it runs with the approval.
    assert run_queued(outcome["continuationRunId"]).output == "send_email: sent to a@b.co"
    assert len(mail.outbox) == 1


def test_it_never_expires_a_request_of_another_session_that_is_not_due(operator, assistant):
    due, not_due = ask(operator, session="s1"), ask(operator, session="s2")
    PendingRequest.objects.filter(id=request_id(due)).update(expires_at=after(-1))

    expired = expire_due()

    assert [str(p.id) for p in expired] == [request_id(due)]
    assert PendingRequest.objects.get(id=request_id(not_due)).status == RequestStatus.PENDING
    assert continuations(not_due) == []


def test_it_never_expires_a_request_without_a_deadline(operator, admin):
    make_agent(admin)
    asked = ask(operator)

    assert asked["pendingRequests"][0]["expiresAt"] is None
    assert expire_due(after(365 * 24 * 3600)) == []
    assert PendingRequest.objects.get().status == RequestStatus.PENDING


def test_it_continues_with_the_stored_answer_when_the_other_parallel_request_expires(operator, assistant):
    asked = ask(operator, SEND_TWO)
    first = respond(operator, asked, 0)
    assert first["continuationRunId"] is None

    expired = expire_due(after(61))

    assert [str(p.id) for p in expired] == [request_id(asked, 1)]
    drain_queued()
    [continuation] = continuations(asked)
    assert continuation.output == f"send_email: sent to a@b.co\nsend_email denied: {EXPIRED}"
    assert [m.to for m in mail.outbox] == [["a@b.co"]]
    kinds = [e.data["result"] for e in stored_events(str(continuation.id)) if e.type == "permission.completed"]
    assert kinds == [{"kind": "approved"}]  # the expired one completed when it expired, in the run that asked
    closed = [e.data["result"] for e in stored_events(asked["runId"]) if e.type == "permission.completed"]
    assert closed == [{"kind": "cancelled", "reason": "expired"}]


def test_it_waits_for_the_other_parallel_request_after_one_expires(operator, assistant):
    asked = ask(operator, SEND_TWO)
    PendingRequest.objects.filter(id=request_id(asked, 0)).update(expires_at=after(-1))

    expired = expire_due()

    assert [str(p.id) for p in expired] == [request_id(asked, 0)]
    assert continuations(asked) == []
    waiting = operator.api("GET", "/api/requests").json()["items"]
    assert [r["requestId"] for r in waiting] == [request_id(asked, 1)]

    last = respond(operator, asked, 1)

    assert last["status"] == "accepted"
    assert mail.outbox == []
    continuation = run_queued(last["continuationRunId"])
    assert continuation.status == RunStatus.COMPLETED
    assert continuation.output == f"send_email denied: {EXPIRED}\nsend_email: sent to x@y.co"
    assert [m.to for m in mail.outbox] == [["x@y.co"]]
    assert continuations(asked) == [continuation]


def test_it_lets_a_run_request_answer_the_other_parallel_request_after_one_expires(operator, assistant):
    asked = ask(operator, SEND_TWO)
    PendingRequest.objects.filter(id=request_id(asked, 0)).update(expires_at=after(-1))
    expire_due()

    result = run_ok(operator, {"sessionId": "s1", "approvals": [{"requestId": request_id(asked, 1), "approved": True}]})

    assert result["status"] == "completed"
    assert result["output"] == f"send_email denied: {EXPIRED}\nsend_email: sent to x@y.co"
    assert [m.to for m in mail.outbox] == [["x@y.co"]]


def test_the_sweep_command_expires_overdue_requests(operator, assistant):
    asked = ask(operator)
    PendingRequest.objects.filter(id=request_id(asked)).update(expires_at=after(-1))
    out = StringIO()

    call_command("sweep_deadlines", stdout=out)

    assert out.getvalue().strip() == "expired 1 request(s)"
    assert PendingRequest.objects.get().status == RequestStatus.EXPIRED
    drain_queued()
    [continuation] = continuations(asked)
    assert continuation.output == f"send_email denied: {EXPIRED}"
    assert mail.outbox == []


def test_the_sweep_command_says_nothing_when_nothing_is_due(operator, assistant):
    ask(operator)
    before = snapshot()
    out = StringIO()

    call_command("sweep_deadlines", stdout=out)

    assert out.getvalue() == ""
    assert snapshot() == before


def test_it_refuses_an_answer_after_the_deadline_even_before_the_sweep(operator):
    from datetime import timedelta

    from django.utils import timezone

    from agents.definitions import DefinitionContent
    from agents.models import Agent
    from approvals.models import PendingRequest

    Agent.create(
        operator.tenant,
        DefinitionContent.model_validate(
            {"name": "late", "tools": [{"name": "send_email", "approval": "always"}], "requestDeadlineSeconds": 60}
        ),
        operator.user,
    )
    body = {"message": 'call send_email {"to": "a@b.co", "subject": "s", "body": "b"}', "sessionId": "late"}
    asked = operator.api("post", "/api/agents/late/runs", body).json()
    request_id = asked["pendingRequests"][0]["requestId"]
    PendingRequest.objects.filter(id=request_id).update(expires_at=timezone.now() - timedelta(seconds=1))

    answer = {"requestId": request_id, "approved": True}
    response = operator.api("post", f"/api/runs/{asked['runId']}/responses", answer)

    assert response.json()["status"] == "expired"
    assert PendingRequest.objects.get(id=request_id).status == "expired"
    assert PendingRequest.objects.get(id=request_id).answer is None


def test_a_request_holding_an_integer_past_the_largest_json_number_closes(operator, assistant):
    """Such an integer is refused at every door now; a row stored before that is still closed (its digest takes the
    number's text), where its receipt failed and every later sweep with it."""
    asked = ask(operator)
    PendingRequest.objects.filter(id=request_id(asked)).update(arguments={**EMAIL, "n": 10**400})

    expired = expire_due(after(61))

    assert [str(p.id) for p in expired] == [request_id(asked)]
    assert PendingRequest.objects.get(id=request_id(asked)).status == RequestStatus.EXPIRED


def test_a_closing_that_fails_does_not_keep_the_other_requests_open(operator, assistant, monkeypatch, caplog):
    """The sweep closes every tenant's overdue requests: one that cannot be closed is logged and left to the next
    sweep, the others close."""
    first, second = ask(operator, session="s1"), ask(operator, session="s2")
    failing = request_id(first)
    decide = expiry.decide

    def failing_once(pending: PendingRequest, *args: Any) -> bool:
        if str(pending.id) == failing:
            raise RuntimeError("a closing that fails")
        return decide(pending, *args)

    monkeypatch.setattr(expiry, "decide", failing_once)

    expired = expire_due(after(61))

    assert [str(p.id) for p in expired] == [request_id(second)]
    assert PendingRequest.objects.get(id=failing).status == RequestStatus.PENDING
    assert f"the overdue request {failing} could not be closed" in caplog.text
    monkeypatch.undo()
    assert [str(p.id) for p in expire_due(after(62))] == [failing]
