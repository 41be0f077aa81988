"""An external agent's policies (SPEC section 12): `pre_tool_call` decides before its approval opens, as in a
hosted turn (deny at once, escalate to the inbox, transform the arguments asked about), and any interception
point over HTTP (`POST /api/agents/{name}/interceptions`), an escalation left for the caller to resolve."""

from typing import Any

import pytest
from agent_hooks import AgentContextBuilder

from agents.definitions import DefinitionContent
from agents.models import Agent, Run, RunStatus
from agents.starter_policy import starter_hooks
from approvals.models import PendingRequest, RequestStatus
from tests.conftest import Persona
from tests.helpers import assert_problem, snapshot, stored_events

pytestmark = pytest.mark.django_db

SEND = {
    "name": "send_email",
    "description": "Send a mail",
    "parameters": {
        "type": "object",
        "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "subject", "body"],
    },
}


@pytest.fixture
def mailer(admin: Persona) -> Agent:
    content = {"name": "mailer", "runtime": "external", "tools": [SEND], "hooks": starter_hooks()}
    return Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)


def mail(persona: Persona, to: str, subject: str = "Hello") -> Any:
    arguments = {"to": to, "subject": subject, "body": "Ship it."}
    body = {"kind": "approval", "toolName": "send_email", "arguments": arguments}
    return persona.api("post", "/api/agents/mailer/requests", body)


def test_a_policy_deny_decides_the_request_at_once(mailer, operator):
    opened = mail(operator, "eve@evil.test")

    assert opened.status_code == 201, opened.content
    body = opened.json()
    assert body["status"] == "decided"
    decision = body["decision"]
    assert decision["approved"] is False and decision["via"] == "policy"
    assert decision["result"] == {
        "kind": "denied-by-permission-request-hook",
        "message": "Mail to evil.test is never sent.",
    }
    assert not PendingRequest.objects.filter(status=RequestStatus.PENDING).exists()
    run = Run.objects.get(id=body["runId"])
    assert run.status == RunStatus.COMPLETED
    assert [r["interception_point"] for r in run.records] == ["pre_tool_call"]
    kinds = [e.type for e in stored_events(body["runId"])]
    assert kinds[:2] == ["run.started", "policy.verdict"]
    assert "permission.completed" in kinds and "run.awaiting" not in kinds


def test_a_policy_escalation_waits_in_the_inbox_with_the_policy(mailer, operator, admin):
    opened = mail(operator, "bob@partner.org").json()

    assert opened["status"] == "pending"
    pending = PendingRequest.objects.get(id=opened["requestId"])
    assert pending.policy == {
        "binding": "mail-guard",
        "reason": "external_recipient",
        "message": "Mail outside example.com needs a human.",
    }
    listed = admin.api("get", "/api/requests?agent=mailer").json()["items"]
    assert listed[0]["policy"]["reason"] == "external_recipient"

    answered = admin.api("post", f"/api/requests/{opened['requestId']}/responses", {"approved": True})
    assert answered.json()["status"] == "accepted"
    decided = operator.api("get", f"/api/requests/{opened['requestId']}").json()["decision"]
    assert decided["approved"] is True and decided["answeredBy"] == admin.user.username


def test_a_transform_changes_the_arguments_asked_about(mailer, operator):
    opened = mail(operator, "amy@example.com", subject="URGENT").json()

    assert opened["status"] == "pending"
    assert PendingRequest.objects.get(id=opened["requestId"]).arguments["subject"] == "urgent"


def test_an_allowed_call_still_asks_a_person(mailer, operator):
    assert mail(operator, "amy@example.com").json()["status"] == "pending"


def context(point: str = "pre_tool_call", to: str = "eve@evil.test") -> dict[str, Any]:
    builder = AgentContextBuilder(agent_id="mailer", framework="langgraph", session_id="thread-1")
    if point == "pre_tool_call":
        args = {"to": to, "subject": "Hi", "body": "Ship it."}
        return dict(builder.pre_tool_call(call_id="tc-1", name="send_email", args=args))
    return dict(builder.output(content="Your card is 4111 2222 3333 4444."))


def intercept(persona: Persona, body: Any, agent: str = "mailer") -> Any:
    return persona.api("post", f"/api/agents/{agent}/interceptions", body)


def test_interceptions_answer_the_bound_policies_verdict(mailer, operator):
    denied = intercept(operator, context())
    assert denied.status_code == 200, denied.content
    assert denied.json()["verdict"]["decision"] == "deny"
    assert denied.json()["verdict"]["reason"] == "blocked_domain", denied.json()
    assert denied.json()["extensions"]["airlock"]["record"]["interception_point"] == "pre_tool_call"

    escalated = intercept(operator, context(to="bob@partner.org")).json()["verdict"]
    assert escalated["decision"] == "deny" and escalated["approval"] is not None
    assert escalated["reason"] == "external_recipient"

    redacted = intercept(operator, context("output")).json()["verdict"]
    assert redacted["decision"] == "transform" and redacted["transform"]["value"] == "Your card is [card]."

    allowed = intercept(operator, context(to="amy@example.com")).json()["verdict"]
    assert allowed["decision"] == "allow"


def test_interceptions_change_nothing_and_refuse_bad_callers(
    mailer, deployer_without_hooks, operator, reader, outsider
):
    before = snapshot()
    assert intercept(operator, context(), agent="plain").json() == {"decision": "allow"}
    assert_problem(intercept(reader, context()), 403, "forbidden")
    assert_problem(intercept(outsider, context()), 404, "agent_not_found")
    assert intercept(operator, {"target": {}}).status_code == 400
    assert intercept(operator, {"interception_point": "nowhere"}).status_code == 400
    assert intercept(operator, [1, 2]).status_code == 400
    assert snapshot() == before


@pytest.fixture
def deployer_without_hooks(admin: Persona) -> Agent:
    content = {"name": "plain", "runtime": "external", "tools": [SEND]}
    return Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)


def test_a_version_is_loaded_once_and_each_call_hears_its_own_answers(mailer, operator):
    """Issue 56 item 4: one emitter per version (and its granted connections), not per call; calls at once on
    that emitter each answer with their own binding's verdict."""
    import asyncio

    from agents.prepare import granted_connections
    from approvals.actions import interceptions

    interceptions._EMITTERS.clear()
    assert intercept(operator, context()).json()["verdict"]["reason"] == "blocked_domain"
    version = mailer.current
    connections = granted_connections(operator.tenant, version)
    to = ["amy@example.com", "eve@evil.test", "bob@partner.org"] * 8

    async def at_once() -> list[dict[str, Any]]:
        calls = (interceptions.interception_verdict(version, connections, context(to=address)) for address in to)
        return await asyncio.gather(*calls)

    verdicts = [answer["verdict"] for answer in asyncio.run(at_once())]
    assert [verdict.get("reason") for verdict in verdicts] == [None, "blocked_domain", "external_recipient"] * 8
    assert [verdict["decision"] for verdict in verdicts] == ["allow", "deny", "deny"] * 8
    assert len(interceptions._EMITTERS) == 1
    [emitter] = interceptions._EMITTERS.values()
    assert emitter.take_records() == []

    content = {**mailer.current.content, "description": "Sends mail"}
    mailer.append_version(DefinitionContent.model_validate(content), operator.user)
    assert intercept(operator, context()).json()["verdict"]["reason"] == "blocked_domain"
    assert len(interceptions._EMITTERS) == 2
