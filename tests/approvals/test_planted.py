"""Checks the suite lacked (issue 48 item 9: bugs planted in the newest code that no test caught), each where
the rule it holds is written: SPEC section 12 (who speaks for an external request), section 13 (a rule never lifts
a policy's escalation), sections 2 and 8 (a manifest's tools name nothing on the host) and section 11 (only the
group answers its requests, in the inbox too, with the production undo window)."""

import json
import re
from typing import Any

import pytest

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.models import ApproverGroup, HeldAnswer, PendingRequest
from tests.approvals.test_inbox_pages import HTMX, answer, card_ids
from tests.approvals.test_previews import DEPLOY, STATUS, guard
from tests.conftest import PRODUCTION_WINDOW, Persona, make_persona
from tests.helpers import ASSISTANT, EMAIL, assert_problem, make_agent, run_ok, snapshot
from tests.policies.test_policy_sandbox import INPUT_ONLY

pytestmark = pytest.mark.django_db


@pytest.fixture
def stranger(acme) -> Persona:
    """Another operator of acme: not the one who opened the request, and outside the finance group."""
    return make_persona("sam", acme, "operator")


def held_answers() -> list[Any]:
    return list(HeldAnswer.objects.order_by("pk").values())


# --- SPEC section 12: only the agent's side speaks for its request -------------------------------------------


@pytest.fixture
def deployer(admin: Persona) -> Agent:
    content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": [DEPLOY, STATUS]})
    return Agent.create(admin.tenant, content, admin.user)


def open_deploy(persona: Persona) -> str:
    body = {"toolName": "deploy", "arguments": {"service": "billing", "environment": "staging"}}
    opened = persona.api("post", "/api/agents/deployer/requests", body)
    assert opened.status_code == 201, opened.content
    return str(opened.json()["requestId"])


def test_another_operator_of_the_tenant_cannot_cancel_or_report_for_an_agents_request(
    deployer, operator, stranger, admin
):
    rid = open_deploy(operator)
    before = snapshot()

    cancelled = stranger.api("delete", f"/api/requests/{rid}")

    problem = assert_problem(cancelled, 403, "forbidden")
    assert problem["detail"] == "Only the member who opened the request, or an admin, speaks for it."
    assert snapshot() == before
    assert admin.api("post", f"/api/requests/{rid}/responses", {"approved": True}).json()["status"] == "accepted"
    decided = snapshot()
    assert_problem(stranger.api("post", f"/api/requests/{rid}/outcome", {"success": False}), 403, "forbidden")
    assert snapshot() == decided
    # The one who opened it, and an admin, may.
    assert operator.api("post", f"/api/requests/{rid}/outcome", {"success": True}).status_code == 200
    other = open_deploy(operator)
    assert admin.api("delete", f"/api/requests/{other}").json()["status"] == "cancelled"


# --- SPEC section 13: a rule never lifts a policy's escalation ------------------------------------------------


def test_a_rule_preview_asks_for_a_call_that_stood_for_a_policy_escalation(admin, operator):
    content = {"name": "deployer", "runtime": "external", "tools": [DEPLOY, STATUS], "hooks": guard()}
    Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)
    for service in ("api", "billing"):  # the guard escalates a call for the api service to a person
        rid = open_deploy_of(operator, service)
        answered = admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
        assert answered.json()["status"] == "accepted", answered.content
    escalated = PendingRequest.objects.get(arguments__service="api")
    assert escalated.policy is not None and escalated.policy["reason"] == "api_needs_a_human"

    previewed = admin.api("post", "/api/rules/preview", {"agent": "deployer", "toolName": "deploy"})

    assert previewed.status_code == 200, previewed.content
    body = previewed.json()
    assert (body["evaluated"], body["wouldApprove"], body["wouldAsk"]) == (2, 1, 1), body


def open_deploy_of(persona: Persona, service: str) -> str:
    body = {"toolName": "deploy", "arguments": {"service": service, "environment": "staging"}}
    opened = persona.api("post", "/api/agents/deployer/requests", body)
    assert opened.status_code == 201 and opened.json()["status"] == "pending", opened.content
    return str(opened.json()["requestId"])


