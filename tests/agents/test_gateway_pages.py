"""MCP gateways in the console (SPEC section 15): the form's Gateway runtime with its servers and the tools each sets
apart, round-tripping the API's JSON; the agent's pages (list, page, versions' diff) with the endpoint and the line
that points Claude Code at it; the trial page's word on where a gateway is reached; the inbox card of a gateway's
call naming the server and the tool apart with the tool's description; the Runs page listing its session."""

from typing import Any

import mcp_types as types
import pytest

from agents.models import Agent
from approvals.actions.external import open_request
from approvals.external_wire import OpenRequest
from approvals.models import ApproverGroup, PendingRequest
from gateway.calls import _asked
from tests.agents.test_pages import browser_post, read, rows
from tests.conftest import Persona, grant

pytestmark = pytest.mark.django_db

# A gateway as the API takes it, with every setting the form edits: a server's approval, approvers (one group, or
# several), requirement and escalation, and the same of its tools; request kinds and policy escalations routed.
MADE_IN_JSON: dict[str, Any] = {
    "name": "coder",
    "runtime": "gateway",
    "displayName": "Coder",
    "description": "Claude Code's tools.",
    "requestDeadlineSeconds": 900,
    "mcpServers": [
        {
            "connection": "meetings",
            "approval": "every_time",
            "approvers": ["sre", "security"],
            "require": {"approvals": 2, "fromEach": ["sre", "security"]},
            "escalation": [{"after": "15m", "to": ["leads"]}, {"after": "1h", "then": "deny"}],
            "tools": {
                "ping": {"approval": "never"},
                "book_meeting": {"approvers": "leads", "require": {"approvals": 2, "selfApproval": True}},
                "cancel.meeting": {},
            },
        },
        {
            "connection": "everything",
            "approval": "always",
            "tools": {"echo": {"escalation": [{"after": "5m", "then": "approve"}]}},
        },
    ],
    "escalations": [{"approvers": "security"}],
    "requestKinds": [{"kind": "question", "approvers": "leads", "escalation": [{"after": "1h", "then": "expire"}]}],
}


@pytest.fixture(autouse=True)
def connections(acme) -> None:
    """The installation's MCP connections granted to acme besides the built-in `meetings` (none is started here)."""
    grant("everything", "mcp", acme, command="npx", args=["-y", "@modelcontextprotocol/server-everything"])


@pytest.fixture
def groups(acme) -> None:
    for name in ("sre", "security", "leads"):
        ApproverGroup.objects.create(tenant=acme, name=name)


@pytest.fixture
def coder(admin: Persona, groups) -> Agent:
    response = admin.api("post", "/api/agents", MADE_IN_JSON)
    assert response.status_code == 201, response.content
    return Agent.objects.get(tenant=admin.tenant, name="coder")


def gateway_post(**fields: str) -> dict[str, str]:
    """A new gateway as the form posts it: two servers, the first with two tools set apart."""
    return {
        "name": "coder",
        "runtime": "gateway",
        "display_name": "Coder",
        "description": "",
        "request_deadline_seconds": "",
        **rows(
            "gateway_servers",
            {
                "connection": "meetings",
                "approval": "always",
                "approvers": "sre",
                "require": "",
                "escalation": "1h deny",
            },
            {"connection": "everything", "approval": "never", "approvers": ""},
        ),
        **rows(
            "gateway_tools",
            {"server": "00000000", "name": "ping", "approval": "never", "approvers": ""},
            {
                "server": "00000000",
                "name": "book_meeting",
                "approval": "",
                "approvers": "leads",
                "require": "2 from leads",
            },
        ),
        **fields,
    }


def keys(data: dict[str, str], section: str) -> dict[str, str]:
    """The row keys of a section in a page's post, by the value of their first named input (`connection`/`name`)."""
    named = {"gateway_servers": "connection", "gateway_tools": "name"}[section]
    return {
        value: name.split("-")[1]
        for name, value in data.items()
        if name.startswith(f"{section}-") and name.endswith(f"-{named}")
    }


