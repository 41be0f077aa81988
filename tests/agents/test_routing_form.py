"""Routing in the agent form (SPEC section 11): an approvers select per tool, MCP server and request kind, and rows
of policy escalations; what the form saves, what it refuses, and the agent page showing it."""

import html

import pytest
from django.core.management import call_command

from agents.models import Agent
from agents.request_kinds import KIND_NAMES, REQUEST_KINDS
from tests.agents.test_pages import browser_post, read, rows
from tests.conftest import definition, grant

ROUTED = {
    "tools": [{"name": "send_email", "approval": "always", "approvers": "finance"}],
    "clientTools": [{"name": "pick_file", "approvers": "finance"}],
    "mcpServers": [{"connection": "files", "approval": "always", "approvers": "legal"}],
    "escalations": [{"binding": "guard", "approvers": "legal"}, {"approvers": "finance"}],
    "requestKinds": [{"kind": "question", "approvers": "legal"}],
}


@pytest.fixture(autouse=True)
def groups(acme, globex) -> None:
    grant("files", "mcp", acme, command="npx", args=["-y", "@mcp/files"], env=["HOME"])
    call_command("create_group", "finance", "--tenant", "acme")
    call_command("create_group", "legal", "--tenant", "acme")
    call_command("create_group", "globex-only", "--tenant", "globex")


@pytest.fixture
def routed(admin) -> Agent:
    return Agent.create(admin.tenant, definition("router", **ROUTED), admin.user)


def test_the_edit_form_shows_every_routing_and_an_unchanged_post_keeps_it(admin, routed):
    data = browser_post(admin.client.get("/agents/router/edit/"))

    assert [v for k, v in data.items() if k.startswith("tools-") and k.endswith("-approvers")] == ["finance"]
    assert [v for k, v in data.items() if k.startswith("client_tools-") and k.endswith("-approvers")] == ["finance"]
    assert [v for k, v in data.items() if k.startswith("mcp_servers-") and k.endswith("-approvers")] == ["legal"]
    escalations = [
        v for k, v in data.items() if k.startswith("escalations-") and k.endswith(("-binding", "-approvers"))
    ]
    assert sorted(escalations) == ["", "finance", "guard", "legal"]
    assert (data["question_approvers"], data["plan_approvers"]) == ("legal", "")

    response = admin.client.post("/agents/router/edit/", data, follow=True)

    assert "Nothing changed" in response.content.decode()
    routed.refresh_from_db()
    assert routed.current_version == 1


def test_it_saves_the_routing_chosen_in_the_form(admin, routed):
    data = browser_post(admin.client.get("/agents/router/edit/"))
    for name in list(data):
        if name.startswith(("tools-", "client_tools-", "mcp_servers-")) and name.endswith("-approvers"):
            data[name] = {"finance": "legal", "legal": ""}[data[name]]
        if name.startswith("escalations-"):
            del data[name]
    data |= rows("escalations", {"binding": "", "approvers": "legal"})
    data |= {"question_approvers": "", "plan_approvers": "finance", "approval_approvers": "legal"}

    admin.client.post("/agents/router/edit/", data)

    saved = Agent.objects.get(name="router").current.definition
    assert [t.approvers for t in saved.tools] == ["legal"]
    assert [t.approvers for t in saved.client_tools] == ["legal"]
    assert [s.approvers for s in saved.mcp_servers] == [None]  # anyone who can answer
    assert [(e.binding, e.approvers) for e in saved.escalations] == [(None, "legal")]
    assert [(k.kind, k.approvers) for k in saved.request_kinds] == [("approval", "legal"), ("plan", "finance")]
    assert saved.approvers_for("approval", "send_email") == "legal"
    assert saved.approvers_for("plan", "") == "finance"
    assert saved.approvers_for("approval", "files_read") == "legal"  # the kind's, the server has none now


