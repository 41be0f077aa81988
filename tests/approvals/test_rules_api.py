"""The remembered-rule routes: GET/POST /api/rules, DELETE /api/rules/{ruleId}, and a hand-made rule at work."""

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from agents.rule_matching import arguments_hash
from approvals.models import PendingRequest, Rule
from tests.conftest import Persona, grant
from tests.helpers import assert_problem, snapshot

MAILER: dict[str, Any] = {
    "name": "mailer",
    "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time", "approval": "never"}],
    "clientTools": [{"name": "get_user_location"}],
}
# Never started here: a rule is checked against the definition, not against the servers' tool lists.
MCP_SERVERS = [
    {"connection": "meetings", "approval": "always", "toolPrefix": "meet"},
    {"connection": "files", "approval": "every_time", "toolPrefix": "files"},
]


@pytest.fixture(autouse=True)
def files(db):
    """An MCP connection of the installation besides the built-in `meetings`, granted to every tenant."""
    return grant("files", "mcp", command="python")


EMAIL = {"to": "ops@example.com", "subject": "Report", "body": "All green."}


def make_agent(persona: Persona, **changes: Any) -> Agent:
    return Agent.create(persona.tenant, DefinitionContent.model_validate({**MAILER, **changes}), persona.user)


@pytest.fixture
def mailer(admin) -> Agent:
    return make_agent(admin)


def create(persona: Persona, **body: Any) -> Any:
    return persona.api("POST", "/api/rules", {"agent": "mailer", "toolName": "send_email", **body})


def created(persona: Persona, **body: Any) -> dict[str, Any]:
    response = create(persona, **body)
    assert response.status_code == 201, response.content
    return response.json()


def listed(persona: Persona, query: str = "") -> dict[str, Any]:
    response = persona.api("GET", f"/api/rules{query}")
    assert response.status_code == 200, response.content
    return response.json()


def refused(persona: Persona, status: int, code: str, **body: Any) -> dict[str, Any]:
    """Create a rule that must be refused; nothing may change."""
    before = snapshot()
    problem = assert_problem(create(persona, **body), status, code)
    assert snapshot() == before
    return problem


def fields(problem: dict[str, Any]) -> dict[str, str]:
    return {error["field"]: error["message"] for error in problem["errors"]}


# --- creating by hand ---------------------------------------------------------------------------


def test_it_creates_a_rule_for_any_arguments(admin, mailer):
    rule = created(admin)

    stored = Rule.objects.get()
    assert (stored.tenant, stored.agent, stored.tool_name) == (admin.tenant, mailer, "send_email")
    assert (stored.arguments_hash, stored.conditions, stored.created_by) == ("", [], admin.user)
    assert stored.created_from is None
    assert rule == {
        "ruleId": str(stored.id),
        "agent": "mailer",
        "toolName": "send_email",
        "argumentsHash": None,
        "arguments": None,
        "conditions": [],
        "createdBy": "ada",
        "createdFromRequestId": None,
        "createdFromRunId": None,
        "createdAt": stored.created_at.isoformat(),
        "revokedAt": None,
        "scope": "always",
        "sessionId": None,
        "expiresAt": None,
        "version": 1,
        "editedBy": None,
        "editedAt": None,
    }


def test_it_creates_a_rule_for_exact_arguments_as_their_hash(admin, mailer):
    rule = created(admin, arguments=EMAIL)

    assert rule["argumentsHash"] == arguments_hash(EMAIL) == Rule.objects.get().arguments_hash
    assert rule["arguments"] == EMAIL
    assert rule["conditions"] == []


def test_it_takes_empty_arguments_as_exact_arguments(admin, mailer):
    assert created(admin, arguments={})["argumentsHash"] == arguments_hash({})


def test_it_creates_a_rule_with_conditions(admin, mailer):
    conditions = [
        {"argument": "to", "operator": "in", "value": ["ops@example.com", "cto@example.com"]},
        {"argument": "subject", "operator": "not_equals", "value": "Invoice"},
        {"argument": "priority", "operator": "lt", "value": 3},
    ]

    rule = created(admin, conditions=conditions)

    assert rule["conditions"] == conditions == Rule.objects.get().conditions
    assert rule["argumentsHash"] is None


def test_it_creates_a_rule_for_a_tool_of_an_mcp_server_that_asks_always(admin):
    make_agent(admin, mcpServers=MCP_SERVERS)
    assert created(admin, toolName="meet_book_meeting")["toolName"] == "meet_book_meeting"