def test_it_creates_a_gateway_through_the_form_as_the_api_shows_it(admin, groups):
    response = admin.client.post("/agents/new/", gateway_post(), follow=True)

    assert response.redirect_chain == [("/agents/coder/", 302)]
    wire = admin.api("get", "/api/agents/coder").json()
    assert wire["runtime"] == "gateway"
    assert wire["mcpServers"] == [
        {
            "connection": "meetings",
            "approval": "always",
            "toolPrefix": None,
            "tools": {
                "ping": {"approval": "never"},
                "book_meeting": {
                    "approvers": "leads",
                    "require": {"approvals": 2, "fromEach": ["leads"], "selfApproval": False},
                },
            },
            "approvers": "sre",
            "escalation": [{"after": "1h", "then": "deny"}],
        },
        {"connection": "everything", "approval": "never", "toolPrefix": None},
    ]
    assert wire["tools"] == [] and wire["model"] == {"connection": "scripted", "name": None}


def test_a_gateway_made_in_json_opens_in_the_form_and_saves_unchanged(admin, coder):
    page = admin.client.get("/agents/coder/edit/")

    data = browser_post(page)
    assert data["runtime"] == "gateway"
    servers, tools = keys(data, "gateway_servers"), keys(data, "gateway_tools")
    assert list(servers) == ["meetings", "everything"] and list(tools) == [
        "ping",
        "book_meeting",
        "cancel.meeting",
        "echo",
    ]
    # Each tool row sits under its server's row and names it.
    assert {name: data[f"gateway_tools-{key}-server"] for name, key in tools.items()} == {
        "ping": servers["meetings"],
        "book_meeting": servers["meetings"],
        "cancel.meeting": servers["meetings"],
        "echo": servers["everything"],
    }
    meetings = servers["meetings"]
    assert data[f"gateway_servers-{meetings}-approvers"] == "sre,security"
    assert data[f"gateway_servers-{meetings}-require"] == "2 from sre, security"
    assert data[f"gateway_servers-{meetings}-escalation"] == "15m to leads; 1h deny"
    assert data[f"gateway_tools-{tools['book_meeting']}-require"] == "2, requester may approve"
    assert data[f"gateway_tools-{tools['cancel.meeting']}-approval"] == ""  # as its server
    assert data[f"gateway_tools-{tools['echo']}-escalation"] == "5m approve"

    response = admin.client.post("/agents/coder/edit/", data, follow=True)

    assert "Nothing changed" in response.content.decode()
    coder.refresh_from_db()
    assert coder.current_version == 1


def test_an_edit_in_the_form_is_what_the_api_shows_next(admin, coder):
    expected = coder.current.definition.wire()["mcpServers"]
    data = browser_post(admin.client.get("/agents/coder/edit/"))
    tools = keys(data, "gateway_tools")
    data[f"gateway_tools-{tools['ping']}-approval"] = "every_time"
    data[f"gateway_tools-{tools['cancel.meeting']}-approvers"] = "security"
    del data[f"gateway_tools-{tools['echo']}-name"]  # its row removed (a server's row goes with its tools)
    for field in ("server", "approval", "approvers", "require", "escalation"):
        data.pop(f"gateway_tools-{tools['echo']}-{field}", None)

    response = admin.client.post("/agents/coder/edit/", data, follow=True)

    assert response.redirect_chain == [("/agents/coder/", 302)]
    wire = admin.api("get", "/api/agents/coder").json()
    expected[0]["tools"]["ping"]["approval"] = "every_time"
    expected[0]["tools"]["cancel.meeting"] = {"approvers": "security"}
    del expected[1]["tools"]
    assert wire["mcpServers"] == expected
    assert wire["version"] == 2 and wire["requestKinds"] == MADE_IN_JSON["requestKinds"]


def test_it_shows_each_bad_gateway_field_next_to_it_and_saves_nothing(admin, groups):
    data = gateway_post(
        description="Typed and kept.",
        **rows(
            "gateway_tools",
            {"server": "00000000", "name": "ping", "approval": "never"},
            {"server": "00000000", "name": "ping", "approval": "always"},
            {"server": "00000000", "name": "has space", "approval": "always"},
            {"server": "00000001", "name": "", "approval": "", "require": "2 from leads"},
            {"server": "00000001", "name": "echo", "escalation": "whenever"},
        ),
    )

    response = admin.client.post("/agents/new/", data)

    assert response.status_code == 200
    page = read(response)
    assert "Nothing was saved." in response.content.decode()
    assert "Another row of this server sets “ping” apart." in page.texts["gateway_tools-00000001"]
    assert "Use letters, digits, _, - and . (at most 128)" in page.texts["gateway_tools-00000002"]
    assert "Give the tool's name, as its server lists it." in page.texts["gateway_tools-00000003"]
    assert "Not a step: “whenever”." in page.texts["gateway_tools-00000004"]
    fields = dict(page.fields)
    assert fields["gateway_tools-00000002-name"] == "has space" and fields["description"] == "Typed and kept."
    assert fields["runtime"] == "gateway" and fields["gateway_tools-00000004-server"] == "00000001"
    assert 'aria-invalid="true" aria-describedby="gateway_tools-00000004-escalation-error"' in response.content.decode()
    assert not Agent.objects.filter(name="coder").exists()