def test_it_routes_a_new_agent_created_in_the_form(admin):
    data = {"name": "fresh", "model_connection": "scripted", "question_approvers": "legal"}
    data |= rows("tools", {"name": "send_email", "approval": "always", "approvers": "finance"})

    admin.client.post("/agents/new/", data)

    saved = Agent.objects.get(name="fresh").current.definition
    assert saved.approvers_for("approval", "send_email") == "finance"
    assert saved.approvers_for("question", "") == "legal"


@pytest.mark.parametrize("group", ["nobody", "globex-only"])
def test_it_refuses_a_group_the_tenant_does_not_have_next_to_its_select(admin, routed, group):
    """Another tenant's group is refused as one that does not exist: only this tenant's groups route."""
    data = browser_post(admin.client.get("/agents/router/edit/"))
    (tool_key,) = [name for name in data if name.startswith("tools-") and name.endswith("-approvers")]
    data[tool_key] = group
    data["question_approvers"] = group
    data |= rows("escalations", {"binding": "other", "approvers": group})

    response = admin.client.post("/agents/router/edit/", data)

    page = read(response)
    message = f"No group named '{group}' in this tenant"
    assert message in page.texts[tool_key.removesuffix("-approvers")]
    assert message in page.texts["id_question_approvers-field"]
    assert message in page.texts["escalations-00000000"]
    assert f"{group} (no such group)" in page.texts["id_question_approvers-field"]
    routed.refresh_from_db()
    assert routed.current_version == 1


def test_it_offers_only_the_tenants_groups(admin):
    page = read(admin.client.get("/agents/new/"))
    html = admin.client.get("/agents/new/").content.decode()

    assert "finance" in page.texts["id_question_approvers-field"] and "legal" in html
    assert "globex-only" not in html


def test_it_offers_a_select_for_every_request_kind_saying_what_it_routes(admin):
    page = read(admin.client.get("/agents/new/"))

    for kind in REQUEST_KINDS:
        assert KIND_NAMES[kind].routes in page.texts[f"id_{kind}_approvers-field"], kind


def test_an_escalation_row_needs_a_group(admin):
    data = {"name": "fresh", "model_connection": "scripted"} | rows("escalations", {"binding": "guard"})

    page = read(admin.client.post("/agents/new/", data))

    assert "Choose the group that answers these escalations." in page.texts["escalations-00000000"]
    assert not Agent.objects.filter(name="fresh").exists()


def test_a_blank_row_offers_the_groups(admin):
    for section in ("tools", "client_tools", "mcp_servers", "escalations", "external_tools"):
        html = admin.client.get(f"/agents/row/{section}/").content.decode()
        assert '<option value="finance">finance</option>' in html, section


def test_the_agent_page_shows_who_answers_what(admin, reader, routed):
    html = reader.client.get("/agents/router/").content.decode()

    routing = html[html.index('id="routing"') : html.index('id="policies"')]
    for what, name, group in [
        ("Policy escalations", "<code>guard</code>", "legal"),
        ("Policy escalations", "every binding", "finance"),
        ("Tool", "<code>send_email</code>", "finance"),
        ("Client tool", "<code>pick_file</code>", "finance"),
        ("MCP server", "<code>files</code>", "legal"),
        ("Requests", "Questions", "legal"),
    ]:
        assert f'<tr><td>{what}</td><td>{name}</td><td><span class="pill routed">for {group}</span>' in routing
    assert "Everything else: anyone who can answer" in routing


def test_an_unrouted_agent_page_says_anyone_answers(admin, agent):
    html = admin.client.get("/agents/helper/").content.decode()

    assert "No group: anyone who can answer" in html
    assert "/agents/helper/edit/#routing" in html


