"""The rules page: the list with its filters, the admin's "New rule" form with errors next to the inputs,
revoking, and who may do what."""

import json
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from agents.rule_matching import arguments_hash
from approvals.models import PendingRequest, Rule
from tests.conftest import Persona

MAILER: dict[str, Any] = {
    "name": "mailer",
    "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time", "approval": "never"}],
}


def make_agent(persona: Persona, name: str = "mailer", **changes: Any) -> Agent:
    content = DefinitionContent.model_validate({**MAILER, "name": name, **changes})
    return Agent.create(persona.tenant, content, persona.user)


@pytest.fixture
def mailer(admin) -> Agent:
    return make_agent(admin)


def rule(agent: Agent, tool: str = "send_email", minutes_ago: int = 0, **fields: Any) -> Rule:
    created_at = timezone.now() - timedelta(minutes=minutes_ago)
    return Rule.objects.create(tenant=agent.tenant, agent=agent, tool_name=tool, created_at=created_at, **fields)


def page(persona: Persona, query: str = "") -> str:
    response = persona.client.get(f"/rules/{query}")
    assert response.status_code == 200
    return response.content.decode()


def table(html: str) -> str:
    match = re.search(r'<table class="rules runs">.*?</table>', html, re.DOTALL)
    assert match, html
    return match.group(0)


def row(html: str, stored: Rule) -> str:
    match = re.search(rf'<tr id="rule-{stored.id}".*?</tr>', html, re.DOTALL)
    assert match, html
    return match.group(0)


def post_form(persona: Persona, **fields: str) -> Any:
    data = {"agent": "mailer", "tool_name": "send_email", "scope": "any", **fields}
    return persona.client.post("/rules/new/", data)


def error_after(html: str, name: str) -> str:
    """The error message shown right after the input named `name` (within its field or cell)."""
    match = re.search(rf'name="{re.escape(name)}".*?<p class="field-error"[^>]*>(.*?)</p>', html, re.DOTALL)
    assert match, f"no error after {name}"
    return match.group(1)


# --- the list -----------------------------------------------------------------------------------


def test_it_lists_each_scope_in_words(reader, mailer):
    anything = rule(mailer)
    exact = rule(mailer, arguments_hash=arguments_hash({"to": "a@b.co"}))
    conditions = [
        {"argument": "amount", "operator": "lt", "value": 100},
        {"argument": "currency", "operator": "in", "value": ["EUR", "USD"]},
    ]
    narrowed = rule(mailer, conditions=conditions)

    html = page(reader)

    assert "any arguments" in row(html, anything)
    assert "exact arguments" in row(html, exact)
    assert "amount &lt; 100 and currency in [EUR, USD]" in row(html, narrowed)
    assert "made by hand" in row(html, anything)
    assert '<span class="pill rule-active">active</span>' in row(html, anything)


def test_it_shows_the_approval_a_rule_was_remembered_from_with_its_arguments(operator, mailer):
    email = {"to": "ops@example.com", "subject": "Report", "body": "All green."}
    asked = operator.api(
        "POST", "/api/agents/mailer/runs", {"message": f"call send_email {json.dumps(email)}", "sessionId": "s1"}
    ).json()
    approval = {
        "requestId": asked["pendingRequests"][0]["requestId"],
        "approved": True,
        "remember": True,
        "rememberArgumentsOnly": True,
    }
    operator.api("POST", "/api/agents/mailer/runs", {"sessionId": "s1", "approvals": [approval]})
    stored = Rule.objects.get()

    html = row(page(operator), stored)

    assert f'href="/runs/{PendingRequest.objects.get().run_id}/"' in html
    assert "otto" in html
    assert "ops@example.com" in html and "All green." in html


def test_it_lists_the_rules_of_the_tenant_only(admin, outsider, mailer):
    mine = rule(mailer)
    theirs = rule(make_agent(outsider, name="globex-mailer"))

    html = page(admin)

    assert f"rule-{mine.id}" in html
    assert f"rule-{theirs.id}" not in html and "globex-mailer" not in html


def test_it_hides_revoked_rules_unless_asked(admin, mailer):
    active, revoked = rule(mailer), rule(mailer, revoked_at=timezone.now())

    assert f"rule-{revoked.id}" not in page(admin)
    html = page(admin, "?revoked=on")
    assert f"rule-{active.id}" in html
    assert "revoked " in row(html, revoked)
    assert "Revoke</button>" not in row(html, revoked)


def test_it_says_every_rule_ended_rather_than_none_made_yet(admin, mailer):
    assert "No rules yet" in page(admin)
    rule(mailer, revoked_at=timezone.now())

    shown = page(admin)

    assert "No rules yet" not in shown
    assert "Every rule was revoked or has expired: “Show revoked and expired” lists them." in shown