def test_it_accepts_any_tool_name_of_an_mcp_server_without_prefix(admin):
    make_agent(admin, mcpServers=[{"connection": "meetings", "approval": "always"}])

    assert created(admin, toolName="book_meeting")["toolName"] == "book_meeting"


# --- refusing -----------------------------------------------------------------------------------


def test_it_refuses_an_unknown_agent(admin, mailer):
    problem = refused(admin, 404, "agent_not_found", agent="nobody")
    assert "nobody" in problem["detail"]


def test_it_refuses_a_deleted_agent(admin, mailer):
    mailer.soft_delete()
    refused(admin, 404, "agent_not_found")


def test_it_refuses_an_agent_of_another_tenant(admin, outsider):
    make_agent(outsider)
    refused(admin, 404, "agent_not_found")


def test_it_refuses_a_tool_the_agent_does_not_have(admin, mailer):
    problem = refused(admin, 400, "unknown_tool", toolName="launch_rockets")
    assert fields(problem) == {"toolName": problem["detail"]}


def test_it_refuses_a_name_outside_the_prefix_of_an_mcp_server_that_asks_always(admin):
    make_agent(admin, mcpServers=MCP_SERVERS[:1])
    refused(admin, 400, "unknown_tool", toolName="book_meeting")


def test_it_refuses_a_tool_of_an_earlier_version_only(admin, mailer):
    mailer.append_version(DefinitionContent.model_validate({**MAILER, "tools": []}), admin.user)
    refused(admin, 400, "unknown_tool")


def test_it_refuses_a_tool_that_asks_every_time(admin):
    make_agent(admin, tools=[{"name": "send_email", "approval": "every_time"}])
    problem = refused(admin, 400, "remember_refused")
    assert "every time" in problem["detail"]


def test_it_refuses_a_tool_of_an_mcp_server_that_asks_every_time(admin):
    make_agent(admin, mcpServers=MCP_SERVERS)
    refused(admin, 400, "remember_refused", toolName="files_delete")


def test_it_refuses_a_tool_that_never_asks(admin, mailer):
    problem = refused(admin, 400, "tool_never_asks", toolName="get_time")
    assert problem["detail"] == "get_time runs without asking for approval; a rule would change nothing."


def test_a_name_only_a_never_asking_mcp_server_could_offer_is_said_so(admin):
    """A prefixless MCP server may offer any name: such a tool "runs without asking" was said of a typo."""
    make_agent(admin, mcpServers=[{"connection": "meetings", "approval": "never"}])
    problem = refused(admin, 400, "tool_never_asks", toolName="no_such_tool")
    assert problem["detail"].startswith("'mailer' has no server tool 'no_such_tool', and the MCP servers")


def test_it_refuses_a_client_tool(admin, mailer):
    problem = refused(admin, 400, "tool_never_asks", toolName="get_user_location")
    assert "client tool" in problem["detail"]


def test_it_refuses_arguments_and_conditions_together(admin, mailer):
    condition = {"argument": "to", "operator": "equals", "value": "ops@example.com"}
    problem = refused(admin, 400, "arguments_and_conditions", arguments=EMAIL, conditions=[condition])
    assert set(fields(problem)) == {"conditions"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"agent": ""}, "agent"),
        ({"toolName": ""}, "toolName"),
        ({"toolName": 7}, "toolName"),
        ({"arguments": ["to"]}, "arguments"),
        ({"conditions": {"to": "x"}}, "conditions"),
        ({"conditions": [{"argument": "to", "operator": "like", "value": "x"}]}, "conditions.0.operator"),
        ({"conditions": [{"argument": "", "operator": "equals", "value": "x"}]}, "conditions.0.argument"),
        ({"conditions": [{"argument": "to", "operator": "equals"}]}, "conditions.0.value"),
        ({"conditions": [{"argument": "to", "operator": "in", "value": "x"}]}, "conditions.0.value"),
        ({"conditions": [{"argument": "to", "operator": "not_in", "value": []}]}, "conditions.0.value"),
        ({"conditions": [{"argument": "to", "operator": "in", "value": ["a", 1]}]}, "conditions.0.value"),
        ({"conditions": [{"argument": "n", "operator": "lt", "value": True}]}, "conditions.0.value"),
        ({"conditions": [{"argument": "n", "operator": "gte", "value": [1]}]}, "conditions.0.value"),
        ({"conditions": [{"argument": "n", "operator": "gt", "value": 1, "extra": 2}]}, "conditions.0.extra"),
        ({"remember": True}, "remember"),
        # Bounded: a rule is read by people and checked on every call.
        ({"conditions": [{"argument": "to", "operator": "equals", "value": "x" * 2000}]}, "conditions.0.value"),
        ({"conditions": [{"argument": f"a{i}", "operator": "equals", "value": i} for i in range(51)]}, "conditions"),
        ({"arguments": {"body": "x" * 100_000}}, "arguments"),
    ],
)
def test_it_refuses_an_invalid_body_with_the_field_path(admin, mailer, body, field):
    problem = refused(admin, 400, "invalid_request", **body)
    assert field in fields(problem), problem["errors"]