@pytest.mark.parametrize("tool", ["ping", "cancel.meeting"])
def test_pydantic_s_refusals_of_a_tool_go_on_its_row(admin, groups, tool):
    """A requirement naming a group its approvers do not (refused by the model, not the form) shows on the tool,
    whose name may hold the dots that part the error's path."""
    data = gateway_post(
        **rows(
            "gateway_tools",
            {"server": "00000000", "name": "cancel", "approval": "never"},
            {"server": "00000000", "name": tool, "approvers": "sre", "require": "2 from leads"},
            {"server": "00000000", "name": "cancel.meeting.now", "approval": "never"},
        )
    )

    response = admin.client.post("/agents/new/", data)

    page = read(response)
    assert "FromEach names 'leads', which is not one of the approvers ['sre']" in page.texts["gateway_tools-00000001"]
    assert "fromEach" not in page.texts["gateway_servers-00000000"] + page.texts["gateway_tools-00000000"]
    assert not Agent.objects.filter(name="coder").exists()
    # A field's refusal is beside its input.
    data["gateway_tools-00000001-require"] = ""
    data["gateway_tools-00000001-escalation"] = "2s deny"
    response = admin.client.post("/agents/new/", data)
    assert "A step comes at least 5s after the opening" in read(response).texts["gateway_tools-00000001"]
    assert 'aria-describedby="gateway_tools-00000001-escalation-error"' in response.content.decode()
    assert not Agent.objects.filter(name="coder").exists()


def test_a_gateway_without_a_server_or_with_one_twice_is_refused_at_its_section(admin):
    page = read(admin.client.post("/agents/new/", {"name": "coder", "runtime": "gateway"}))

    assert "A gateway fronts at least one MCP server" in page.texts["gateway-servers"]

    twice = rows("gateway_servers", {"connection": "meetings", "approval": "always"}, {"connection": "meetings"})
    page = read(admin.client.post("/agents/new/", {"name": "coder", "runtime": "gateway", **twice}))
    assert "Another MCP server uses “meetings”." in page.texts["gateway_servers-00000001"]
    assert not Agent.objects.filter(name="coder").exists()


def test_a_server_not_granted_is_refused_beside_its_select(admin, outsider):
    grant("theirs", "mcp", outsider.tenant, url="https://mcp.globex.example/mcp")
    data = gateway_post(**rows("gateway_servers", {"connection": "theirs", "approval": "always"}))

    page = read(admin.client.post("/agents/new/", data))

    assert "No connection named 'theirs' is granted to this tenant" in page.texts["gateway_servers-00000000"]


def test_a_tool_routed_to_an_unknown_group_is_refused_on_its_row(admin, groups):
    data = gateway_post(**rows("gateway_tools", {"server": "00000000", "name": "ping", "approvers": "nobody"}))

    page = read(admin.client.post("/agents/new/", data))

    assert "No group named 'nobody' in this tenant" in page.texts.get("gateway_tools-00000000", "")
    assert not Agent.objects.filter(name="coder").exists()


def test_a_gateway_ignores_the_other_runtimes_rows_still_in_the_page(admin, groups):
    """The page hides the other runtimes' sections but posts them: switching back loses nothing typed."""
    data = gateway_post(
        instructions="Typed before switching.",
        **rows("tools", {"name": "get_time", "approval": "never"}),
        **rows("external_tools", {"name": "9bad", "approval": "always"}),
        **rows("mcp_servers", {"connection": "meetings", "approval": "never", "tool_prefix": "m"}),
    )

    admin.client.post("/agents/new/", data)

    content = Agent.objects.get(name="coder").current.definition
    assert content.gateway and content.instructions == "" and content.tools == []
    assert [s.connection for s in content.mcp_servers] == ["meetings", "everything"]


