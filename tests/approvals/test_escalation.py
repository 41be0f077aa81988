"""Escalation (SPEC section 14): steps after the opening add approver groups, then end the request."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent, Run
from approvals.actions import escalate_due
from approvals.models import ApproverGroup, PendingRequest, Receipt, RequestStatus
from tests.conftest import Persona, make_persona
from tests.helpers import ASSISTANT, EMAIL, ask_to_send, assert_problem, drain_queued, make_agent

pytestmark = pytest.mark.django_db

STEPS = [{"after": "15m", "to": ["sre-leads"]}, {"after": "1h", "then": "deny"}]
DEPLOY = {"name": "deploy", "approval": "always", "approvers": "sre", "escalation": STEPS}


@pytest.fixture
def groups(admin: Persona) -> dict[str, Persona]:
    lead = make_persona("lena", admin.tenant, "operator")
    ApproverGroup.objects.create(tenant=admin.tenant, name="sre")
    ApproverGroup.objects.create(tenant=admin.tenant, name="sre-leads").members.add(lead.user)
    return {"lena": lead}


def open_deploy(persona: Persona) -> PendingRequest:
    content = DefinitionContent.model_validate({"name": "releaser", "runtime": "external", "tools": [DEPLOY]})
    Agent.create(persona.tenant, content, persona.user)
    opened = persona.api("post", "/api/agents/releaser/requests", {"toolName": "deploy", "arguments": {}})
    assert opened.status_code == 201, opened.content
    return PendingRequest.objects.get(id=opened.json()["requestId"])


def test_a_step_adds_groups_then_the_last_denies(admin, groups):
    pending = open_deploy(admin)
    assert pending.escalation == STEPS and pending.escalation_at == pending.opened_at + timedelta(minutes=15)
    lena = groups["lena"]
    refused = lena.api("post", f"/api/requests/{pending.id}/responses", {"approved": True})
    assert_problem(refused, 403, "not_an_approver")
    page = admin.client.get("/inbox/")
    assert "escalates to sre-leads" in page.content.decode()

    assert escalate_due(pending.opened_at + timedelta(minutes=14)) == []  # not due yet
    assert [p.id for p in escalate_due(pending.opened_at + timedelta(minutes=15))] == [pending.id]
    pending.refresh_from_db()
    assert pending.groups == ["sre", "sre-leads"] and pending.escalation_step == 1
    assert pending.escalation_at == pending.opened_at + timedelta(hours=1)
    assert pending.status == RequestStatus.PENDING
    # The inbox read again in the same minute shows the card as it is now (approvals/cards.py keeps cards a minute).
    page = " ".join(admin.client.get("/inbox/").content.decode().split())
    assert '<span class="row-group">for sre or sre-leads</span>' in page
    assert "Nobody decided yet: denied unless decided before" in page and "escalates to sre-leads" not in page
    listed = lena.api("get", "/api/requests?for=me").json()["items"]
    assert [r["requestId"] for r in listed] == [str(pending.id)]
    # The same step is not taken twice.
    assert escalate_due(pending.opened_at + timedelta(minutes=16)) == []

    assert [p.id for p in escalate_due(pending.opened_at + timedelta(hours=1))] == [pending.id]
    got = admin.api("get", f"/api/requests/{pending.id}").json()
    assert got["status"] == "answered" and got["decision"]["approved"] is False
    assert got["decision"]["via"] == "escalation"
    assert got["decision"]["text"] == "Nobody decided it within 1h: its escalation denied it."
    receipt = Receipt.objects.get(request_id=pending.id)
    assert (receipt.body["decisionSource"], receipt.body["answeredBy"]) == ("escalation", "escalation:2")
    assert Run.objects.get(id=pending.run_id).status == "completed"


def test_a_hosted_request_expired_by_its_escalation_lets_the_run_go_on(admin):
    tools = [{"name": "send_email", "approval": "always", "escalation": [{"after": "10s", "then": "expire"}]}]
    make_agent(admin, tools=[*tools, ASSISTANT["tools"][1]])
    asked = ask_to_send(admin, **EMAIL)
    pending = PendingRequest.objects.get(id=asked["pendingRequests"][0]["requestId"])
    assert escalate_due(timezone.now() + timedelta(seconds=11)) == [pending]
    pending.refresh_from_db()
    assert pending.status == RequestStatus.EXPIRED
    assert Receipt.objects.get(request_id=pending.id).body["decisionSource"] == "escalation"
    drain_queued()  # the continuation tells the model the call did not run


@pytest.mark.parametrize(
    ("steps", "said"),
    [
        ([{"after": "10m"}], "either adds groups"),
        ([{"after": "2s", "then": "deny"}], "at least 5s"),
        ([{"after": "1h", "to": ["sre"]}, {"after": "10m", "then": "deny"}], "in order"),
        ([{"after": "1m", "then": "deny"}, {"after": "10m", "to": ["sre"]}], "is the last"),
        ([{"after": "10 minutes", "then": "deny"}], "after"),
        ([{"after": "1m", "then": "shrug"}], "then"),
    ],
)
def test_a_bad_escalation_is_refused(admin, groups, steps, said):
    made = admin.api(
        "post", "/api/agents", {"name": "r", "runtime": "external", "tools": [{**DEPLOY, "escalation": steps}]}
    )
    assert made.status_code == 400 and said in made.content.decode(), made.content


def test_a_step_naming_an_unknown_group_is_refused(admin, groups):
    steps = [{"after": "10m", "to": ["nobody"]}]
    made = admin.api(
        "post", "/api/agents", {"name": "r", "runtime": "external", "tools": [{**DEPLOY, "escalation": steps}]}
    )
    problem = assert_problem(made, 400, "unknown_group")
    assert "tools.0.escalation.0.to.0" in str(problem)
