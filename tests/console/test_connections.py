"""Connections belong to the installation (SPEC section 2): no tenant role can make the server run a
command, call a URL or read an environment variable of its choosing; definitions only name connections
granted to their tenant. Here: the refusals (and that nothing ran or was called), the grants, the list
API, `manage.py load_connections`, the Django admin and the migration of stored inline settings."""

import json
import socket
import sys
import threading
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection as db_connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from agents.models import AgentVersion
from console.models import Connection
from tests.conftest import Persona, grant
from tests.helpers import EMAIL, assert_problem, call_line, drain_queued, make_agent, run, snapshot

INLINE = "inline connection settings are refused"


class Listener:
    """A loopback TCP port that counts the connections made to it (an attacker's server stand-in)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                peer, _ = self.server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            peer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.server.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def definition(**fields) -> dict:
    return {"name": "sneaky", "instructions": "Hi.", **fields}


def run_sneaky(persona: Persona):
    return persona.api("POST", "/api/agents/sneaky/runs", {"message": call_line("book_meeting", {"topic": "x"})})


# --- a tenant admin cannot reach the host ---------------------------------------------------------------


@pytest.mark.parametrize(
    "server",
    [
        {"connection": "meetings", "command": "sh", "args": ["-c", "touch {marker}"], "env": ["DEMO_PASSWORD"]},
        {"name": "meetings", "command": "sh", "args": ["-c", "touch {marker}"], "env": ["DEMO_PASSWORD"]},
    ],
    ids=["next-to-a-connection", "the-old-shape"],
)
def test_it_refuses_a_definition_with_a_command_and_runs_nothing(admin, operator, tmp_path, server):
    marker = tmp_path / "ran"
    server = {
        key: [a.format(marker=marker) for a in value] if key == "args" else value for key, value in server.items()
    }
    before = snapshot()

    problem = assert_problem(admin.api("POST", "/api/agents", definition(mcpServers=[server])), 400, "invalid_request")

    fields = {error["field"]: error["message"] for error in problem["errors"]}
    assert {"mcpServers.0.command", "mcpServers.0.args", "mcpServers.0.env"} <= fields.keys()
    assert fields["mcpServers.0.command"].startswith(INLINE)
    assert_problem(run_sneaky(operator), 404, "agent_not_found")
    assert snapshot() == before
    assert not marker.exists()


def test_it_refuses_a_command_put_into_an_existing_agent(admin, operator, tmp_path):
    admin.api("POST", "/api/agents", definition(mcpServers=[{"connection": "meetings"}]))
    marker = tmp_path / "ran"
    sneaky = {"connection": "meetings", "command": "sh", "args": ["-c", f"touch {marker}"]}
    before = snapshot()

    assert_problem(admin.api("PUT", "/api/agents/sneaky", definition(mcpServers=[sneaky])), 400, "invalid_request")

    assert snapshot() == before
    run_sneaky(operator)
    assert not marker.exists()


@pytest.mark.parametrize(
    "fields",
    [
        {"model": {"provider": "openai", "name": "m", "baseUrl": "{url}", "apiKeyEnv": "SECRET_KEY"}},
        {"model": {"connection": "scripted", "baseUrl": "{url}"}},
        {"mcpServers": [{"connection": "meetings", "url": "{url}"}]},
        {"mcpServers": [{"name": "docs", "url": "{url}"}]},
    ],
    ids=["provider", "base-url-beside-a-connection", "mcp-url", "mcp-url-old-shape"],
)
def test_it_refuses_a_url_or_an_env_name_and_calls_nothing(admin, operator, listener, fields, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "the-installation's-secret")
    body = json.loads(json.dumps(definition(**fields)).replace("{url}", listener.url))
    before = snapshot()

    problem = assert_problem(admin.api("POST", "/api/agents", body), 400, "invalid_request")

    assert any(error["message"].startswith(INLINE) for error in problem["errors"]), problem["errors"]
    assert_problem(run_sneaky(operator), 404, "agent_not_found")
    assert snapshot() == before
    assert listener.accepted == 0


# --- grants ---------------------------------------------------------------------------------------------


def test_it_answers_the_same_for_a_missing_and_an_ungranted_connection(admin, outsider, globex):
    grant("globex-llm", "openai", globex, base_url="https://llm.globex.example/v1", api_key_env="GLOBEX_KEY")
    before = snapshot()

    ungranted = admin.api("POST", "/api/agents", definition(model={"connection": "globex-llm", "name": "m"}))
    missing = admin.api("POST", "/api/agents", definition(model={"connection": "no-such", "name": "m"}))

    first, second = (
        assert_problem(ungranted, 400, "unknown_connection"),
        assert_problem(missing, 400, "unknown_connection"),
    )
    assert json.dumps(first).replace("globex-llm", "X") == json.dumps(second).replace("no-such", "X")
    assert first["errors"] == [
        {"field": "model.connection", "message": "no connection named 'globex-llm' is granted to this tenant"}
    ]
    assert snapshot() == before
    created = outsider.api("POST", "/api/agents", definition(model={"connection": "globex-llm", "name": "m"}))
    assert created.status_code == 201, created.content


def test_it_refuses_an_ungranted_mcp_connection_on_every_save(admin, globex):
    grant("globex-files", "mcp", globex, command="npx")
    admin.api("POST", "/api/agents", definition())
    theirs = definition(mcpServers=[{"connection": "globex-files"}])
    before = snapshot()

    assert_problem(admin.api("POST", "/api/agents", {**theirs, "name": "other"}), 400, "unknown_connection")
    assert_problem(admin.api("PUT", "/api/agents/sneaky", theirs), 400, "unknown_connection")
    assert snapshot() == before


def test_it_refuses_a_rollback_to_a_connection_no_longer_granted(admin, acme):
    files = grant("files", "mcp", acme, command="npx")
    admin.api("POST", "/api/agents", definition(mcpServers=[{"connection": "files"}]))
    admin.api("PUT", "/api/agents/sneaky", definition())
    files.tenants.clear()
    before = snapshot()

    response = admin.api("POST", "/api/agents/sneaky/rollback", {"version": 1})

    assert_problem(response, 400, "unknown_connection")
    assert snapshot() == before


def test_it_refuses_a_run_once_the_grant_is_withdrawn_and_changes_nothing(admin, operator, acme):
    files = grant("files", "mcp", acme, command="npx")
    admin.api("POST", "/api/agents", definition(mcpServers=[{"connection": "files"}]))
    files.tenants.clear()
    before = snapshot()

    problem = assert_problem(
        run(operator, {"message": "hi", "sessionId": "s1"}, agent="sneaky"), 400, "unknown_connection"
    )

    assert "files" in problem["detail"]
    assert snapshot() == before


def test_it_fails_a_continuation_whose_connection_was_withdrawn(admin, operator, acme):
    files = grant("files", "mcp", acme, command=sys.executable, args=["-m", "agents.mcp_demo"])
    make_agent(admin, mcpServers=[{"connection": "files"}])
    asked = run(operator, {"message": call_line("send_email", EMAIL), "sessionId": "s1"}).json()
    assert asked["status"] == "awaiting_approval", asked
    files.tenants.clear()

    response = operator.api(
        "POST",
        f"/api/runs/{asked['runId']}/responses",
        {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True},
    )
    assert response.json()["status"] == "accepted", response.content
    drain_queued()

    continuation = operator.api("GET", f"/api/runs/{response.json()['continuationRunId']}").json()
    assert continuation["status"] == "failed"
    assert continuation["error"]["code"] == "unknown_connection"


# --- GET /api/connections --------------------------------------------------------------------------------


def test_it_lists_the_connections_of_the_tenant_by_name_and_kind_only(reader, outsider, acme, globex):
    grant("openai-prod", "openai", acme, base_url="https://api.example.com/v1", api_key_env="OPENAI_API_KEY")
    grant("policy-svc", "webhook", url="http://127.0.0.1:9000/verdict", secret_env="POLICY_SECRET")
    grant("globex-llm", "openai", globex)

    listed = reader.api("GET", "/api/connections")

    assert listed.status_code == 200
    assert listed.json() == [
        {"name": "meetings", "kind": "mcp"},
        {"name": "openai-prod", "kind": "openai"},
        {"name": "policy-svc", "kind": "webhook"},
        {"name": "scripted", "kind": "scripted"},
    ]
    assert [c["name"] for c in outsider.api("GET", "/api/connections").json()] == [
        "globex-llm",
        "meetings",
        "policy-svc",
        "scripted",
    ]


def test_it_lists_connections_only_to_a_member():
    response = Client().get("/api/connections")
    assert_problem(response, 401, "unauthenticated")


# --- manage.py load_connections ----------------------------------------------------------------------------

SPEC_FILE = {
    "connections": [
        {"name": "demo-files", "kind": "mcp", "command": "python", "args": ["-m", "files"], "env": [], "tenants": "*"},
        {"name": "docs-mcp", "kind": "mcp", "url": "https://mcp.example.com/mcp", "tenants": ["acme"]},
        {
            "name": "openai-prod",
            "kind": "openai",
            "baseUrl": "https://api.example.com/v1",
            "apiKeyEnv": "OPENAI_API_KEY",
            "tenants": ["acme"],
        },
        {
            "name": "policy-svc",
            "kind": "webhook",
            "url": "http://127.0.0.1:9000/verdict",
            "secretEnv": "POLICY_SECRET",
            "tenants": "*",
        },
    ]
}


def load(tmp_path: Path, data: object) -> str:
    path = tmp_path / "connections.json"
    path.write_text(json.dumps(data))
    out = StringIO()
    call_command("load_connections", str(path), stdout=out)
    return out.getvalue()


def test_it_loads_connections_from_a_file_and_grants_them(tmp_path, acme, globex):
    assert load(tmp_path, SPEC_FILE).strip() == "Loaded 4 connection(s)."

    openai = Connection.objects.get(name="openai-prod")
    assert (openai.kind, openai.base_url, openai.api_key_env, openai.all_tenants) == (
        "openai",
        "https://api.example.com/v1",
        "OPENAI_API_KEY",
        False,
    )
    assert list(openai.tenants.all()) == [acme]
    assert Connection.objects.get(name="demo-files").args == ["-m", "files"]
    assert set(Connection.objects.specs_for(globex)) == {"scripted", "meetings", "demo-files", "policy-svc"}


def test_it_updates_by_name_and_touches_nothing_else(tmp_path, acme, globex):
    load(tmp_path, SPEC_FILE)
    kept = Connection.objects.get(name="docs-mcp")
    changed = {"name": "openai-prod", "kind": "openai", "baseUrl": "https://eu.example.com/v1", "tenants": ["globex"]}

    load(tmp_path, {"connections": [changed]})

    openai = Connection.objects.get(name="openai-prod")
    assert (openai.base_url, openai.api_key_env) == ("https://eu.example.com/v1", "")
    assert list(openai.tenants.all()) == [globex]
    assert Connection.objects.count() == 4
    assert Connection.objects.get(name="docs-mcp").updated_at == kept.updated_at


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "kind": "mcp", "command": "sh", "url": "http://a.example", "tenants": "*"}, "either a stdio"),
        ({"name": "x", "kind": "mcp", "command": "sh", "tenants": ["nobody"]}, "no tenant nobody"),
        ({"name": "scripted", "kind": "openai", "tenants": "*"}, "built-in"),
        ({"name": "x", "kind": "openai", "apiKeyEnv": "not-a-name", "tenants": "*"}, "environment variable"),
        ({"name": "x", "kind": "openai", "command": "sh", "tenants": "*"}, "has no command"),
        ({"name": "x", "kind": "ftp", "tenants": "*"}, "kind"),
        ({"name": "x", "kind": "mcp", "command": "sh", "password": "p"}, "unknown field"),
        ({"name": "Not A Slug", "kind": "mcp", "command": "sh"}, "name"),
    ],
)
def test_it_loads_nothing_from_a_file_with_a_bad_entry(tmp_path, acme, entry, message):
    good = SPEC_FILE["connections"][1]

    with pytest.raises(CommandError, match=message):
        load(tmp_path, {"connections": [good, entry]})

    assert not Connection.objects.exists()


def test_it_refuses_a_file_that_is_not_a_connections_list(tmp_path):
    with pytest.raises(CommandError, match="must be"):
        load(tmp_path, [{"name": "x"}])
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("load_connections", str(tmp_path / "missing.json"))


# --- the Django admin ---------------------------------------------------------------------------------------


def test_it_lets_only_superusers_manage_connections_in_the_admin(admin, acme):
    grant("openai-prod", "openai", acme)
    staff = User.objects.create_user("stan", password="x", is_staff=True)
    root = User.objects.create_superuser("root", password="x")
    page = "/admin/console/connection/"

    assert admin.client.get(page).status_code == 302, "a tenant admin is not staff: the admin's own login"
    as_staff, as_root = Client(), Client()
    as_staff.force_login(staff)
    as_root.force_login(root)
    assert as_staff.get(page).status_code == 403
    listed = as_root.get(page)
    assert listed.status_code == 200
    assert "openai-prod" in listed.content.decode()

    added = as_root.post(
        "/admin/console/connection/add/",
        {"name": "docs", "kind": "mcp", "url": "https://mcp.example.com/mcp", "args": "[]", "env": "[]"},
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    assert Connection.objects.get(name="docs").url == "https://mcp.example.com/mcp"


# --- the migration of stored inline settings ------------------------------------------------------------------

BEFORE = [("agents", "0003_run_queue"), ("console", "0001_initial")]


@pytest.mark.django_db(transaction=True)
def test_it_turns_stored_inline_settings_into_connections_of_their_tenant():
    executor = MigrationExecutor(db_connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    tenants = {slug: old.get_model("console", "Tenant").objects.create(slug=slug, name=slug) for slug in ("a", "b")}
    demo = {"name": "meetings", "command": "/old/venv/python", "args": ["-m", "agents.mcp_demo"], "approval": "never"}
    files = {"name": "files", "command": "npx", "args": ["-y", "files"], "env": ["HOME"], "approval": "always"}
    provider = {"provider": "openai", "name": "gpt", "baseUrl": "https://llm.example/v1", "apiKeyEnv": "KEY"}
    contents = {
        "a": [{"name": "one", "model": provider, "mcpServers": [demo, files]}, {"name": "two", "model": provider}],
        "b": [{"name": "one", "mcpServers": [{**files, "toolPrefix": "fs"}]}],
    }
    for slug, agents in contents.items():
        for content in agents:
            agent = old.get_model("agents", "Agent").objects.create(tenant=tenants[slug], name=content["name"])
            old.get_model("agents", "AgentVersion").objects.create(agent=agent, number=1, content=content)

    # Forward to the newest of every app, so the tests after this one find every table again.
    forward = MigrationExecutor(db_connection)
    forward.migrate(forward.loader.graph.leaf_nodes())

    stored = {
        (v.agent.tenant.slug, v.agent.name): v.content for v in AgentVersion.objects.select_related("agent__tenant")
    }
    assert stored["a", "one"]["model"] == {"connection": "a-openai", "name": "gpt"}
    assert stored["a", "two"]["model"] == {"connection": "a-openai", "name": "gpt"}
    assert stored["a", "one"]["mcpServers"] == [
        {"connection": "meetings", "approval": "never", "toolPrefix": None},
        {"connection": "a-files", "approval": "always", "toolPrefix": None},
    ]
    assert stored["b", "one"]["mcpServers"] == [{"connection": "b-files", "approval": "always", "toolPrefix": "fs"}]
    openai = Connection.objects.get(name="a-openai")
    assert (openai.kind, openai.base_url, openai.api_key_env) == ("openai", "https://llm.example/v1", "KEY")
    assert [t.slug for t in openai.tenants.all()] == ["a"]
    assert Connection.objects.get(name="b-files").command == "npx"
    assert Connection.objects.count() == 3
    for version in AgentVersion.objects.all():
        tenant = version.agent.tenant
        content = version.definition
        assert content.connection_problems(Connection.objects.specs_for(tenant, content.connection_names)) is None


def test_one_name_is_granted_per_tenant_as_many_names_are(tmp_path, acme, globex):
    """`specs_for` reads one stored name through its compiled statement (issue 56): the same grants as a list."""
    load(tmp_path, SPEC_FILE)
    shared = Connection.objects.create(name="shared-model", kind="openai", all_tenants=True)
    for tenant in (acme, globex):
        for name in ("openai-prod", "demo-files", "docs-mcp", "shared-model", "nowhere"):
            alone = Connection.objects.specs_for(tenant, [name])
            among = Connection.objects.specs_for(tenant, [name, "other-missing"])
            assert alone == {key: spec for key, spec in among.items() if key == name}, (tenant.slug, name)
    assert set(Connection.objects.specs_for(acme, ["openai-prod"])) == {"openai-prod"}
    assert Connection.objects.specs_for(globex, ["openai-prod"]) == {}
    assert Connection.objects.specs_for(globex, ["shared-model"]) == {"shared-model": shared.spec}
    assert set(Connection.objects.specs_for(globex, ["scripted"])) == {"scripted"}  # built in: no query