def test_it_names_the_operators_when_one_is_unknown(admin, mailer):
    problem = refused(admin, 400, "invalid_request", conditions=[{"argument": "a", "operator": "~", "value": 1}])
    assert "not_in" in fields(problem)["conditions.0.operator"]


def test_it_lets_only_admins_create(operator, reader, mailer):
    for persona in (operator, reader):
        problem = refused(persona, 403, "forbidden")
        assert "admin" in problem["detail"]


def test_it_asks_for_credentials(mailer):
    from django.test import Client

    response = Client().post("/api/rules", {"agent": "mailer", "toolName": "send_email"}, "application/json")
    assert_problem(response, 401, "unauthenticated")
    assert Rule.objects.count() == 0


# --- listing ------------------------------------------------------------------------------------


def rule(agent: Agent, tool: str = "send_email", minutes_ago: int = 0, **fields: Any) -> Rule:
    created_at = timezone.now() - timedelta(minutes=minutes_ago)
    return Rule.objects.create(tenant=agent.tenant, agent=agent, tool_name=tool, created_at=created_at, **fields)


def ids(page: dict[str, Any]) -> list[str]:
    return [item["ruleId"] for item in page["items"]]


def test_it_lists_the_active_rules_newest_first_to_every_role(admin, operator, reader, mailer):
    older, newer = rule(mailer, minutes_ago=5), rule(mailer, minutes_ago=1)
    rule(mailer, revoked_at=timezone.now())

    for persona in (admin, operator, reader):
        page = listed(persona)
        assert ids(page) == [str(newer.id), str(older.id)]
        assert (page["limit"], page["offset"], page["next"]) == (50, 0, None)


def test_it_lists_revoked_rules_when_asked(admin, mailer):
    revoked = rule(mailer, revoked_at=timezone.now())

    [item] = listed(admin, "?includeRevoked=true")["items"]

    assert item["ruleId"] == str(revoked.id)
    assert item["revokedAt"] == revoked.revoked_at.isoformat()


def test_it_filters_by_agent_and_tool(admin, mailer):
    other = make_agent(admin, name="other")
    by_agent = rule(other)
    by_tool = rule(mailer, tool="meet_book")
    rule(mailer)

    assert ids(listed(admin, "?agent=other")) == [str(by_agent.id)]
    assert ids(listed(admin, "?tool=meet_book")) == [str(by_tool.id)]
    assert ids(listed(admin, "?agent=other&tool=meet_book")) == []


def test_it_pages_the_list(admin, mailer):
    rules = [rule(mailer, minutes_ago=minutes) for minutes in range(5)]

    first = listed(admin, "?limit=2")
    second = listed(admin, f"?limit=2&offset={first['next']}")
    last = listed(admin, f"?limit=2&offset={second['next']}")

    assert ids(first) + ids(second) + ids(last) == [str(r.id) for r in rules]
    assert (first["next"], second["next"], last["next"]) == (2, 4, None)


def test_it_refuses_a_bad_filter(admin, mailer):
    assert_problem(admin.api("GET", "/api/rules?includeRevoked=maybe"), 400, "invalid_request")
    assert_problem(admin.api("GET", "/api/rules?offset=-1"), 400, "invalid_request")


def test_it_lists_only_the_rules_of_the_tenant(admin, outsider, mailer):
    rule(make_agent(outsider))

    assert listed(admin)["items"] == []
    assert len(listed(outsider)["items"]) == 1


def test_it_leaves_out_the_rules_of_a_deleted_agent(admin, mailer):
    rule(mailer)
    mailer.soft_delete()

    assert listed(admin)["items"] == []


# --- remembered from a request ------------------------------------------------------------------


def ask_and_remember(persona: Persona, arguments_only: bool, override: dict[str, Any] | None = None) -> Rule:
    asked = persona.api(
        "POST", "/api/agents/mailer/runs", {"message": f"call send_email {json.dumps(EMAIL)}", "sessionId": "s1"}
    ).json()
    approval = {
        "requestId": asked["pendingRequests"][0]["requestId"],
        "approved": True,
        "remember": True,
        "rememberArgumentsOnly": arguments_only,
        "overrideArguments": override,
    }
    answered = persona.api("POST", "/api/agents/mailer/runs", {"sessionId": "s1", "approvals": [approval]})
    assert answered.status_code == 200, answered.content
    return Rule.objects.get()