def test_a_hosted_agent_can_become_a_gateway_and_back(admin, agent):
    data = browser_post(admin.client.get("/agents/helper/edit/"))
    data |= {"runtime": "gateway", **rows("gateway_servers", {"connection": "meetings", "approval": "always"})}

    response = admin.client.post("/agents/helper/edit/", data, follow=True)

    assert response.redirect_chain == [("/agents/helper/", 302)]
    agent.refresh_from_db()
    assert agent.current_version == 2 and agent.current.definition.gateway
    back = browser_post(admin.client.get("/agents/helper/edit/")) | {"runtime": "hosted"}
    admin.client.post("/agents/helper/edit/", back)
    agent.refresh_from_db()
    assert agent.current_version == 3 and agent.current.definition.runtime == "hosted"


def test_it_serves_a_blank_server_row_and_a_blank_tool_row_under_a_server(admin, groups):
    server = admin.client.get("/agents/row/gateway_servers/").content.decode()
    assert 'name="gateway_servers-' in server and '<option value="always" selected>' in server
    assert '<option value="meetings">meetings</option>' in server and "Set a tool apart" in server

    tool = admin.client.get("/agents/row/gateway_tools/?server=0123abcd").content.decode()

    assert 'type="hidden" name="gateway_tools-' in tool and 'value="0123abcd"' in tool
    assert '<option value="" selected>As its server</option>' in tool and '<option value="leads">leads</option>' in tool
    assert admin.client.get("/agents/row/gateway_tools/").status_code == 404
    assert admin.client.get("/agents/row/gateway_tools/?server=x").status_code == 404


def test_the_list_and_the_page_show_a_gateway_with_its_servers_tools_and_endpoint(operator, coder, settings):
    settings.CONSOLE_URL = "https://airlock.example"
    listed = operator.client.get("/agents/").content.decode()
    assert (
        '<span class="pill external" title="MCP clients call its servers\' tools through Airlock">gateway</span>'
        in listed
    )
    assert '<code>meetings</code> <span class="muted">(set apart: ping, book_meeting, cancel.meeting)</span>' in listed

    response = operator.client.get("/agents/coder/")

    page = read(response)
    html = response.content.decode()
    servers = " ".join(page.texts["gateway-servers"].split())
    meetings = "for sre or security · 2 approvals (one from each of sre, security), not the requester"
    assert (
        f"Server meetings Approval Ask every time Approvers {meetings} · escalates after 15m to leads; after 1h deny"
        in servers
    )
    assert "ping called meetings__ping Never ask as its server" in servers
    # What a tool leaves out is its server's: book_meeting's escalation, echo's approvers.
    said = "for leads · 2 approvals · escalates after 15m to leads; after 1h deny"
    assert f"book_meeting called meetings__book_meeting as its server: Ask every time {said}" in servers
    assert "cancel.meeting called meetings__cancel.meeting as its server: Ask every time as its server" in servers
    assert "Server everything Approval Ask unless a rule answers Approvers any operator" in servers
    said = "for any operator · escalates after 5m approve"
    assert f"echo called everything__echo as its server: Ask unless a rule answers {said}" in servers
    assert page.texts["mcp-endpoint"] == "https://airlock.example/mcp/coder"
    assert page.texts["claude-mcp-add"] == (
        "claude mcp add --transport http coder https://airlock.example/mcp/coder "
        '--header "Authorization: Bearer $AIRLOCK_TOKEN"'
    )
    assert "MCP tool" in page.texts["routing"] and "meetings__book_meeting" in page.texts["routing"]
    assert "Try it" not in html and "/trial/?agent=coder" not in html and "<dt>Model</dt>" not in html
    # An older version's page shows the servers and the endpoint, not the line to copy.
    older = read(operator.client.get("/agents/coder/versions/1/"))
    assert "mcp-endpoint" in older.texts and "claude-mcp-add" not in older.texts


