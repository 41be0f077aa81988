"""External agents in the console (SPEC section 12): the form's runtime and declared tools, the agent's pages,
the trial page's refusal, the inbox card's label and the demo data."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.actions.settling import is_external
from approvals.models import ApproverGroup, PendingRequest
from console.models import Tenant
from tests.agents.test_pages import browser_post, read, rows
from tests.conftest import Persona

pytestmark = pytest.mark.django_db

DEPLOY_SCHEMA = {
    "type": "object",
    "properties": {"service": {"type": "string"}, "version": {"type": "string"}},
    "required": ["service"],
}


def external_post(**fields: str) -> dict[str, str]:
    return {
        "name": "deployer",
        "runtime": "external",
        "display_name": "Deployer",
        "description": "Deploys from CI.",
        "request_deadline_seconds": "",
        **rows(
            "external_tools",
            {
                "name": "deploy",
                "description": "Deploy a service.",
                "parameters": json.dumps(DEPLOY_SCHEMA),
                "approval": "always",
                "approvers": "",
            },
            {"name": "status", "description": "", "parameters": "", "approval": "never", "approvers": ""},
        ),
        **fields,
    }


@pytest.fixture
def deployer(admin) -> Agent:
    content = DefinitionContent.model_validate(
        {
            "name": "deployer",
            "runtime": "external",
            "description": "Deploys from CI.",
            "tools": [
                {"name": "deploy", "description": "Deploy a *service*.", "parameters": DEPLOY_SCHEMA},
                {"name": "status", "approval": "never"},
            ],
        }
    )
    return Agent.create(admin.tenant, content, admin.user)


def test_it_creates_an_external_agent_through_the_form(admin):
    response = admin.client.post("/agents/new/", external_post(), follow=True)

    assert response.redirect_chain == [("/agents/deployer/", 302)]
    content = Agent.objects.get(tenant=admin.tenant, name="deployer").current.definition
    assert content.external
    assert [(t.name, t.approval) for t in content.tools] == [("deploy", "always"), ("status", "never")]
    assert content.tools[0].parameters == DEPLOY_SCHEMA
    assert content.tools[1].parameters == {"type": "object"}


def test_it_edits_an_external_agent_as_a_new_version(admin, deployer):
    ApproverGroup.objects.create(tenant=admin.tenant, name="release")
    page = admin.client.get("/agents/deployer/edit/")
    data = browser_post(page)
    assert data["runtime"] == "external"
    [key] = [name.split("-")[1] for name, value in data.items() if name.endswith("-name") and value == "status"]
    data[f"external_tools-{key}-approval"] = "always"
    data[f"external_tools-{key}-approvers"] = "release"

    response = admin.client.post("/agents/deployer/edit/", {**data, "note": "status asks"}, follow=True)

    assert response.redirect_chain == [("/agents/deployer/", 302)]
    deployer.refresh_from_db()
    assert deployer.current_version == 2
    content = deployer.current.definition
    assert content.external and content.tools[0].parameters == DEPLOY_SCHEMA
    assert [(t.name, t.approval, t.approvers) for t in content.tools] == [
        ("deploy", "always", None),
        ("status", "always", "release"),
    ]


def test_an_unchanged_external_agent_saves_no_version(admin, deployer):
    data = browser_post(admin.client.get("/agents/deployer/edit/"))

    response = admin.client.post("/agents/deployer/edit/", data, follow=True)

    assert "Nothing changed" in response.content.decode()
    deployer.refresh_from_db()
    assert deployer.current_version == 1


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ('{"type": "object", "properties": ', "Not valid JSON: Expecting value (line 1, column 33)."),
        ('{"type": "string"}', 'A tool\'s parameters must be a JSON Schema of "type": "object"'),
        ('{"type": "object", "required": "service"}', "Not a valid JSON Schema"),
    ],
)
def test_bad_tool_parameters_re_render_with_the_error_and_change_nothing(admin, deployer, parameters, message):
    data = browser_post(admin.client.get("/agents/deployer/edit/"))
    [key] = [name.split("-")[1] for name, value in data.items() if name.endswith("-name") and value == "deploy"]
    data[f"external_tools-{key}-parameters"] = parameters
    data["description"] = "Typed and kept."

    response = admin.client.post("/agents/deployer/edit/", data)

    assert response.status_code == 200
    page = read(response)
    assert "Nothing was saved." in response.content.decode()
    assert message in page.texts[f"external_tools-{key}"]
    fields = dict(page.fields)
    assert fields[f"external_tools-{key}-parameters"] == parameters
    assert fields["description"] == "Typed and kept."
    assert fields["runtime"] == "external"
    deployer.refresh_from_db()
    assert deployer.current_version == 1


def test_it_shows_each_bad_tool_field_next_to_it(admin):
    data = external_post(
        **rows(
            "external_tools",
            {"name": "deploy", "parameters": "", "approval": "always"},
            {"name": "deploy", "parameters": "", "approval": "never"},
            {"name": "2fast", "parameters": "", "approval": "never"},
            {"name": "routed", "parameters": "", "approval": "always", "approvers": "nobody"},
        )
    )

    response = admin.client.post("/agents/new/", data)

    page = read(response)
    assert "Another tool is named “deploy”." in page.texts["external_tools-00000001"]
    assert "Use letters, digits and _, not starting with a digit" in page.texts["external_tools-00000002"]
    assert not Agent.objects.filter(name="deployer").exists()
    # Fixed, the unknown group is refused next to its select.
    data = external_post(**rows("external_tools", {"name": "routed", "approval": "always", "approvers": "nobody"}))
    page = read(admin.client.post("/agents/new/", data))
    assert "No group named 'nobody' in this tenant" in page.texts["external_tools-00000000"]
    assert "nobody (no such group)" in page.texts["external_tools-00000000"]
    assert not Agent.objects.filter(name="deployer").exists()


def test_an_external_agent_ignores_the_hosted_fields_still_in_the_page(admin):
    """The page hides the other runtime's sections but posts them: switching back loses nothing typed."""
    data = external_post(
        instructions="Typed before switching.",
        model_connection="claude-prod",
        **rows("tools", {"name": "get_time", "approval": "never"}),
        **rows("parameters", {"name": "9bad", "kind": "text"}),
    )

    admin.client.post("/agents/new/", data)

    content = Agent.objects.get(name="deployer").current.definition
    assert content.external and content.instructions == "" and content.model.connection == "scripted"
    assert [t.name for t in content.tools] == ["deploy", "status"]


