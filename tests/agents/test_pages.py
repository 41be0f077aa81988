"""The agent pages of the console: the definition form, versions, diff, rollback, delete and their guards."""

import re
from html.parser import HTMLParser

import pytest
from django.core.management import call_command

from agents.models import Agent
from tests.conftest import definition, grant

BASICS = {
    "name": "triage",
    "display_name": "Triage",
    "description": "Sorts tickets.",
    "instructions": "Sort the tickets.",
    "request_deadline_seconds": "600",
    "model_connection": "scripted",
    "model_name": "",
}


@pytest.fixture(autouse=True)
def connections(acme, globex) -> None:
    """The installation's connections: three granted to acme, one to globex only."""
    grant("files", "mcp", acme, command="npx", args=["-y", "@mcp/files"], env=["HOME"])
    grant("web", "mcp", acme, url="https://mcp.example/mcp")
    grant("claude-prod", "anthropic", acme, api_key_env="ANTHROPIC_API_KEY")
    grant("globex-llm", "openai", globex, base_url="https://llm.globex.example/v1")


def rows(section: str, *items: dict[str, str]) -> dict[str, str]:
    """Posted inputs of `items` as rows of `section`, keyed 00000000, 00000001, ... in order."""
    return {
        f"{section}-{index:08x}-{field}": value for index, item in enumerate(items) for field, value in item.items()
    }


def parameter(name: str, kind: str = "text", default: str = "", required: bool = False) -> dict[str, str]:
    fields = {"name": name, "kind": kind, "default": default, "description": f"The {name}."}
    return fields | ({"required": "on"} if required else {})


