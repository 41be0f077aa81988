"""Rule scopes, expiry and versions (SPEC section 13): `remember` "session" | "always", `expiresAt`, editing a
rule into its next version, the receipts naming `rule:<id>@<version>`, and the rules page showing all of it."""

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.models import PendingRequest, Rule, RuleVersion
from approvals.receipts import Receipt
from tests.conftest import Persona
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
)

pytestmark = pytest.mark.django_db

BEYOND_STORABLE = "9999-12-31T23:59:59-12:00"


@pytest.fixture
def assistant(admin: Persona) -> Agent:
    return make_agent(admin)


def approve(persona: Persona, session: str = "s1", **answer: Any) -> dict[str, Any]:
    """Ask in `session`, then approve with `answer` (e.g. `remember`) as the session's next turn."""
    asked = ask_to_send(persona, session=session)
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True, **answer}
    return run_ok(persona, {"sessionId": session, "approvals": [approval]})


def respond(persona: Persona, session: str = "s1", **answer: Any) -> Any:
    """Ask in `session`, then answer through the respond API."""
    asked = ask_to_send(persona, session=session)
    body = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True, **answer}
    return persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)


def send(persona: Persona, session: str) -> dict[str, Any]:
    return run_ok(persona, {"message": call_line("send_email", EMAIL), "sessionId": session})


def in_an_hour() -> str:
    return (timezone.now() + timedelta(hours=1)).isoformat()


# --- scopes ---------------------------------------------------------------------------------------


def test_it_holds_a_session_rule_in_its_session_only(operator, assistant):
    result = approve(operator, "s1", remember="session")

    rule = Rule.objects.get()
    assert rule.session is not None and rule.session.key == "s1" and rule.scope == "session"
    [decision] = [e for e in stored_events(result["runId"]) if e.type == "permission.completed"]
    approval = {"kind": "custom-tool", "toolName": "send_email"}
    assert decision.data["result"] == {"kind": "approved-for-session", "approval": approval}
    assert PendingRequest.objects.get().answer["remember"] == "session"
    assert send(operator, "s1")["status"] == "completed"
    # A second session asks again.
    assert send(operator, "s2")["status"] == "awaiting_approval"


@pytest.mark.parametrize("remember", ["always", True])
def test_it_holds_an_always_rule_everywhere(operator, assistant, remember):
    result = approve(operator, "s1", remember=remember)

    rule = Rule.objects.get()
    assert rule.session is None and rule.scope == "always"
    [decision] = [e for e in stored_events(result["runId"]) if e.type == "permission.completed"]
    assert decision.data["result"] == {"kind": "approved"}
    assert PendingRequest.objects.get().answer["remember"] == "always"
    assert send(operator, "s2")["status"] == "completed"


def test_the_respond_api_remembers_for_the_session(operator, assistant):
    response = respond(operator, "s1", remember="session", expiresAt=in_an_hour())

    assert response.status_code == 200 and response.json()["status"] == "accepted", response.content
    stored = PendingRequest.objects.get().answer
    assert stored["remember"] == "session" and stored["expiresAt"]


def test_the_inbox_card_offers_this_session_or_always(operator, assistant):
    asked = ask_to_send(operator, session="s1")
    rid = asked["pendingRequests"][0]["requestId"]
    page = operator.client.get("/inbox/").content.decode()
    assert '<input type="radio" name="remember" value="session">' in page
    assert '<input type="radio" name="remember" value="always">' in page

    operator.client.post(f"/inbox/{rid}/answer/", {"decision": "approve", "remember": "session"})

    assert PendingRequest.objects.get().answer["remember"] == "session"


# --- expiry ---------------------------------------------------------------------------------------


def test_an_expired_rule_no_longer_decides_a_hosted_turn(operator, assistant):
    approve(operator, "s1", remember="always", expiresAt=in_an_hour())
    rule = Rule.objects.get()
    assert rule.expires_at is not None
    assert send(operator, "s2")["status"] == "completed"

    Rule.objects.filter(pk=rule.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    rule.refresh_from_db()

    assert send(operator, "s3")["status"] == "awaiting_approval"
    assert operator.api("GET", "/api/rules").json()["items"] == []
    [listed] = operator.api("GET", "/api/rules?includeRevoked=true").json()["items"]
    assert listed["ruleId"] == str(rule.id) and listed["expiresAt"] == rule.expires_at.isoformat()


EXTERNAL_TOOL = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}},
}


def open_deploy(persona: Persona, session: str = "x1") -> Any:
    body = {"kind": "approval", "toolName": "deploy", "arguments": {"service": "billing"}, "sessionId": session}
    return persona.api("post", "/api/agents/deployer/requests", body)


@pytest.fixture
def deployer(admin: Persona) -> Agent:
    content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": [EXTERNAL_TOOL]})
    return Agent.create(admin.tenant, content, admin.user)