def test_a_form_with_errors_keeps_the_other_runtimes_rows(admin):
    cultures = rows("cultures", {"culture": "tr", "instructions": "Kept too."})
    data = external_post(name="Bad Name", instructions="Kept.", **cultures)

    page = read(admin.client.post("/agents/new/", data))

    fields = dict(page.fields)
    assert fields["instructions"] == "Kept."
    assert fields["cultures-00000000-instructions"] == "Kept too."
    assert fields["external_tools-00000000-name"] == "deploy"


def test_a_hosted_agent_can_become_external_and_back(admin, agent):
    data = browser_post(admin.client.get("/agents/helper/edit/"))
    assert data["runtime"] == "hosted"
    data |= {"runtime": "external", **rows("external_tools", {"name": "ping", "approval": "never"})}

    admin.client.post("/agents/helper/edit/", data)

    agent.refresh_from_db()
    assert agent.current_version == 2 and agent.current.definition.external
    back = browser_post(admin.client.get("/agents/helper/edit/")) | {"runtime": "hosted"}
    admin.client.post("/agents/helper/edit/", back)
    agent.refresh_from_db()
    assert agent.current_version == 3 and not agent.current.definition.external


def test_it_serves_a_blank_declared_tool_row(admin):
    ApproverGroup.objects.create(tenant=admin.tenant, name="release")

    html = admin.client.get("/agents/row/external_tools/").content.decode()

    assert 'name="external_tools-' in html and '<option value="release">release</option>' in html
    assert '<option value="always" selected>' in html


@pytest.mark.parametrize("persona", ["reader", "operator"])
@pytest.mark.parametrize(
    ("method", "path", "data"),
    [
        ("get", "/agents/deployer/edit/", {}),
        ("post", "/agents/deployer/edit/", external_post(description="Changed.")),
        ("post", "/agents/new/", external_post(name="other")),
        ("get", "/agents/row/external_tools/", {}),
    ],
)
def test_only_admins_edit_external_agents(request, deployer, persona, method, path, data):
    member = request.getfixturevalue(persona)

    response = getattr(member.client, method)(path, data)

    assert response.status_code == 403
    deployer.refresh_from_db()
    assert deployer.current_version == 1
    assert not Agent.objects.filter(name="other").exists()


@pytest.mark.parametrize("path", ["/agents/deployer/", "/agents/deployer/edit/", "/agents/deployer/versions/1/"])
def test_it_404s_another_tenants_external_agent(outsider, deployer, path):
    assert outsider.client.get(path).status_code == 404
    response = outsider.client.post("/agents/deployer/edit/", external_post(description="Theirs."))
    assert response.status_code == 404
    deployer.refresh_from_db()
    assert deployer.current_version == 1