def test_it_filters_by_agent_and_tool(admin, mailer):
    other = make_agent(admin, name="other")
    by_agent, by_tool, plain = rule(other), rule(mailer, tool="meet_book"), rule(mailer)

    html = table(page(admin, "?agent=other"))
    assert f"rule-{by_agent.id}" in html and f"rule-{plain.id}" not in html
    html = table(page(admin, "?tool=meet_book"))
    assert f"rule-{by_tool.id}" in html and f"rule-{plain.id}" not in html


def test_it_answers_htmx_with_the_table_only(admin, mailer):
    stored = rule(mailer)

    html = admin.client.get("/rules/?agent=mailer", HTTP_HX_REQUEST="true").content.decode()

    assert f"rule-{stored.id}" in html
    assert "<html" not in html and "New rule" not in html


def test_it_shows_readers_and_operators_no_buttons(reader, operator, mailer):
    rule(mailer)

    for persona in (reader, operator):
        html = page(persona)
        assert "Revoke</button>" not in html
        assert "New rule" not in html
        assert 'action="/rules/new/"' not in html


def test_it_shows_admins_the_buttons(admin, mailer):
    stored = rule(mailer)

    html = page(admin)

    assert f'action="/rules/{stored.id}/revoke/"' in html
    assert 'data-confirm="Revoke this rule?' in row(html, stored)
    assert 'action="/rules/new/"' in html


def test_it_needs_a_login(client, mailer):
    response = client.get("/rules/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/") or "/login/" in response["Location"]


# --- the "New rule" form ------------------------------------------------------------------------


def test_it_creates_a_rule_for_any_arguments(admin, mailer):
    response = post_form(admin)

    assert response.status_code == 302 and response["Location"] == "/rules/"
    stored = Rule.objects.get()
    assert (stored.agent, stored.tool_name, stored.arguments_hash, stored.conditions) == (mailer, "send_email", "", [])
    assert stored.created_by == admin.user
    assert "Created a rule" in page(admin)


def test_it_creates_a_rule_for_exact_arguments(admin, mailer):
    post_form(admin, scope="exact", arguments='{"to": "ops@example.com"}')

    assert Rule.objects.get().arguments_hash == arguments_hash({"to": "ops@example.com"})


def test_it_creates_a_rule_with_conditions_in_the_posted_order(admin, mailer):
    post_form(
        admin,
        scope="conditions",
        **{
            "condition-0000000b-argument": "amount",
            "condition-0000000b-operator": "lt",
            "condition-0000000b-value": "100",
            "condition-0000000a-argument": "currency",
            "condition-0000000a-operator": "in",
            "condition-0000000a-value": '["EUR", "USD"]',
            "condition-0000000c-argument": "",
            "condition-0000000c-operator": "equals",
            "condition-0000000c-value": "",
        },
    )

    assert Rule.objects.get().conditions == [
        {"argument": "amount", "operator": "lt", "value": 100},
        {"argument": "currency", "operator": "in", "value": ["EUR", "USD"]},
    ]
    listed = admin.client.get("/rules/").content.decode()
    assert "may call send_email when its arguments meet the conditions without asking" in listed


def test_the_form_address_opened_again_leads_to_the_rules_page(admin, mailer):
    # A refused form leaves /rules/new/ in the address bar; Enter there (a GET) used to be a blank 405.
    response = admin.client.get("/rules/new/")

    assert (response.status_code, response["Location"]) == (302, "/rules/")
    assert not Rule.objects.exists()


def test_it_ignores_the_inputs_of_the_scope_not_chosen(admin, mailer):
    post_form(admin, scope="any", arguments="not json", **{"condition-0000000a-argument": "to"})

    stored = Rule.objects.get()
    assert (stored.arguments_hash, stored.conditions) == ("", [])


def refused_form(persona: Persona, **fields: str) -> str:
    """Post the form expecting it back with errors; nothing may be stored."""
    response = post_form(persona, **fields)
    assert response.status_code == 200
    assert Rule.objects.count() == 0
    html = response.content.decode()
    assert "Nothing was saved." in html
    return html


def test_it_shows_an_error_next_to_the_tool_and_keeps_the_input(admin, mailer):
    html = refused_form(admin, tool_name="launch_rockets")

    assert "has no tool" in error_after(html, "tool_name")
    assert 'value="launch_rockets"' in html
    assert re.search(r'<option value="mailer" selected>', html)


def test_it_refuses_a_tool_that_asks_every_time(admin):
    make_agent(admin, tools=[{"name": "send_email", "approval": "every_time"}])

    assert "asks every time" in error_after(refused_form(admin), "tool_name")


def test_it_refuses_a_tool_that_never_asks(admin, mailer):
    assert "without asking" in error_after(refused_form(admin, tool_name="get_time"), "tool_name")


def test_it_shows_an_error_for_a_missing_agent_and_tool(admin, mailer):
    html = refused_form(admin, agent="", tool_name="")

    assert error_after(html, "agent") == "Choose the agent."
    assert "Give the name of the tool" in error_after(html, "tool_name")