def test_an_expired_rule_no_longer_decides_an_external_request(deployer, operator, admin):
    asked = open_deploy(operator).json()
    answer = {"approved": True, "remember": "always", "expiresAt": in_an_hour()}
    assert admin.api("post", f"/api/requests/{asked['requestId']}/responses", answer).json()["status"] == "accepted"
    assert open_deploy(operator, "x2").json()["status"] == "decided"

    Rule.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    assert open_deploy(operator, "x3").json()["status"] == "pending"


def test_a_session_rule_decides_an_external_request_in_its_session_only(deployer, operator, admin):
    asked = open_deploy(operator, "x1").json()
    answer = {"approved": True, "remember": "session"}
    assert admin.api("post", f"/api/requests/{asked['requestId']}/responses", answer).json()["status"] == "accepted"

    assert open_deploy(operator, "x1").json()["status"] == "decided"
    assert open_deploy(operator, "x2").json()["status"] == "pending"


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        ({"remember": "forever"}, "remember"),
        ({"remember": 1}, "remember"),
        ({"remember": "always", "expiresAt": "2020-01-01T00:00:00+00:00"}, "expiresAt"),
        ({"remember": "always", "expiresAt": "tomorrow"}, "expiresAt"),
        ({"remember": "always", "expiresAt": "2999-01-01T00:00:00"}, "expiresAt"),
        # Valid ISO, but the year 10000 in UTC: stored, it broke every later read of the rule (and of its agent's runs).
        ({"remember": "always", "expiresAt": BEYOND_STORABLE}, "expiresAt"),
    ],
)
def test_it_refuses_a_bad_remember_or_expiry_and_stores_nothing(operator, assistant, answer, field):
    asked = ask_to_send(operator, session="s1")
    rid = asked["pendingRequests"][0]["requestId"]
    before = snapshot()

    responded = operator.api(
        "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": rid, "approved": True, **answer}
    )
    in_a_run = run(operator, {"sessionId": "s1", "approvals": [{"requestId": rid, "approved": True, **answer}]})

    for response in (responded, in_a_run):
        problem = assert_problem(response, 400, "invalid_request")
        assert any(error["field"].endswith(field) for error in problem["errors"]), problem
    assert snapshot() == before


def test_it_refuses_an_expiry_without_remember(operator, assistant):
    asked = ask_to_send(operator, session="s1")
    rid = asked["pendingRequests"][0]["requestId"]
    before = snapshot()

    response = operator.api(
        "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": rid, "approved": True, "expiresAt": in_an_hour()}
    )

    assert_problem(response, 400, "remember_refused")
    assert snapshot() == before


def test_a_rule_made_by_hand_takes_an_expiry_in_the_future_only(admin, assistant):
    before = snapshot()
    past = {"agent": "assistant", "toolName": "send_email", "expiresAt": "2020-01-01T00:00:00Z"}
    for expiry in ("2020-01-01T00:00:00Z", BEYOND_STORABLE):
        problem = assert_problem(admin.api("POST", "/api/rules", {**past, "expiresAt": expiry}), 400, "invalid_request")
        assert [error["field"] for error in problem["errors"]] == ["expiresAt"]
    assert snapshot() == before

    made = admin.api("POST", "/api/rules", {**past, "expiresAt": in_an_hour()})

    assert made.status_code == 201
    wire = made.json()
    assert (wire["scope"], wire["sessionId"], wire["version"]) == ("always", None, 1)
    assert wire["expiresAt"] == Rule.objects.get().expires_at.isoformat()


# --- versions -------------------------------------------------------------------------------------


def test_editing_makes_version_2_and_keeps_version_1(admin, operator, assistant):
    approve(operator, "s1", remember="session")
    rule = Rule.objects.get()
    conditions = [{"argument": "to", "operator": "equals", "value": "ada@example.com"}]

    edited = admin.api(
        "PATCH", f"/api/rules/{rule.id}", {"conditions": conditions, "scope": "always", "expiresAt": in_an_hour()}
    )

    assert edited.status_code == 200, edited.content
    wire = edited.json()
    assert (wire["version"], wire["scope"], wire["sessionId"], wire["conditions"]) == (2, "always", None, conditions)
    assert wire["editedBy"] == "ada"
    [kept] = RuleVersion.objects.filter(rule=rule)
    assert (kept.version, kept.conditions, kept.session.key, kept.expires_at) == (1, [], "s1", None)
    assert (kept.edited_by, kept.edited_at) == (operator.user, rule.created_at)
    assert send(operator, "s2")["status"] == "completed"  # version 2 holds in every session