def test_the_list_and_the_page_show_an_external_agent_with_its_tools(operator, deployer, agent):
    listed = operator.client.get("/agents/").content.decode()
    assert '<span class="pill external"' in listed
    assert "runs elsewhere" in listed

    response = operator.client.get("/agents/deployer/")

    html = response.content.decode()
    page = read(response)
    tools = page.texts["declared-tools"]
    assert "deploy" in tools and "Deploy a *service*." in tools and "Ask unless a rule answers" in tools
    assert "status" in tools and "Never ask" in tools and "any operator" in tools
    assert '"required": [\n    "service"\n  ]' in tools
    assert "Model" not in page.texts["declared-tools"] and "<dt>Model</dt>" not in html
    assert "Server tools" not in html and "Client tools" not in html
    curl = page.texts["curl-example"]
    assert "curl -X POST http://testserver/api/agents/deployer/requests" in curl
    assert '"toolName": "deploy"' in curl and '"service": "…"' in curl
    assert "/api/requests/$REQUEST_ID?wait=60" in curl
    assert "Try it" not in html and "/trial/?agent=deployer" not in html
    # A hosted agent's page offers its trial.
    assert 'href="/trial/?agent=helper"' in operator.client.get("/agents/helper/").content.decode()


def test_the_trial_page_of_an_external_agent_says_it_runs_elsewhere(operator, deployer, agent):
    response = operator.client.get("/trial/?agent=deployer")

    assert response.status_code == 200
    page = read(response)
    assert "External agents run elsewhere" in page.texts["external-agent"]
    assert 'id="trial-settings"' not in response.content.decode()
    # Without an agent named, the page opens a hosted one.
    default = operator.client.get("/trial/")
    assert default.status_code == 200 and 'data-agent="helper"' in default.content.decode()
    assert "deployer (external)" in default.content.decode()


def test_the_trial_page_with_only_an_external_agent_says_so(operator, deployer):
    response = operator.client.get("/trial/")

    assert response.status_code == 200
    assert "External agents run elsewhere" in response.content.decode()


def open_deploy(persona: Persona) -> dict:
    body = {"kind": "approval", "toolName": "deploy", "arguments": {"service": "billing", "version": "2.4.1"}}
    response = persona.api("post", "/api/agents/deployer/requests", body)
    assert response.status_code == 201, response.content
    return response.json()


def test_an_external_request_card_says_external_and_the_agent(operator, deployer):
    opened = open_deploy(operator)

    response = operator.client.get("/inbox/")

    html = response.content.decode()
    card = read(response).texts[f"request-{opened['requestId']}"]
    assert "Approval external · deployer wants to call deploy" in " ".join(card.split())
    assert 'aria-label="external · deployer: deploy"' in html
    assert "Deploy a <em>service</em>." in html  # the declared tool's description, as Markdown


def test_the_run_page_of_an_external_run_offers_nothing_that_would_fail(admin, deployer):
    opened = open_deploy(admin)

    response = admin.client.get(f"/runs/{opened['runId']}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert '<span class="pill external"' in html
    assert "the agent runs elsewhere" in read(response).texts["run-headline"] + html
    assert "Replay" not in html and "Fork from here" not in html


def test_seed_demo_adds_the_deployer_and_its_waiting_deploy_once(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-password")
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())

    demo = Tenant.objects.get(slug="demo")
    [deployer] = Agent.objects.live().filter(tenant=demo, name="deployer")
    content = deployer.current.definition
    assert deployer.current_version == 1 and content.external
    assert {t.name: t.approval for t in content.tools} == {"deploy": "always", "status": "never"}
    assert sorted(content.tools[0].parameters["properties"]) == ["env", "service", "version"]
    [waiting] = PendingRequest.objects.filter(agent=deployer)
    assert waiting.status == "pending" and waiting.tool_name == "deploy" and is_external(waiting)
    assert waiting.arguments == {"service": "billing", "version": "2.4.1", "env": "production"}


def test_the_diff_of_a_hosted_agent_made_external_shows_the_runtime_and_both_kinds_of_tools(admin, agent):
    data = browser_post(admin.client.get("/agents/helper/edit/"))
    data |= {"runtime": "external", **rows("external_tools", {"name": "ping", "approval": "never"})}
    admin.client.post("/agents/helper/edit/", data)

    response = admin.client.get("/agents/helper/diff/?a=1&b=2")

    assert response.status_code == 200
    changed = {row["label"]: (row["a"], row["b"]) for row in response.context["rows"] if row["changed"]}
    assert changed["Runtime"] == ("", "external")
    assert changed["Model"][1] == "" and changed["Instructions"][1] == ""
    assert changed["Declared tools"][0] == "" and '"name": "ping"' in changed["Declared tools"][1]


def test_cancelling_an_external_run_from_its_card_closes_the_request_for_the_agent(operator, deployer):
    opened = open_deploy(operator)

    response = operator.client.post(f"/inbox/{opened['requestId']}/cancel-run/", follow=True)

    assert response.status_code == 200
    got = operator.api("get", f"/api/requests/{opened['requestId']}?wait=0").json()
    assert got["status"] == "cancelled", got
    assert got["decision"]["approved"] is False