def test_it_shows_where_a_remembered_rule_came_from(operator, mailer):
    stored = ask_and_remember(operator, arguments_only=False)

    [item] = listed(operator)["items"]

    pending = PendingRequest.objects.get()
    assert item["createdFromRequestId"] == str(pending.id)
    assert item["createdFromRunId"] == str(pending.run_id)
    assert item["createdBy"] == "otto"
    assert item["arguments"] is None
    assert item["ruleId"] == str(stored.id)


def test_it_shows_the_exact_arguments_a_remembered_rule_approves(operator, mailer):
    ask_and_remember(operator, arguments_only=True)

    [item] = listed(operator)["items"]

    assert item["arguments"] == EMAIL
    assert item["argumentsHash"] == arguments_hash(EMAIL)


def test_it_shows_the_corrected_arguments_when_the_operator_overrode_them(operator, mailer):
    corrected = {**EMAIL, "to": "cto@example.com"}
    ask_and_remember(operator, arguments_only=True, override=corrected)

    assert listed(operator)["items"][0]["arguments"] == corrected


# --- revoking -----------------------------------------------------------------------------------


def test_it_revokes_a_rule(admin, mailer):
    stored = rule(mailer)

    response = admin.api("DELETE", f"/api/rules/{stored.id}")

    assert response.status_code == 204
    stored.refresh_from_db()
    assert stored.revoked_at is not None
    assert listed(admin)["items"] == []


def test_it_revokes_twice_harmlessly_keeping_the_first_time(admin, mailer):
    stored = rule(mailer)
    admin.api("DELETE", f"/api/rules/{stored.id}")
    stored.refresh_from_db()
    first = stored.revoked_at

    response = admin.api("DELETE", f"/api/rules/{stored.id}")

    assert response.status_code == 204
    stored.refresh_from_db()
    assert stored.revoked_at == first


def test_it_hides_the_rules_of_other_tenants_from_revoking(admin, outsider, mailer):
    stored = rule(mailer)
    before = snapshot()

    assert_problem(outsider.api("DELETE", f"/api/rules/{stored.id}"), 404, "rule_not_found")
    assert_problem(admin.api("DELETE", f"/api/rules/{uuid.uuid4()}"), 404, "rule_not_found")
    assert snapshot() == before


def test_it_lets_only_admins_revoke(operator, reader, mailer):
    stored = rule(mailer)
    before = snapshot()

    for persona in (operator, reader):
        assert_problem(persona.api("DELETE", f"/api/rules/{stored.id}"), 403, "forbidden")
    assert snapshot() == before


# --- a hand-made rule at work -------------------------------------------------------------------


def send(persona: Persona, session: str, **email: str) -> dict[str, Any]:
    body = {"message": f"call send_email {json.dumps({**EMAIL, **email})}", "sessionId": session}
    response = persona.api("POST", "/api/agents/mailer/runs", body)
    assert response.status_code == 200, response.content
    return response.json()


def test_it_approves_the_next_matching_call_by_a_rule_made_by_hand(admin):
    Agent.create(
        admin.tenant,
        DefinitionContent.model_validate({"name": "mailer", "tools": [{"name": "send_email", "approval": "always"}]}),
        admin.user,
    )
    rule = created(admin, conditions=[{"argument": "to", "operator": "equals", "value": "ops@example.com"}])

    approved = send(admin, "s1")
    asked = send(admin, "s2", to="eve@example.com")

    assert approved["status"] == "completed"
    assert approved["output"] == "send_email: sent to ops@example.com"
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]
    events = admin.api("GET", f"/api/runs/{approved['runId']}/events").json()["items"]
    [kind] = [e["data"]["result"] for e in events if e["type"] == "permission.completed"]
    assert kind == {"kind": "approved"}
    [answered] = [e["data"] for e in events if e["type"] == "request.answered"]
    assert answered["ruleId"] == rule["ruleId"]
    assert asked["status"] == "awaiting_approval"
    assert asked["pendingRequests"][0]["arguments"]["to"] == "eve@example.com"


def test_it_asks_again_once_the_rule_is_revoked(admin, mailer):
    rule = created(admin)
    assert send(admin, "s1")["status"] == "completed"

    admin.api("DELETE", f"/api/rules/{rule['ruleId']}")

    assert send(admin, "s2")["status"] == "awaiting_approval"