def test_an_external_agent_routes_only_the_kinds_it_opens(admin):
    """Client tools and going on past the model-call limit are a hosted agent's: hidden for an external one,
    and what they still post is not saved."""
    data = {"name": "outside", "runtime": "external", "question_approvers": "legal", "continuation_approvers": "legal"}

    admin.client.post("/agents/new/", data)

    saved = Agent.objects.get(name="outside").current.definition
    assert [(k.kind, k.approvers) for k in saved.request_kinds] == [("question", "legal")]
    page = admin.client.get("/agents/outside/edit/").content.decode()
    assert 'id="id_continuation_approvers-field" class="field" data-runtime="hosted"' in page


def test_it_edits_what_deciding_takes_and_the_escalation_and_keeps_them_unchanged(admin, routed):
    """SPEC section 14 in the form: the two inputs under a row's approvers select save `require` and `escalation`,
    show them again, and an unchanged post of them changes nothing; one that does not read is refused beside it."""
    call_command("create_group", "sre-leads", "--tenant", "acme")
    data = browser_post(admin.client.get("/agents/router/edit/"))
    (tool,) = [
        name.removesuffix("-approvers") for name in data if name.startswith("tools-") and name.endswith("-approvers")
    ]
    data[f"{tool}-approvers"] = "finance,legal"
    data[f"{tool}-require"] = "2 from finance, legal"
    data[f"{tool}-escalation"] = "15m to sre-leads; 1h deny"

    admin.client.post("/agents/router/edit/", data)

    saved = Agent.objects.get(name="router").current.definition
    routing = saved.routing_for("approval", "send_email")
    assert routing.approvers == "finance,legal"
    assert routing.require == {"approvals": 2, "fromEach": ["finance", "legal"], "selfApproval": False}
    assert routing.escalation == [{"after": "15m", "to": ["sre-leads"]}, {"after": "1h", "then": "deny"}]
    again = browser_post(admin.client.get("/agents/router/edit/"))
    (tool,) = [
        name.removesuffix("-require") for name in again if name.startswith("tools-") and name.endswith("-require")
    ]
    assert (again[f"{tool}-require"], again[f"{tool}-escalation"]) == (
        "2 from finance, legal",
        "15m to sre-leads; 1h deny",
    )
    assert "Nothing changed" in admin.client.post("/agents/router/edit/", again, follow=True).content.decode()

    again[f"{tool}-escalation"] = "soon to sre-leads"
    again[f"{tool}-require"] = "two please"
    page = read(admin.client.post("/agents/router/edit/", again))
    assert "Not a requirement" in page.texts[tool]
    versions = Agent.objects.get(name="router").current_version
    again[f"{tool}-require"] = "1 from sre-leads"  # reads, but names a group the approvers do not
    again[f"{tool}-escalation"] = ""
    response = admin.client.post("/agents/router/edit/", again)
    assert "FromEach names 'sre-leads', which is not one of the approvers" in html.unescape(response.content.decode())
    assert Agent.objects.get(name="router").current_version == versions


def test_a_request_kind_takes_a_requirement_and_an_escalation_too(admin, routed):
    call_command("create_group", "sre-leads", "--tenant", "acme")
    data = browser_post(admin.client.get("/agents/router/edit/"))
    data |= {"question_require": "2", "question_escalation": "1h to sre-leads; 2h expire"}
    data |= {"plan_require": "2"}  # no group chosen for plans: refused beside the select

    page = read(admin.client.post("/agents/router/edit/", data))
    assert "Choose the group that answers these requests" in page.texts["id_plan_approvers-field"]
    data["plan_require"] = ""
    admin.client.post("/agents/router/edit/", data)

    routing = Agent.objects.get(name="router").current.definition.routing_for("question", "")
    assert (routing.approvers, routing.require) == ("legal", {"approvals": 2, "fromEach": [], "selfApproval": False})
    assert routing.escalation == [{"after": "1h", "to": ["sre-leads"]}, {"after": "2h", "then": "expire"}]
    again = browser_post(admin.client.get("/agents/router/edit/"))
    assert (again["question_require"], again["question_escalation"]) == ("2", "1h to sre-leads; 2h expire")