def test_editing_is_for_admins_of_the_tenant_and_refuses_bad_edits(admin, operator, outsider, assistant):
    approve(operator, "s1", remember="always")
    rule = Rule.objects.get()
    path = f"/api/rules/{rule.id}"
    before = snapshot()

    assert_problem(operator.api("PATCH", path, {"expiresAt": in_an_hour()}), 403, "forbidden")
    assert outsider.api("PATCH", path, {"expiresAt": in_an_hour()}).status_code == 404
    assert_problem(admin.api("PATCH", path, {"expiresAt": "2020-01-01T00:00:00Z"}), 400, "invalid_request")
    assert_problem(admin.api("PATCH", path, {"scope": "session"}), 400, "session_required")
    assert_problem(admin.api("PATCH", path, {}), 400, "nothing_to_edit")
    assert snapshot() == before and not RuleVersion.objects.exists()

    admin.api("DELETE", path)
    assert_problem(admin.api("PATCH", path, {"expiresAt": in_an_hour()}), 409, "rule_revoked")
    assert Rule.objects.get().version == 1


def test_a_receipt_names_the_rule_and_its_version(admin, operator, assistant, deployer):
    approve(operator, "s1", remember="always")
    rule = Rule.objects.get(agent=assistant)
    admin.api("PATCH", f"/api/rules/{rule.id}", {"expiresAt": in_an_hour()})

    send(operator, "s2")  # a hosted turn's call approved by version 2

    hosted = Receipt.objects.filter(body__decisionSource="rule").get()
    assert hosted.body["answeredBy"] == f"rule:{rule.id}@2"

    asked = open_deploy(operator).json()
    admin.api("post", f"/api/requests/{asked['requestId']}/responses", {"approved": True, "remember": "always"})
    external = Rule.objects.get(agent=deployer)
    admin.api("PATCH", f"/api/rules/{external.id}", {"expiresAt": in_an_hour()})
    decided = open_deploy(operator, "x2").json()

    answer = PendingRequest.objects.get(id=decided["requestId"]).answer
    assert (answer["ruleId"], answer["ruleVersion"]) == (str(external.id), 2)
    receipt = Receipt.objects.get(request_id=decided["requestId"])
    assert receipt.body["answeredBy"] == f"rule:{external.id}@2"


# --- the rules page -------------------------------------------------------------------------------


def row(html: str, rule: Rule) -> str:
    match = re.search(rf'<tr id="rule-{rule.id}".*?</tr>', html, re.DOTALL)
    assert match, html
    return match.group(0)


def test_the_rules_page_shows_scope_expiry_version_and_30_day_decisions(admin, operator, assistant):
    approve(operator, "s1", remember="session")
    session_rule = Rule.objects.get()
    send(operator, "s1")
    send(operator, "s1")
    old = Receipt.objects.filter(body__decisionSource="rule").first()
    assert old is not None
    Receipt.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=31))  # outside the window
    ended = Rule.objects.create(
        tenant=admin.tenant,
        agent=assistant,
        tool_name="send_email",
        expires_at=timezone.now() - timedelta(minutes=5),
        version=3,
    )

    html = admin.client.get("/rules/?revoked=on").content.decode()

    shown = row(html, session_rule)
    assert 'session <a href="/runs/?session=s1"' in shown
    assert '<td class="rule-version">v1' in shown
    assert '<td class="rule-decided">1</td>' in shown
    assert "never" in shown and "active" in shown
    assert f'action="/rules/{session_rule.id}/edit/"' in shown and "csrfmiddlewaretoken" in shown
    expired = row(html, ended)
    assert "expired" in expired and '<td class="rule-version">v3' in expired and "always" in expired
    assert str(ended.id) not in admin.client.get("/rules/").content.decode()


def test_the_edit_form_saves_the_next_version(admin, operator, assistant):
    approve(operator, "s1", remember="always")
    rule = Rule.objects.get()
    conditions = '[{"argument": "to", "operator": "equals", "value": "ada@example.com"}]'

    refused = admin.client.post(f"/rules/{rule.id}/edit/", {"narrowing": "conditions", "conditions": "[oops"})
    assert refused.status_code == 200 and "Not valid JSON" in refused.content.decode()
    beyond = admin.client.post(f"/rules/{rule.id}/edit/", {"narrowing": "any", "expires": BEYOND_STORABLE})
    assert beyond.status_code == 200 and "This moment is out of range" in beyond.content.decode()
    assert Rule.objects.get().version == 1
    saved = admin.client.post(f"/rules/{rule.id}/edit/", {"narrowing": "conditions", "conditions": conditions})

    assert saved.status_code == 302
    edited = Rule.objects.get()
    assert edited.version == 2 and edited.conditions[0]["value"] == "ada@example.com"
    assert RuleVersion.objects.get().version == 1
    assert operator.client.post(f"/rules/{rule.id}/edit/", {"narrowing": "any"}).status_code == 403
