"""What a rule or policy would have done (SPEC section 13): `POST /api/rules/preview`, `POST
/api/agents/{name}/policy-preview`, the suggested rules of the rules page, and the console's Preview buttons,
over a history of an external agent's requests answered through the API. No preview writes anything."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.forms.hooks import PolicyEditor
from agents.models import Agent
from agents.starter_policy import SURFACE
from approvals.models import PendingRequest, Rule
from approvals.previews import preview_policies, suggestions
from tests.agents.test_policy_editor import posted
from tests.conftest import Persona
from tests.helpers import assert_problem

pytestmark = pytest.mark.django_db

DEPLOY = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {
        "type": "object",
        "properties": {"service": {"type": "string"}, "environment": {"enum": ["staging", "production"]}},
        "required": ["service", "environment"],
        "additionalProperties": False,
    },
}
STATUS = {"name": "status", "description": "Read a service's status", "approval": "never"}

MANIFEST = """\
agent_control_specification_version: "0.4.0-alpha.1"
metadata:
  name: "deploy-guard"
extends: []
policies:
  deploy:
    type: rego
    query: data.airlock.deploy.verdict
tools:
  deploy:
    type: Tool
    id: deploy
  status:
    type: Tool
    id: status
intervention_points:
  pre_tool_call:
    policy_target: "$.tool_call.args"
    policy_target_kind: tool_args
    tool_name_from: "$.tool_call.name"
    policy:
      id: deploy
      query: data.airlock.deploy.pre_tool_call_verdict
"""
# Production is never deployed; the api service needs a human; the rest has no objection.
REGO = r"""package airlock.deploy

import rego.v1

default verdict := {"decision": "allow"}

args := input.policy_target.value

default pre_tool_call_verdict := {"decision": "allow"}