class FormReader(HTMLParser):
    """What a browser would post from a page's forms, and the text of each element with an id."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self.texts: dict[str, str] = {}
        self.attrs_by_name: dict[str, dict[str, str]] = {}
        self._open: list[tuple[str, str | None, dict[str, str]]] = []  # (tag, id, attrs)
        self._select: str | None = None
        self._first_option: str | None = None
        self._chosen: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {key: value or "" for key, value in attrs}
        if "name" in a:
            self.attrs_by_name[a["name"]] = a
        if tag == "input" and "name" in a and a.get("type") != "submit":
            if a.get("type") not in {"checkbox", "radio"} or "checked" in a:
                self.fields.append((a["name"], a.get("value", "on" if a.get("type") == "checkbox" else "")))
        elif tag == "select" and "name" in a:
            self._select, self._first_option, self._chosen = a["name"], None, None
        elif tag == "option" and self._select:
            value = a.get("value", "")
            self._first_option = value if self._first_option is None else self._first_option
            if "selected" in a:
                self._chosen = value
        if tag not in {"input", "br", "meta", "link", "col"}:
            self._open.append((tag, a.get("id"), a))
            if tag == "textarea":
                self.texts.setdefault("\0" + a.get("name", ""), "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select" and self._select:
            self.fields.append((self._select, self._chosen if self._chosen is not None else self._first_option or ""))
            self._select = None
        while self._open:
            open_tag, _, attrs = self._open.pop()
            if open_tag == "textarea" and "name" in attrs:
                # A browser drops the newline right after <textarea>.
                self.fields.append((attrs["name"], self.texts.pop("\0" + attrs["name"]).removeprefix("\n")))
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for tag, element_id, attrs in self._open:
            if element_id:
                self.texts[element_id] = self.texts.get(element_id, "") + data
            if tag == "textarea" and "name" in attrs:
                self.texts["\0" + attrs["name"]] += data


def read(response) -> FormReader:
    reader = FormReader()
    reader.feed(response.content.decode())
    return reader


def browser_post(response) -> dict[str, str]:
    """The definition form of a page as a browser posts it: textareas with CRLF line ends."""
    return {
        name: value.replace("\n", "\r\n")
        for name, value in read(response).fields
        if name != "csrfmiddlewaretoken" and name != "tenant"
    }


def test_it_creates_an_agent_through_the_form(admin):
    data = {
        **BASICS,
        "instructions": "Sort the {{queue}} queue.",
        **rows(
            "parameters",
            parameter("queue", required=True),
            parameter("limit", "number", "3"),
            parameter("loud", "boolean", "Yes"),
        ),
        **rows("cultures", {"culture": "de", "instructions": "Sortiere {{queue}}."}),
        **rows("tools", {"name": "get_time", "approval": "never"}, {"name": "send_email", "approval": "every_time"}),
        **rows(
            "client_tools",
            {
                "name": "pick_file",
                "description": "Ask the user for a file.",
                "parameters": '{"type": "object", "properties": {"kind": {"type": "string"}}}',
            },
        ),
        **rows(
            "mcp_servers",
            {"connection": "files", "approval": "always", "tool_prefix": "fs"},
        ),
    }

    response = admin.client.post("/agents/new/", data, follow=True)

    assert response.redirect_chain == [("/agents/triage/", 302)]
    assert "Created agent “triage” (version 1)." in response.content.decode()
    agent = Agent.objects.get(tenant=admin.tenant, name="triage")
    assert agent.current_version == 1
    content = agent.current.definition
    assert [(p.name, p.kind, p.required, p.default) for p in content.parameters] == [
        ("queue", "text", True, None),
        ("limit", "number", False, 3),
        ("loud", "boolean", False, True),
    ]
    assert content.instructions_by_culture == {"de": "Sortiere {{queue}}."}
    assert [(t.name, t.approval) for t in content.tools] == [("get_time", "never"), ("send_email", "every_time")]
    assert content.client_tools[0].parameters["properties"] == {"kind": {"type": "string"}}
    server = content.mcp_servers[0]
    assert (server.connection, server.approval, server.tool_prefix) == ("files", "always", "fs")
    assert content.request_deadline_seconds == 600


def test_it_refuses_a_name_taken_by_another_agent(admin, agent):
    response = admin.client.post("/agents/new/", {**BASICS, "name": "helper"})

    assert response.status_code == 200
    assert "An agent named “helper” exists already." in read(response).texts["id_name-field"]
    assert Agent.objects.filter(name="helper").count() == 1


def test_it_saves_an_edit_as_a_new_version(admin, agent):
    data = browser_post(admin.client.get("/agents/helper/edit/"))
    data["instructions"] = "You help {{team}}, kindly."

    response = admin.client.post("/agents/helper/edit/", {**data, "note": "kinder"}, follow=True)

    assert response.redirect_chain == [("/agents/helper/", 302)]
    assert "Saved version 2." in response.content.decode()
    agent.refresh_from_db()
    assert agent.current_version == 2
    assert agent.current.definition.instructions == "You help {{team}}, kindly."
    assert agent.current.note == "kinder"
    assert agent.versions.get(number=1).definition.instructions == "You help {{team}}."


def test_it_keeps_the_name_when_an_edit_posts_another(admin, agent):
    data = browser_post(admin.client.get("/agents/helper/edit/"))

    admin.client.post("/agents/helper/edit/", {**data, "name": "renamed", "description": "New."})

    agent.refresh_from_db()
    assert agent.current.definition.name == "helper"
    assert not Agent.objects.filter(name="renamed").exists()


def test_it_saves_no_version_when_an_edit_changes_nothing(admin):
    rich = definition(
        instructions="Line one.\nLine two, {{team}}.\n",
        description="Helps.\nTwice.",
        instructions_by_culture={"tr": "Yardim et.\nLütfen.", "de-CH": "Hilf."},
        model={"connection": "claude-prod", "name": "claude-sonnet"},
        tools=[{"name": "get_time", "approval": "always"}],
        clientTools=[{"name": "pick", "description": "Pick.", "parameters": {"type": "object", "required": []}}],
        mcpServers=[
            {"connection": "web", "approval": "every_time"},
            {"connection": "files", "toolPrefix": "fs"},
        ],
        parameters=[
            {"name": "team", "default": "ops", "required": True},
            {"name": "limit", "kind": "number", "default": 2.5},
            {"name": "count", "kind": "number", "default": 3},
            {"name": "loud", "kind": "boolean", "default": False},
        ],
        requestDeadlineSeconds=60,
    )
    Agent.create(admin.tenant, rich, admin.user)

    response = admin.client.post(
        "/agents/helper/edit/", browser_post(admin.client.get("/agents/helper/edit/")), follow=True
    )

    assert "Nothing changed, so no new version was saved." in response.content.decode()
    agent = Agent.objects.get(name="helper")
    assert agent.current_version == 1


@pytest.mark.parametrize(
    ("section", "items", "field", "message"),
    [
        pytest.param(
            "client_tools",
            [{"name": "pick", "description": "", "parameters": '{"type": "object", "properties": 5}'}],
            "parameters",
            "Not a valid JSON Schema: 5 is not of type",
            id="bad-json-schema",
        ),
        pytest.param(
            "client_tools",
            [{"name": "pick", "description": "", "parameters": '{"type": "object",'}],
            "parameters",
            "Not valid JSON",
            id="broken-json",
        ),
        pytest.param(
            "parameters",
            [parameter("queue"), parameter("queue")],
            "name",
            "Another parameter is named “queue”.",
            id="duplicate-parameter",
        ),
        pytest.param(
            "parameters",
            [parameter("queue"), parameter("limit", "number", "abc")],
            "default",
            "“abc” is not a number.",
            id="number-default",
        ),
        pytest.param(
            "parameters",
            [parameter("queue"), parameter("loud", "boolean", "maybe")],
            "default",
            "“maybe” is not a boolean; use true or false.",
            id="boolean-default",
        ),
        pytest.param(
            "cultures",
            [{"culture": "tr", "instructions": "Bir."}, {"culture": "tr", "instructions": "İki."}],
            "culture",
            "“tr” has instructions already in another row.",
            id="duplicate-culture",
        ),
        pytest.param(
            "mcp_servers",
            [
                {"connection": "files", "approval": "never", "tool_prefix": ""},
                {"connection": "files", "approval": "always", "tool_prefix": "again"},
            ],
            "connection",
            "Another MCP server uses “files”.",
            id="mcp-same-server-twice",
        ),
        pytest.param(
            "mcp_servers",
            [{"connection": "globex-llm", "approval": "never", "tool_prefix": ""}],
            "connection",
            "No connection named 'globex-llm' is granted to this tenant",
            id="mcp-not-granted",
        ),
        pytest.param(
            "mcp_servers",
            [{"connection": "claude-prod", "approval": "never", "tool_prefix": ""}],
            "connection",
            "The connection 'claude-prod' is of kind anthropic, not mcp",
            id="mcp-wrong-kind",
        ),
    ],
)
def test_it_shows_an_invalid_row_field_next_to_it_and_saves_nothing(admin, section, items, field, message):
    data = {**BASICS, **rows(section, *items)}

    response = admin.client.post("/agents/new/", data)

    assert response.status_code == 200
    page = read(response)
    bad = f"{section}-{len(items) - 1:08x}-{field}"
    assert message in page.texts[f"{bad}-error"]
    assert page.attrs_by_name[bad]["aria-describedby"] == f"{bad}-error"
    assert dict(page.fields) | data == dict(page.fields), "every typed value is shown again"
    assert "Nothing was saved." in response.content.decode()
    assert not Agent.objects.filter(name="triage").exists()


def test_it_shows_every_invalid_field_at_once(admin):
    data = {
        **BASICS,
        "name": "Not A Slug",
        "request_deadline_seconds": "soon",
        **rows("parameters", parameter("queue"), parameter("queue", "number", "abc"), parameter("1bad")),
        **rows(
            "client_tools", {"name": "pick", "description": "", "parameters": '{"type": "object", "properties": 5}'}
        ),
    }

    response = admin.client.post("/agents/new/", data)

    texts = read(response).texts
    assert "Use lowercase letters" in texts["id_name-field"]
    assert "whole number of seconds" in texts["id_request_deadline_seconds-field"]
    assert "Another parameter is named “queue”." in texts["parameters-00000001-name-error"]
    assert "“abc” is not a number." in texts["parameters-00000001-default-error"]
    assert "Use letters, digits and _" in texts["parameters-00000002-name-error"]
    assert "Not a valid JSON Schema" in texts["client_tools-00000000-parameters-error"]


@pytest.mark.parametrize(
    ("deadline", "said"), [("0", "Give a number of at least 1."), ("2592001", "Give a number of at most 2592000.")]
)
def test_it_says_a_numbers_bounds_in_words(admin, deadline, said):
    response = admin.client.post("/agents/new/", {**BASICS, "request_deadline_seconds": deadline})

    assert said in read(response).texts["id_request_deadline_seconds-field"]
    assert not Agent.objects.exists()


def test_it_says_how_long_a_name_may_be(admin):
    response = admin.client.post("/agents/new/", {**BASICS, "name": "b" * 64})

    assert "(at most 63)" in read(response).texts["id_name-field"]
    assert not Agent.objects.filter(name="b" * 64).exists()
    assert not Agent.objects.exists()


def test_it_refuses_an_undefined_placeholder_naming_the_field(admin):
    instructions = "Sort the {{queue}} queue for {{owner}}."
    data = {**BASICS, "instructions": instructions, **rows("parameters", parameter("queue"))}

    response = admin.client.post("/agents/new/", data)

    said = read(response).texts["id_instructions-field"]
    assert "The instructions use {{owner}}, which no parameter declares" in said and "declared: queue" in said
    assert "Nothing was saved." in response.content.decode()
    assert not Agent.objects.exists()


def test_it_refuses_an_undefined_placeholder_in_a_cultures_instructions(admin):
    data = {**BASICS, **rows("cultures", {"culture": "de", "instructions": "Sortiere {{queue}}."})}

    response = admin.client.post("/agents/new/", data)

    assert "The de instructions use {{queue}}, which no parameter declares" in response.content.decode()
    assert not Agent.objects.exists()


def test_it_asks_for_a_model_name_for_a_real_provider(admin):
    response = admin.client.post("/agents/new/", {**BASICS, "model_connection": "claude-prod"})

    texts = read(response).texts
    assert "The anthropic connection 'claude-prod' needs a model name" in texts["id_model_name-error"]
    assert not Agent.objects.exists()


def test_it_offers_only_the_connections_granted_to_the_tenant(admin):
    html = admin.client.get("/agents/new/").content.decode()
    model_select = re.search(r'<select id="id_model_connection".*?</select>', html, re.S)[0]

    assert re.findall(r'<option value="([^"]+)"', model_select) == ["claude-prod", "scripted"]
    row = admin.client.get("/agents/row/mcp_servers/").content.decode()
    server_select = re.search(r'<select id="[^"]*-connection".*?</select>', row, re.S)[0]
    assert re.findall(r'<option value="([^"]*)"', server_select) == ["", "files", "meetings", "web"]
    assert "globex-llm" not in html


def test_it_refuses_a_model_connection_of_another_tenant_and_saves_nothing(admin):
    response = admin.client.post("/agents/new/", {**BASICS, "model_connection": "globex-llm", "model_name": "m"})

    error = read(response).texts["id_model_connection-error"]
    assert error == "No connection named 'globex-llm' is granted to this tenant"
    assert not Agent.objects.exists()


def test_it_ignores_inline_connection_settings_posted_by_hand(admin):
    posted = {**BASICS, "model_base_url": "http://attacker.example/v1", "model_api_key_env": "SECRET_KEY"}
    posted |= {"mcp_servers-00000000-command": "sh", "mcp_servers-00000000-args": "-c\nid"}

    admin.client.post("/agents/new/", posted)

    content = Agent.objects.get(name="triage").current.content
    assert content["model"] == {"connection": "scripted", "name": None}
    assert content["mcpServers"] == []


def test_it_keeps_an_edit_with_errors_unsaved(admin, agent):
    data = browser_post(admin.client.get("/agents/helper/edit/"))
    data["instructions"] = "Changed."
    data.update(rows("parameters", parameter("level", "number", "high")))

    response = admin.client.post("/agents/helper/edit/", data)

    assert "“high” is not a number." in read(response).texts["parameters-00000000-default-error"]
    assert "Changed." in read(response).texts["id_instructions-field"]
    agent.refresh_from_db()
    assert agent.current_version == 1


def test_it_drops_rows_left_blank(admin):
    data = {
        **BASICS,
        **rows("parameters", parameter("queue"), {"name": "", "kind": "text", "default": "", "description": ""}),
    }

    admin.client.post("/agents/new/", data)

    assert [p.name for p in Agent.objects.get(name="triage").current.definition.parameters] == ["queue"]


def test_it_serves_a_blank_row_fragment(admin):
    response = admin.client.get("/agents/row/parameters/")

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith("<tr")
    assert "<html" not in html
    keys = set(re.findall(r'name="parameters-([0-9a-f]{8})-(?:name|kind|required|default|description)"', html))
    assert len(keys) == 1
    assert keys != set(
        re.findall(
            r'name="parameters-([0-9a-f]{8})-name"', admin.client.get("/agents/row/parameters/").content.decode()
        )
    )


def test_it_has_no_row_for_an_unknown_section(admin):
    assert admin.client.get("/agents/row/secrets/").status_code == 404


def test_it_lists_agents_with_their_model_and_version(admin, agent):
    agent.append_version(
        definition(display_name="Helper Bot", model={"connection": "claude-prod", "name": "claude"}), admin.user
    )

    html = admin.client.get("/agents/").content.decode()

    assert "Helper Bot" in html
    assert "claude-prod:claude" in html
    assert "v2" in html


def test_it_shows_the_current_definition(admin, agent):
    response = admin.client.get("/agents/helper/")

    html = response.content.decode()
    assert "You help {{team}}." in html
    assert "<code>team</code>" in html
    assert "<code>ops</code>" in html


def test_it_escapes_what_users_typed(admin):
    Agent.create(admin.tenant, definition(display_name="<script>alert(1)</script>"), admin.user)

    html = admin.client.get("/agents/helper/").content.decode() + admin.client.get("/agents/").content.decode()

    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_it_lists_versions_with_their_notes(admin, agent):
    agent.append_version(definition(description="Second."), admin.user, note="second try")

    html = admin.client.get("/agents/helper/versions/").content.decode()

    assert "second try" in html
    assert 'href="/agents/helper/versions/1/"' in html
    assert 'name="a" value="1"' in html


def test_it_shows_an_old_version(admin, agent):
    agent.append_version(definition(instructions="Newer."), admin.user)

    html = admin.client.get("/agents/helper/versions/1/").content.decode()

    assert "You help {{team}}." in html
    assert "version 1 of 2" in html


def test_it_highlights_changed_fields_in_the_diff(admin, agent):
    agent.append_version(
        definition(
            instructions="You assist {{team}}.",
            instructions_by_culture={"tr": "Yardim."},
            parameters=[{"name": "team", "default": "ops"}],
        ),
        admin.user,
    )

    html = admin.client.get("/agents/helper/diff/?a=1&b=2").content.decode()

    changed = re.findall(r'<tr class="changed">\s*<th scope="row">([^<]+)</th>', html)
    assert changed == ["Instructions", "Instructions (tr)"]
    assert "You help {{team}}." in html
    assert "You assist {{team}}." in html
    assert "2 fields changed" in html


def test_it_404s_a_diff_with_a_missing_version(admin, agent):
    assert admin.client.get("/agents/helper/diff/?a=1&b=7").status_code == 404
    assert admin.client.get("/agents/helper/diff/?a=x&b=1").status_code == 404


def test_it_rolls_back_by_appending_the_old_content(admin, agent):
    agent.append_version(definition(instructions="Worse."), admin.user)

    response = admin.client.post("/agents/helper/rollback/", {"version": "1"}, follow=True)

    assert "Rolled back: version 3 now holds version 1&#x27;s content" in response.content.decode()
    agent.refresh_from_db()
    assert agent.current_version == 3
    assert agent.current.definition == agent.versions.get(number=1).definition
    assert agent.versions.get(number=2).definition.instructions == "Worse."


def test_it_deletes_an_agent(admin, agent):
    response = admin.client.post("/agents/helper/delete/", follow=True)

    assert "Deleted agent “helper”." in response.content.decode()
    assert admin.client.get("/agents/helper/").status_code == 404
    assert 'href="/agents/helper/"' not in admin.client.get("/agents/").content.decode()


OBJECT_ROUTES = [
    ("get", "/agents/helper/", {}),
    ("get", "/agents/helper/edit/", {}),
    ("post", "/agents/helper/edit/", BASICS | {"name": "helper"}),
    ("get", "/agents/helper/versions/", {}),
    ("get", "/agents/helper/versions/1/", {}),
    ("get", "/agents/helper/diff/?a=1&b=1", {}),
    ("post", "/agents/helper/rollback/", {"version": "1"}),
    ("post", "/agents/helper/delete/", {}),
]


@pytest.mark.parametrize(("method", "path", "data"), OBJECT_ROUTES)
def test_it_404s_another_tenants_agent(outsider, agent, method, path, data):
    response = getattr(outsider.client, method)(path, data)

    assert response.status_code == 404
    agent.refresh_from_db()
    assert (agent.current_version, agent.deleted_at) == (1, None)


@pytest.mark.parametrize("persona", ["reader", "operator"])
@pytest.mark.parametrize(
    ("method", "path", "data"),
    [
        ("get", "/agents/new/", {}),
        ("post", "/agents/new/", BASICS),
        ("get", "/agents/helper/edit/", {}),
        ("post", "/agents/helper/edit/", BASICS | {"name": "helper"}),
        ("post", "/agents/helper/rollback/", {"version": "1"}),
        ("post", "/agents/helper/delete/", {}),
        ("get", "/agents/row/parameters/", {}),
    ],
)
def test_it_forbids_changes_to_non_admins(request, agent, persona, method, path, data):
    member = request.getfixturevalue(persona)

    response = getattr(member.client, method)(path, data)

    assert response.status_code == 403
    agent.refresh_from_db()
    assert (agent.current_version, agent.deleted_at) == (1, None)
    assert not Agent.objects.filter(name="triage").exists()


@pytest.mark.parametrize("persona", ["reader", "operator"])
def test_it_shows_no_edit_buttons_to_non_admins(request, agent, persona):
    client = request.getfixturevalue(persona).client
    agent.append_version(definition(instructions="Second."), None)

    html = "".join(
        client.get(path).content.decode()
        for path in ["/agents/", "/agents/helper/", "/agents/helper/versions/", "/agents/helper/versions/1/"]
    )

    assert "New agent" not in html
    assert "/agents/helper/edit/" not in html
    assert "/agents/helper/delete/" not in html
    assert "Roll back" not in html


def test_it_shows_edit_buttons_to_admins(admin, agent):
    agent.append_version(definition(instructions="Second."), admin.user)

    html = "".join(
        admin.client.get(path).content.decode() for path in ["/agents/", "/agents/helper/", "/agents/helper/versions/"]
    )

    assert "New agent" in html
    assert "/agents/helper/edit/" in html
    assert "/agents/helper/delete/" in html
    assert "Roll back to this" in html


def test_the_diff_pairs_changed_lines_and_folds_what_did_not_change(admin, agent):
    lines = [f"Rule {n}." for n in range(1, 21)]
    agent.append_version(definition(instructions="\n".join(lines)), admin.user)
    edited = [*lines[:9], "Rule 10, amended.", *lines[10:], "Rule 21."]
    agent.append_version(definition(instructions="\n".join(edited)), admin.user)

    html = admin.client.get("/agents/helper/diff/?a=2&b=3").content.decode()

    assert "1 field changed" in html
    changed = re.search(r'<tr class="line-changed">(.*?)</tr>', html, re.S)
    assert (
        changed
        and "<del><pre>Rule 10.</pre></del>" in changed[1]
        and "<ins><pre>Rule 10, amended.</pre></ins>" in changed[1]
    )
    assert re.search(r'<tr class="line-added">\s*<td></td>\s*<td><ins><pre>Rule 21.</pre></ins></td>', html)
    assert "… 7 unchanged lines …" in html  # rules 1-7 (8 and 9 are kept around the change)
    assert "… 6 unchanged lines …" in html  # rules 13-18, between the two changes
    assert "<pre>Rule 8.</pre>" in html and "<pre>Rule 12.</pre>" in html and "<pre>Rule 13.</pre>" not in html
    assert re.search(r"<summary>\d+ unchanged fields</summary>", html)


def test_an_edit_in_the_form_keeps_what_the_form_does_not_show(admin, agent):
    """The model-call limit, sub-agents and approver routing are the API's to change: an edit keeps them."""
    call_command("create_group", "finance", "--tenant", "acme")
    Agent.create(admin.tenant, definition("scout"), admin.user)
    routed = {
        **agent.current.definition.wire(),
        "maxModelCalls": 7,
        "subAgents": ["scout"],
        "tools": [{"name": "send_email", "approval": "always", "approvers": "finance"}],
    }
    agent.append_version(definition(**routed), admin.user)
    data = browser_post(admin.client.get("/agents/helper/edit/"))
    data["instructions"] = "You help {{team}}, kindly."

    admin.client.post("/agents/helper/edit/", data)

    agent.refresh_from_db()
    saved = agent.current.definition
    assert saved.instructions == "You help {{team}}, kindly."
    assert (saved.max_model_calls, saved.sub_agents) == (7, ["scout"])
    assert [(t.name, t.approvers) for t in saved.tools] == [("send_email", "finance")]