def test_it_shows_an_error_for_an_agent_of_another_tenant(admin, outsider, mailer):
    make_agent(outsider, name="theirs")

    assert "valid choice" in error_after(refused_form(admin, agent="theirs"), "agent")


def test_it_shows_an_error_for_arguments_that_are_not_json_and_keeps_them(admin, mailer):
    html = refused_form(admin, scope="exact", arguments='{"to": ops@example.com}')

    assert error_after(html, "arguments").startswith("Not valid JSON")
    assert "{&quot;to&quot;: ops@example.com}" in html
    assert 'value="exact" checked' in html


def test_it_shows_an_error_for_arguments_that_are_not_an_object(admin, mailer):
    assert "JSON object" in error_after(refused_form(admin, scope="exact", arguments="[1, 2]"), "arguments")
    assert "JSON object" in error_after(refused_form(admin, scope="exact", arguments=""), "arguments")


def test_it_shows_each_condition_error_next_to_its_input_and_keeps_every_row(admin, mailer):
    html = refused_form(
        admin,
        scope="conditions",
        **{
            "condition-0000000a-argument": "amount",
            "condition-0000000a-operator": "lt",
            "condition-0000000a-value": "100",
            "condition-0000000b-argument": "currency",
            "condition-0000000b-operator": "in",
            "condition-0000000b-value": "EUR",
            "condition-0000000c-argument": "",
            "condition-0000000c-operator": "equals",
            "condition-0000000c-value": '"x"',
        },
    )

    assert "in quotes" in error_after(html, "condition-0000000b-value")
    assert error_after(html, "condition-0000000c-argument")
    assert 'value="amount"' in html and 'value="EUR"' in html and 'value="&quot;x&quot;"' in html
    assert re.search(r'name="condition-0000000a-operator".*?<option value="lt" selected>', html, re.DOTALL)
    assert "condition-0000000a-value-error" not in html


def test_it_shows_a_value_that_does_not_fit_its_operator(admin, mailer):
    html = refused_form(
        admin,
        scope="conditions",
        **{
            "condition-0000000a-argument": "to",
            "condition-0000000a-operator": "in",
            "condition-0000000a-value": '"ops@example.com"',
        },
    )

    assert "non-empty list" in error_after(html, "condition-0000000a-value")


def test_it_asks_for_a_condition_when_none_is_given(admin, mailer):
    html = refused_form(admin, scope="conditions")

    assert "at least one condition" in html
    assert re.search(r'name="condition-[0-9a-f]{8}-argument"', html), "a blank row to fill in"


def test_it_serves_a_blank_condition_row(admin):
    response = admin.client.get("/rules/condition-row/")

    html = response.content.decode()
    assert re.search(r'<tr id="condition-[0-9a-f]{8}">', html)
    assert '<option value="not_in">' in html
    assert "<html" not in html


def test_it_lets_only_admins_create(reader, operator, mailer):
    for persona in (reader, operator):
        assert post_form(persona).status_code == 403
        assert persona.client.get("/rules/condition-row/").status_code == 403
    assert Rule.objects.count() == 0


# --- revoking -----------------------------------------------------------------------------------


def test_it_revokes_a_rule_and_goes_back_to_the_filtered_list(admin, mailer):
    stored = rule(mailer)

    response = admin.client.post(f"/rules/{stored.id}/revoke/", {"next": "/rules/?agent=mailer"})

    assert response.status_code == 302 and response["Location"] == "/rules/?agent=mailer"
    stored.refresh_from_db()
    assert stored.revoked_at is not None
    assert "Revoked the rule" in page(admin)


def test_it_goes_back_only_to_the_rules_page(admin, mailer):
    stored = rule(mailer)

    response = admin.client.post(f"/rules/{stored.id}/revoke/", {"next": "https://evil.example/rules/"})

    assert response["Location"] == "/rules/"


def test_it_hides_the_rules_of_other_tenants_from_revoking(outsider, mailer):
    stored = rule(mailer)

    assert outsider.client.post(f"/rules/{stored.id}/revoke/").status_code == 404
    assert outsider.client.post(f"/rules/{uuid.uuid4()}/revoke/").status_code == 404
    stored.refresh_from_db()
    assert stored.revoked_at is None


def test_it_lets_only_admins_revoke(reader, operator, mailer):
    stored = rule(mailer)

    for persona in (reader, operator):
        assert persona.client.post(f"/rules/{stored.id}/revoke/").status_code == 403
    stored.refresh_from_db()
    assert stored.revoked_at is None


def test_it_revokes_only_by_post(admin, mailer):
    stored = rule(mailer)

    assert admin.client.get(f"/rules/{stored.id}/revoke/").status_code == 405
    stored.refresh_from_db()
    assert stored.revoked_at is None
