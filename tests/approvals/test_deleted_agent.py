"""Requests of a deleted agent as the inbox and the audit show them: the cards are gone, an answer from a
card form is never accepted and runs nothing, and the audit records the closing as the system's."""

import json
import re
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from agents.claiming import drain
from agents.definitions import DefinitionContent
from agents.models import Agent, Run
from approvals.models import PendingRequest, RequestStatus
from tests.conftest import Persona
from tests.helpers import ask_for_a_day, snapshot

EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}
SEND = f"call send_email {json.dumps(EMAIL)}"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def mailer(admin) -> Agent:
    content = {"name": "mailer", "tools": [{"name": "send_email", "approval": "always"}]}
    return Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)


def ask(persona: Persona, session: str = "s1") -> dict[str, Any]:
    response = persona.api("POST", "/api/agents/mailer/runs", {"message": SEND, "sessionId": session})
    assert response.status_code == 200, response.content
    result = response.json()
    assert result["status"] == "awaiting_approval", result
    return result


def request_id(asked: dict[str, Any]) -> str:
    return asked["pendingRequests"][0]["requestId"]


def delete(persona: Persona) -> None:
    response = persona.api("DELETE", "/api/agents/mailer")
    assert response.status_code == 204, response.content


def card_ids(html: str) -> list[str]:
    return re.findall(r'<article class="request-card[^"]*" id="request-([0-9a-f-]+)"', html)


def audit_rows(persona: Persona) -> list[dict[str, Any]]:
    response = persona.client.get("/audit/?format=json")
    assert response.status_code == 200
    return json.loads(b"".join(response.streaming_content))


def test_it_drops_the_cards_of_a_deleted_agent_from_the_inbox(admin, operator, mailer):
    first, second = ask(operator, "s1"), ask(operator, "s2")
    assert card_ids(operator.client.get("/inbox/").content.decode()) == [request_id(first), request_id(second)]

    delete(admin)

    page = operator.client.get("/inbox/").content.decode()
    assert card_ids(page) == []
    assert "Nothing is waiting for an answer." in page


@pytest.mark.parametrize("htmx", [False, True])
def test_it_never_accepts_an_inbox_answer_to_a_request_of_a_deleted_agent(admin, operator, mailer, htmx):
    asked = ask(operator)
    delete(admin)
    before = snapshot()

    response = operator.client.post(
        f"/inbox/{request_id(asked)}/answer/", {"decision": "approve"}, **HTMX if htmx else {}
    )

    if htmx:
        assert response.status_code == 200
        html = response.content.decode()
        assert "its agent was deleted" in html
        assert "data-dismiss" in html and "data-answer-form" not in html
    else:
        assert response.status_code == 302
        page = operator.client.get(response["Location"]).content.decode()
        assert "its agent was deleted" in page
        assert "The run continues" not in page
    assert snapshot() == before
    assert PendingRequest.objects.get(id=request_id(asked)).answer is None
    assert drain() == 0
    assert mail.outbox == []


def test_it_audits_the_closing_of_a_deleted_agents_requests_as_the_system(admin, operator, mailer):
    asked = ask(operator)
    # Answered in the inbox but waiting for the input request beside it: the answer never reached a run.
    day = ask_for_a_day(asked)
    answered = operator.client.post(f"/inbox/{request_id(asked)}/answer/", {"decision": "approve", "reason": "ok"})
    assert answered.status_code == 302
    assert not Run.objects.filter(previous_run_id=asked["runId"]).exists()
    before_delete = timezone.now()

    delete(admin)

    entries = audit_rows(operator)
    closings = {e["requestId"]: e for e in entries if e["actor"] == "system"}
    assert set(closings) == {request_id(asked), str(day.id)}
    for entry in closings.values():
        assert (entry["decision"], entry["who"], entry["agent"]) == ("abandoned", "system", "mailer")
        assert entry["reason"] == "The agent was deleted."
        assert entry["when"] >= before_delete.isoformat()
    [human] = [e for e in entries if e["actor"] == "user"]
    assert (human["decision"], human["who"], human["requestId"]) == ("approved", "otto", request_id(asked))
    assert PendingRequest.objects.get(id=request_id(asked)).status == RequestStatus.ABANDONED
    page = operator.client.get("/audit/?decision=abandoned").content.decode()
    assert page.count("The agent was deleted.") == 2
    assert drain() == 0
    assert mail.outbox == []