def test_the_trial_page_of_a_gateway_says_where_it_is_reached(operator, coder, agent, settings):
    settings.CONSOLE_URL = "https://airlock.example"

    response = operator.client.get("/trial/?agent=coder")

    assert response.status_code == 200
    said = " ".join(read(response).texts["gateway-agent"].split())
    assert "coder is an MCP gateway" in said and "A gateway is not tried here" in said
    assert "reach it at https://airlock.example/mcp/coder" in said
    html = response.content.decode()
    assert 'id="trial-settings"' not in html and "External agents run elsewhere" not in html
    assert 'id="new-session"' not in html  # nothing to start here
    assert '<option value="coder" selected>coder (gateway)</option>' in html
    # Without an agent named, the page opens a hosted one.
    assert 'data-agent="helper"' in operator.client.get("/trial/").content.decode()


def test_the_diff_shows_the_runtime_and_the_servers_tools(admin, agent):
    data = browser_post(admin.client.get("/agents/helper/edit/"))
    data |= {
        "runtime": "gateway",
        **rows("gateway_servers", {"connection": "meetings", "approval": "always"}),
        **rows("gateway_tools", {"server": "00000000", "name": "ping", "approval": "never"}),
    }
    admin.client.post("/agents/helper/edit/", data)

    response = admin.client.get("/agents/helper/diff/?a=1&b=2")

    changed = {row["label"]: (row["a"], row["b"]) for row in response.context["rows"] if row["changed"]}
    assert changed["Runtime"] == ("", "gateway")
    assert changed["Model"] == ("scripted", "")
    assert '"ping": {\n        "approval": "never"\n      }' in changed["MCP servers"][1]


def open_call(persona: Persona, exposed: str, description: str = "Book a *meeting*.") -> PendingRequest:
    """A call of the gateway `coder` waiting in the inbox, opened as gateway.calls opens one (its AskedTool)."""
    content = Agent.objects.get(tenant=persona.tenant, name="coder").current.definition
    server, name = content.fronting(exposed) or (None, "")
    assert server is not None
    tool = types.Tool(name=name, description=description, input_schema={"type": "object"})
    body = OpenRequest.model_validate({"sessionId": "mcp-session-1", "kind": "approval", "toolName": exposed})
    opened = open_request(persona.membership, persona.user, "coder", body, _asked(None, server, tool, exposed))  # type: ignore[arg-type]
    assert opened.created and opened.request.answer is None
    return opened.request


def test_a_gateway_call_s_card_names_the_server_and_the_tool_apart(operator, coder):
    pending = open_call(operator, "meetings__book_meeting")

    response = operator.client.get("/inbox/")

    html = response.content.decode()
    card = " ".join(read(response).texts[f"request-{pending.id}"].split())
    assert "Approval gateway · coder wants to call meetings__book_meeting" in card
    assert "MCP server meetings · tool book_meeting" in card
    assert "external ·" not in card
    assert 'aria-label="gateway · coder: meetings__book_meeting"' in html
    assert "Book a <em>meeting</em>." in html  # the upstream tool's description, as Markdown


def test_the_runs_page_lists_a_gateway_s_session(operator, coder):
    pending = open_call(operator, "everything__echo", "Echo it back.")

    response = operator.client.get("/runs/")

    html = response.content.decode()
    assert "mcp-session-1" in html and f"/runs/{pending.run_id}/" in html


@pytest.mark.parametrize("path", ["/agents/coder/", "/agents/coder/edit/", "/agents/coder/diff/?a=1&b=1"])
def test_it_404s_another_tenants_gateway(outsider, coder, path):
    assert outsider.client.get(path).status_code == 404
    response = outsider.client.post("/agents/coder/edit/", gateway_post(description="Theirs."))
    assert response.status_code == 404
    coder.refresh_from_db()
    assert coder.current_version == 1


def test_the_starter_policy_of_a_gateway_names_the_tools_it_sets_apart(admin):
    """Its manifest governs tool calls: a tool it does not name is denied, so it names them as clients call them."""
    query = {
        "mode": "enforce",
        "runtime": "gateway",
        **rows("gateway_servers", {"connection": "meetings"}, {"connection": "everything"}),
        **rows("gateway_tools", {"server": "00000000", "name": "ping"}, {"server": "00000001", "name": "echo"}),
        **rows("client_tools", {"name": "pick_file"}),  # a hidden hosted row is not the gateway's
    }

    html = admin.client.get("/agents/policies/starter/", query).content.decode()

    assert "id: meetings__ping" in html and "id: everything__echo" in html
    assert "pick_file" not in html