pre_tool_call_verdict := {
	"decision": "deny",
	"reason": "no_production",
	"message": "Nothing deploys to production from here.",
} if {
	args.environment == "production"
} else := {
	"decision": "escalate",
	"reason": "api_needs_a_human",
	"message": "The api service needs a human.",
} if {
	args.service == "api"
}
"""


def guard(rego: str = REGO, mode: str = "enforce") -> dict[str, Any]:
    return {
        "declaration": "agent-hooks-declaration/1.0",
        "configuration": {"mode": mode, "approval": {"resolver": "airlock-inbox"}},
        "surface": {"interception_points": SURFACE, "capabilities": ["host_declaration", "tool_calls"]},
        "bindings": [
            {
                "id": "deploy-guard",
                "kind": "airlock.acs",
                "config": {"manifest": MANIFEST, "modules": {"deploy": {"deploy.rego": rego}}},
            }
        ],
    }


@pytest.fixture
def deployer(admin: Persona) -> Agent:
    content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": [DEPLOY, STATUS]})
    return Agent.create(admin.tenant, content, admin.user)


def ask(operator: Persona, service: str = "billing", environment: str = "staging", tool: str = "deploy") -> str:
    arguments = {"service": service, "environment": environment} if tool == "deploy" else {}
    body = {"kind": "approval", "toolName": tool, "arguments": arguments}
    opened = operator.api("post", "/api/agents/deployer/requests", body)
    assert opened.status_code == 201, opened.content
    return str(opened.json()["requestId"])


def answer(admin: Persona, request_id: str, approved: bool, **fields: Any) -> None:
    answered = admin.api("post", f"/api/requests/{request_id}/responses", {"approved": approved, **fields})
    assert answered.json()["status"] == "accepted", answered.content


def decided(operator: Persona, admin: Persona, service: str, environment: str, approved: bool | None) -> str:
    """One closed request: approved or denied by `admin`, or cancelled by the agent (None)."""
    request_id = ask(operator, service, environment)
    if approved is None:
        assert operator.api("delete", f"/api/requests/{request_id}").status_code == 200
    else:
        answer(admin, request_id, approved)
    return request_id


@pytest.fixture
def history(deployer, operator, admin) -> dict[str, str]:
    """Six closed requests of `deploy` (oldest first) and one still pending, which no preview reads."""
    made = {
        "billing-staging-1": decided(operator, admin, "billing", "staging", True),
        "billing-production-denied": decided(operator, admin, "billing", "production", False),
        "api-staging-denied": decided(operator, admin, "api", "staging", False),
        "billing-staging-cancelled": decided(operator, admin, "billing", "staging", None),
        "billing-production-approved": decided(operator, admin, "billing", "production", True),
        "billing-staging-2": decided(operator, admin, "billing", "staging", True),
    }
    ask(operator, "billing", "staging")  # pending
    return made


def whole_database() -> dict[str, list[dict[str, Any]]]:
    """Every row of every table, every field of it."""
    return {
        model._meta.label: [repr(row) for row in model._default_manager.order_by("pk").values()]
        for model in apps.get_models()
        if model._meta.managed and not model._meta.proxy
    }


def rule_preview(persona: Persona, **fields: Any) -> Any:
    body = {"agent": "deployer", "toolName": "deploy", **fields}
    return persona.api("post", "/api/rules/preview", body)


def policy_preview(persona: Persona, hooks: Any, **fields: Any) -> Any:
    return persona.api("post", "/api/agents/deployer/policy-preview", {"hooks": hooks, **fields})


def test_it_counts_what_a_rule_with_conditions_would_have_done(history, admin):
    staging = [{"argument": "environment", "operator": "equals", "value": "staging"}]
    before = whole_database()

    previewed = rule_preview(admin, conditions=staging)

    assert previewed.status_code == 200, previewed.content
    body = previewed.json()
    assert whole_database() == before
    assert (body["evaluated"], body["wouldApprove"], body["wouldDeny"], body["wouldAsk"]) == (6, 4, 0, 2)
    assert body["truncated"] is False
    # Newest first: the cancelled request was closed after the api denial.
    assert body["disagreements"] == [
        {"requestId": history["billing-staging-cancelled"], "decided": "cancelled", "candidate": "approved"},
        {
            "requestId": history["api-staging-denied"],
            "decided": "denied-interactively-by-user",
            "candidate": "approved",
        },
    ]


def test_it_previews_exact_arguments_and_the_last_n_only(history, admin):
    exact = rule_preview(admin, arguments={"environment": "production", "service": "billing"}).json()
    assert (exact["evaluated"], exact["wouldApprove"], exact["wouldAsk"]) == (6, 2, 4)
    assert exact["disagreements"] == [
        {
            "requestId": history["billing-production-denied"],
            "decided": "denied-interactively-by-user",
            "candidate": "approved",
        }
    ]

    last_two = rule_preview(admin, limit=2).json()  # any arguments: approves both
    assert (last_two["evaluated"], last_two["wouldApprove"], last_two["disagreements"]) == (2, 2, [])


def test_a_rule_matches_the_arguments_the_tool_ran_with(deployer, operator, admin):
    request_id = ask(operator, "billing", "production")
    answer(admin, request_id, True, overrideArguments={"service": "billing", "environment": "staging"})

    staging = rule_preview(admin, arguments={"service": "billing", "environment": "staging"}).json()
    production = rule_preview(admin, arguments={"service": "billing", "environment": "production"}).json()

    assert (staging["wouldApprove"], production["wouldApprove"]) == (1, 0)


def test_it_refuses_a_bad_candidate_rule_as_saving_would(history, admin):
    before = whole_database()
    assert_problem(rule_preview(admin, toolName="launch"), 400, "unknown_tool")
    assert_problem(rule_preview(admin, toolName="status"), 400, "tool_never_asks")
    both = {"arguments": {}, "conditions": [{"argument": "service", "operator": "equals", "value": "x"}]}
    assert_problem(rule_preview(admin, **both), 400, "arguments_and_conditions")
    bad = [{"argument": "service", "operator": "lt", "value": [1]}]
    assert_problem(rule_preview(admin, conditions=bad), 400, "invalid_request")
    assert_problem(rule_preview(admin, limit=0), 400, "invalid_request")
    assert_problem(rule_preview(admin, limit=10_001), 400, "invalid_request")
    assert_problem(rule_preview(admin, surprise=True), 400, "invalid_request")
    assert_problem(rule_preview(admin, agent="nobody"), 404, "agent_not_found")
    assert rule_preview(admin, limit=10_000).json()["evaluated"] == 6
    assert whole_database() == before


def test_only_admins_preview_and_only_their_tenants_agents(history, operator, reader, outsider):
    assert_problem(rule_preview(operator), 403, "forbidden")
    assert_problem(rule_preview(reader), 403, "forbidden")
    assert_problem(policy_preview(operator, guard()), 403, "forbidden")
    assert_problem(policy_preview(reader, None), 403, "forbidden")
    assert_problem(rule_preview(outsider), 404, "agent_not_found")
    assert_problem(policy_preview(outsider, guard()), 404, "agent_not_found")


def test_a_policy_preview_denies_escalates_and_leaves_the_rest_to_the_approval_mode(history, admin, operator):
    ask_status = ask(operator, tool="status")  # approval "never": decided approved at once
    before = whole_database()

    previewed = policy_preview(admin, guard())

    assert previewed.status_code == 200, previewed.content
    body = previewed.json()
    assert whole_database() == before
    # Denied: the two production calls; asks: the api call (escalation) and the three billing-staging calls
    # (no objection, and `deploy` asks a person); approved: `status`, which never asks.
    assert (body["evaluated"], body["wouldApprove"], body["wouldDeny"], body["wouldAsk"]) == (7, 1, 2, 4)
    assert body["disagreements"] == [
        {"requestId": history["billing-production-approved"], "decided": "approved", "candidate": "denied"}
    ]
    assert ask_status not in json.dumps(body["disagreements"])


def test_a_shadow_mode_policy_is_previewed_as_if_enforced(history, admin):
    body = policy_preview(admin, guard(mode="evaluate_only")).json()
    assert (body["wouldDeny"], body["wouldAsk"]) == (2, 4)


def test_no_policies_object_to_nothing(history, admin):
    body = policy_preview(admin, None, limit=3).json()
    assert (body["evaluated"], body["wouldApprove"], body["wouldDeny"], body["wouldAsk"]) == (3, 0, 0, 3)


def test_it_refuses_a_bad_declaration_as_saving_would(history, admin):
    before = whole_database()
    assert_problem(policy_preview(admin, {"declaration": "nope"}), 400, "invalid_hooks")
    broken = guard(rego="package airlock.deploy\n\nthis is not rego")
    assert_problem(policy_preview(admin, broken), 400, "invalid_hooks")
    unlisted = guard()
    config = unlisted["bindings"][0]["config"]
    config["manifest"] = config["manifest"].replace("  status:\n    type: Tool\n    id: status\n", "")
    assert_problem(policy_preview(admin, unlisted), 400, "invalid_hooks")
    assert_problem(policy_preview(admin, guard(), limit=10_001), 400, "invalid_request")
    assert_problem(admin.api("post", "/api/agents/nobody/policy-preview", {"hooks": None}), 404, "agent_not_found")
    assert whole_database() == before


def test_it_sends_no_past_call_to_a_policy_webhook(history, admin):
    hooks = {
        "declaration": "agent-hooks-declaration/1.0",
        "bindings": [{"id": "remote", "kind": "airlock.webhook", "config": {"connection": "policy-hook"}}],
    }
    body = assert_problem(policy_preview(admin, hooks), 400, "webhook_not_previewed")
    assert body["errors"][0]["field"] == "hooks.bindings.0"


def test_a_policy_preview_stops_at_its_time_budget_and_says_so(history, deployer):
    stopped = preview_policies(deployer, guard(), seconds=0)
    assert (stopped.evaluated, stopped.truncated) == (0, True)
    assert stopped.wire()["truncated"] is True
    assert preview_policies(deployer, guard()).truncated is False


# --- suggestions ---------------------------------------------------------------------------------------------


def approve_times(operator: Persona, admin: Persona, n: int, service: str = "billing") -> None:
    for _ in range(n):
        decided(operator, admin, service, "staging", True)


def test_it_suggests_a_rule_after_five_identical_approvals(deployer, operator, admin):
    approve_times(operator, admin, 4)
    decided(operator, admin, "api", "staging", True)
    assert suggestions(admin.tenant) == []

    approve_times(operator, admin, 1)
    before = whole_database()
    found = suggestions(admin.tenant)

    assert whole_database() == before
    assert [(s.agent, s.tool_name, s.arguments, s.approvals) for s in found] == [
        ("deployer", "deploy", {"service": "billing", "environment": "staging"}, 5)
    ]
    preview = found[0].preview
    assert (preview.evaluated, preview.would["approved"], preview.would["ask"], preview.disagreements) == (6, 5, 1, [])


def test_one_denial_takes_the_suggestion_away(deployer, operator, admin):
    approve_times(operator, admin, 6)
    decided(operator, admin, "billing", "staging", False)
    assert suggestions(admin.tenant) == []


def test_an_active_rule_takes_the_suggestion_away(deployer, operator, admin):
    approve_times(operator, admin, 5)
    made = admin.api("post", "/api/rules", {"agent": "deployer", "toolName": "deploy"})
    assert made.status_code == 201
    assert suggestions(admin.tenant) == []
    assert admin.api("delete", f"/api/rules/{made.json()['ruleId']}").status_code == 204
    assert len(suggestions(admin.tenant)) == 1


def test_a_session_rule_or_an_expired_one_leaves_the_suggestion(deployer, operator, admin):
    approve_times(operator, admin, 5)
    soon = (timezone.now() + timedelta(seconds=60)).isoformat()
    made = admin.api("post", "/api/rules", {"agent": "deployer", "toolName": "deploy", "expiresAt": soon})
    assert made.status_code == 201, made.content
    assert suggestions(admin.tenant) == []
    Rule.objects.filter(id=made.json()["ruleId"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert len(suggestions(admin.tenant)) == 1
    asked = ask(operator)
    answer(admin, asked, True, remember="session")
    assert Rule.objects.filter(session__isnull=False).count() == 1
    assert len(suggestions(admin.tenant)) == 1


def test_the_rules_page_shows_suggestions_and_adopts_one(deployer, operator, admin):
    approve_times(operator, admin, 5)

    page = admin.client.get("/rules/")
    assert 'hx-get="/rules/suggestions/"' in page.content.decode()
    shown = admin.client.get("/rules/suggestions/", HTTP_HX_REQUEST="true")
    assert shown.status_code == 200
    text = shown.content.decode()
    assert "Suggested rules" in text and "approved 5 times" in text
    assert "Would have approved 5 of the last 5." in text

    arguments = json.dumps({"service": "billing", "environment": "staging"})
    adopted = admin.client.post(
        "/rules/suggestions/adopt/", {"agent": "deployer", "tool_name": "deploy", "arguments": arguments}
    )
    assert adopted.status_code == 302
    rule = Rule.objects.get()
    assert (rule.tool_name, rule.arguments) == ("deploy", {"service": "billing", "environment": "staging"})
    assert suggestions(admin.tenant) == []
    assert "Suggested rules" not in admin.client.get("/rules/suggestions/").content.decode()


def test_only_admins_see_and_adopt_suggestions(deployer, operator, admin, reader, outsider):
    approve_times(operator, admin, 5)
    arguments = json.dumps({"service": "billing", "environment": "staging"})
    form = {"agent": "deployer", "tool_name": "deploy", "arguments": arguments}
    assert operator.client.get("/rules/suggestions/").status_code == 403
    assert reader.client.post("/rules/suggestions/adopt/", form).status_code == 403
    assert 'hx-get="/rules/suggestions/"' not in reader.client.get("/rules/").content.decode()
    assert outsider.client.post("/rules/suggestions/adopt/", form).status_code == 404
    assert not Rule.objects.exists()


# --- the console's Preview buttons -----------------------------------------------------------------------------


def test_the_rule_form_previews_before_saving(history, admin):
    form = {"agent": "deployer", "tool_name": "deploy", "scope": "conditions"}
    form |= {
        "condition-0000000a-argument": "environment",
        "condition-0000000a-operator": "equals",
        "condition-0000000a-value": '"staging"',
    }
    before = whole_database()

    shown = admin.client.post("/rules/preview/", form, HTTP_HX_REQUEST="true")

    assert shown.status_code == 200
    text = shown.content.decode()
    assert "Would have approved 4 of the last 6" in text
    assert "a person denied 1 of those" in text and "1 closed unanswered" in text
    assert history["api-staging-denied"] in text
    assert whole_database() == before
    refused = admin.client.post("/rules/preview/", {**form, "tool_name": "status"}, HTTP_HX_REQUEST="true")
    assert "runs without asking" in refused.content.decode()
    assert admin.client.post("/rules/preview/", form).status_code == 200


def test_the_policy_editor_previews_before_saving(history, admin, reader):
    before = whole_database()

    hooks = {"hooks": json.dumps(guard())}
    shown = admin.client.post("/agents/deployer/policy-preview/", hooks, HTTP_HX_REQUEST="true")

    assert shown.status_code == 200
    text = shown.content.decode()
    assert "Would have denied 2 of the last 6; 1 of those was approved." in text
    assert history["billing-production-approved"] in text
    assert whole_database() == before
    bad = admin.client.post("/agents/deployer/policy-preview/", {"hooks": "{not json"}, HTTP_HX_REQUEST="true")
    assert bad.status_code == 200 and "Nothing to preview" in bad.content.decode()
    assert reader.client.post("/agents/deployer/policy-preview/", {"hooks": "null"}).status_code == 403
    assert PendingRequest.objects.filter(answer__isnull=True, status="pending").count() == 1


def test_the_policy_editor_previews_the_declaration_its_fields_hold(history, admin):
    fields = posted(PolicyEditor.of(guard()))

    shown = admin.client.post("/agents/deployer/policy-preview/", dict(fields.lists()), HTTP_HX_REQUEST="true")

    assert "Would have denied 2 of the last 6; 1 of those was approved." in shown.content.decode()