# --- SPECs 2 and 8: every key of a manifest's tools is checked ------------------------------------------------

# The sandbox tests' manifest with a tool declared as the standard allows it.
PROBE = INPUT_ONLY + "tools:\n  send_email:\n    type: Tool\n    id: send_email\n"
REGO = 'package airlock.probe\n\nimport rego.v1\n\ndefault verdict := {"decision": "allow"}\n'


def hooks_with(manifest: str) -> dict[str, Any]:
    binding = {
        "id": "probe",
        "kind": "airlock.acs",
        "config": {"manifest": manifest, "modules": {"probe": {"p.rego": REGO}}},
    }
    return {"declaration": "agent-hooks-declaration/1.0", "bindings": [binding]}


@pytest.mark.parametrize(
    ("line", "key", "why"),
    [
        ("    bundle: /etc\n", "tools.send_email.bundle", "names a file or URL"),
        ("    path: /etc/passwd\n", "tools.send_email.path", "names a file or URL"),
        ("    schema_url: http://127.0.0.1:9/\n", "tools.send_email.schema_url", "unknown key"),
    ],
)
def test_a_manifest_tool_with_a_key_it_may_not_have_is_refused(admin, line, key, why):
    assert admin.api("POST", "/api/agents", {**ASSISTANT, "hooks": hooks_with(PROBE)}).status_code == 201
    before = snapshot()

    response = admin.api("PUT", "/api/agents/assistant", {**ASSISTANT, "hooks": hooks_with(PROBE + line)})

    message = assert_problem(response, 400, "invalid_hooks")["errors"][0]["message"]
    assert f"manifest key {key} is not allowed" in message and why in message, message
    assert snapshot() == before


@pytest.mark.parametrize("section", ["policies", "intervention_points", "tools"])
def test_a_manifest_section_that_is_not_a_mapping_is_refused_by_its_name(admin, section):
    manifest = re.sub(rf"^{section}:\n(?:  .*\n)+", f"{section}: [probe]\n", PROBE, flags=re.MULTILINE)
    assert f"{section}: [probe]" in manifest

    response = admin.api("POST", "/api/agents", {**ASSISTANT, "hooks": hooks_with(manifest)})

    message = assert_problem(response, 400, "invalid_hooks")["errors"][0]["message"]
    assert f"manifest key {section} is not allowed: must be a mapping" in message, message


# --- SPEC section 11: only the group answers its requests, in the inbox too -----------------------------------


@pytest.fixture
def routed(admin, operator) -> Agent:
    finance = ApproverGroup.objects.create(tenant=admin.tenant, name="finance")
    finance.members.add(operator.user)
    return make_agent(admin, tools=[{"name": "send_email", "approval": "always", "approvers": "finance"}])


@pytest.mark.parametrize("htmx", [True, False], ids=["htmx", "no-js"])
def test_an_operator_outside_the_group_answering_in_the_inbox_is_refused_and_nothing_is_held(
    routed, operator, stranger, settings, htmx
):
    settings.ANSWER_UNDO_SECONDS = PRODUCTION_WINDOW
    asked = run_ok(operator, {"message": f"call send_email {json.dumps(EMAIL)}", "sessionId": "s1"})
    rid = asked["pendingRequests"][0]["requestId"]
    before = snapshot(), held_answers()

    posted = answer(stranger, rid, {"decision": "approve"}, htmx=htmx)
    selected = stranger.client.post(
        "/inbox/selection/", {"selected": [rid], "decision": "approve"}, **(HTMX if htmx else {})
    )
    page = stranger.client.get("/inbox/").content.decode()

    refused = "only members of that group and admins answer it"
    if htmx:
        assert refused in posted.content.decode() and refused in selected.content.decode()
    else:
        assert refused in page
    assert (snapshot(), held_answers()) == before
    assert rid in card_ids(page) and "Undo" not in page
    assert rid in card_ids(operator.client.get("/inbox/").content.decode())
