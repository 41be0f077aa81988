"""docs/mcp-gateway.md stays true (issue 52, item 5): its JSON parses, its definition is a valid gateway, its
connections file loads, every client configuration names the real endpoint, the limits and intervals it states are
the code's, and its Python client runs as written against a served console."""

import json
import re
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from agents.definitions import DefinitionContent
from approvals.external_wire import ARGUMENTS_LIMIT
from console.models import Connection, Tenant
from gateway import calls, server
from tests.processes.cluster import PASSWORD, PYTHON, ROOT, Api, Cluster, manage_all, new_cluster, wait_for

DOC = (ROOT / "docs" / "mcp-gateway.md").read_text()
BLOCK = re.compile(r"```(?P<lang>[a-z]*)\n(?P<code>.*?)^```$", re.S | re.M)
ADDRESS = "http://127.0.0.1:8000/mcp/dev-tools"


def blocks(lang: str) -> list[str]:
    return [found["code"] for found in BLOCK.finditer(DOC) if found["lang"] == lang]


def json_block(key: str) -> dict[str, Any]:
    """The page's one JSON block with the top-level `key` (`runtime`: the definition)."""
    found = [parsed for parsed in map(json.loads, blocks("json")) if key in parsed]
    assert len(found) == 1, f"the page should have one JSON block with {key!r}, found {len(found)}"
    return found[0]


def test_it_parses_every_json_block():
    found = blocks("json")
    assert len(found) == 4, "the connections file, the definition, VS Code's and Cursor's configuration"
    for code in found:
        json.loads(code)


def test_its_definition_is_a_gateway_with_the_settings_the_page_describes():
    content = DefinitionContent.model_validate(json_block("runtime"))
    assert content.gateway and content.name == "dev-tools"
    meetings, github = content.mcp_servers
    # A gateway asks unless told otherwise; a tool's own settings win over its server's.
    assert meetings.approval_of("ping") == "always"
    assert github.approval_of("get_file_contents") == "never"
    assert github.approval_of("create_pull_request") == "always"
    assert content.exposed_name(meetings, "ping") == "meetings__ping"
    assert content.fronting("github__merge_pull_request") == (github, "merge_pull_request")
    assert content.approvers_for("approval", "github__merge_pull_request") == "sre,security"
    assert content.approvers_for("approval", "github__search_code") == "sre"


def test_it_names_in_its_prose_the_tools_the_definition_exposes():
    content = DefinitionContent.model_validate(json_block("runtime"))
    exposed = {content.exposed_name(s, tool) for s in content.mcp_servers for tool in [*s.tools, "ping"]}
    named = set(re.findall(r"`((?:meetings|github)__\w+)`", DOC))
    assert named, "the page names no exposed tool"
    assert named <= exposed, f"the page names tools the definition does not expose: {sorted(named - exposed)}"


@pytest.mark.django_db
def test_its_connections_file_loads_and_grants_what_the_definition_names(tmp_path):
    demo = Tenant.objects.create(slug="demo", name="Demo")
    path = tmp_path / "connections.json"
    path.write_text(json.dumps(json_block("connections")))
    command = next(line for line in blocks("sh") if "load_connections" in line)
    assert "manage.py load_connections connections.json" in command
    call_command("load_connections", str(path))
    github = Connection.objects.get(name="github").spec
    assert (github.kind, github.command, github.env) == ("mcp", "npx", ("GITHUB_PERSONAL_ACCESS_TOKEN",))
    assert Connection.objects.get(name="docs-search").spec.url == "https://mcp.example.com/mcp"
    content = DefinitionContent.model_validate(json_block("runtime"))
    assert content.connection_problems(Connection.objects.specs_for(demo)) is None


def test_every_client_configuration_names_the_gateways_endpoint():
    name = json_block("runtime")["name"]
    assert ADDRESS.endswith(f"/mcp/{name}") and server.PATH.match(f"/mcp/{name}")
    claude = [line for line in blocks("sh") if line.startswith("claude mcp add")]
    assert len(claude) == 1
    header = '--header "Authorization: Bearer $AIRLOCK_TOKEN"'
    assert claude[0] == f"claude mcp add --transport http airlock {ADDRESS} {header}\n"
    vscode = json_block("servers")["servers"]["airlock"]
    assert vscode["type"] == "http" and vscode["url"] == ADDRESS
    assert vscode["headers"] == {"Authorization": "Bearer ${input:airlock-token}"}
    cursor = next(p for p in map(json.loads, blocks("json")) if "airlock" in p.get("mcpServers", {}))
    assert cursor["mcpServers"]["airlock"] == {
        "url": ADDRESS,
        "headers": {"Authorization": "Bearer ${env:AIRLOCK_TOKEN}"},
    }
    (python,) = blocks("python")
    assert "/mcp/dev-tools" in python and "Authorization" in python


def test_the_limits_and_intervals_it_states_are_the_codes():
    stated = {
        "arguments' bytes": f"over {ARGUMENTS_LIMIT.size} bytes as compact JSON",
        "arguments' keys and items": f"more than {ARGUMENTS_LIMIT.nodes} keys and items",
        "arguments' depth": f"nested deeper than {ARGUMENTS_LIMIT.depth} levels",
        "an HTTP body": f"an HTTP body over {server.MAX_MESSAGE_BYTES} bytes",
        "progress": f"every {calls.PROGRESS_SECONDS:g} seconds a `notifications/progress`",
        "a gate kept": f"at most every {server.GATE_SECONDS:g} seconds",
    }
    # The page's lines wrap anywhere a space is.
    missing = [what for what, words in stated.items() if not re.search(r"\s+".join(map(re.escape, words.split())), DOC)]
    assert not missing, f"the page does not state the code's limits for: {missing}"


def test_it_names_only_files_the_repository_has():
    named = set(re.findall(r"\b(?:docs|tests|agents|approvals|console|gateway)/[\w./-]+\.(?:py|md)\b", DOC))
    assert named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/mcp-gateway.md names files the repository does not have: {missing}"


# The Python client, run as written against a served console.


class Answerer:
    """The reader's colleague at the inbox: answers (as otto, of group sre) the first request of the gateway."""

    def __init__(self, url: str, token: str, answer: dict[str, Any]) -> None:
        self.api, self.answer = Api(url, token), answer
        self.answered: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        def waiting() -> list[dict[str, Any]]:
            return self.api.ok("GET", "/api/requests?agent=dev-tools")["items"]

        (request, *_) = wait_for(waiting, "the client's call to wait in the inbox", timeout=60, every=0.2)
        self.api.ok("POST", f"/api/requests/{request['requestId']}/responses", self.answer)
        self.answered.append(request["toolName"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str, dict[str, str]]]:
    """A console with the page's gateway: its definition as written, over `meetings` and a `github` connection.
    This machine has no network or npx, so `github` is the demo server (stdio) under that name: the page's
    client calls only `meetings__ping`."""
    folder = Path(tmp_path_factory.mktemp("gateway-docs"))
    cluster = new_cluster(folder)
    github = {
        "name": "github",
        "kind": "mcp",
        "command": PYTHON,
        "args": ["-m", "agents.mcp_demo"],
        "tenants": ["acme"],
    }
    (folder / "connections.json").write_text(json.dumps({"connections": [github]}))
    outputs = manage_all(
        cluster.env,
        ["load_connections", str(folder / "connections.json")],
        ["create_user", "otto", "--tenant", "acme", "--role", "operator", "--password", PASSWORD],
        ["create_group", "sre", "--tenant", "acme", "--member", "otto"],
        ["create_group", "security", "--tenant", "acme", "--member", "ada"],
        ["create_group", "sre-leads", "--tenant", "acme"],
        ["create_token", "ada", "--tenant", "acme"],
        ["create_token", "otto", "--tenant", "acme"],
        ["create_user", "rita", "--tenant", "acme", "--role", "reader", "--password", PASSWORD],
        ["create_token", "rita", "--tenant", "acme"],
    )
    tokens = {"ada": outputs[-4].strip(), "otto": outputs[-3].strip(), "rita": outputs[-1].strip()}
    try:
        console = cluster.serve("daphne")
        Api(console.url, tokens["ada"]).ok("POST", "/api/agents", json_block("runtime"))
        yield cluster, console.url, tokens
    finally:
        cluster.stop_all()


def run_client(url: str, token: str, folder: Path) -> subprocess.CompletedProcess[str]:
    (python,) = blocks("python")
    script = folder / "client.py"
    script.write_text(python)
    env = {"PATH": "/usr/bin:/bin", "AIRLOCK_URL": url, "AIRLOCK_TOKEN": token}
    return subprocess.run([PYTHON, str(script)], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.processes
@pytest.mark.xdist_group("gateway-docs")  # the served console starts once (`--dist loadgroup`)
@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"approved": True}, "False pong"),
        (
            {"approved": False, "reason": "not on a Friday"},
            "True Denied by otto in Airlock: the call was not run. Their reason: not on a Friday",
        ),
    ],
)
def test_its_python_client_waits_for_the_inbox_and_prints_the_decision(served, tmp_path, answer, said):
    _, url, tokens = served
    answerer = Answerer(url, tokens["otto"], answer)
    answerer.thread.start()
    done = run_client(url, tokens["ada"], tmp_path)
    answerer.thread.join(10)
    assert done.returncode == 0, f"the page's client failed:\n{done.stdout}\n{done.stderr}"
    listed, result = done.stdout.strip().splitlines()
    assert json.loads(listed.replace("'", '"')) == [
        "meetings__book_meeting",
        "meetings__ping",
        "github__book_meeting",
        "github__ping",
    ]
    assert answerer.answered == ["meetings__ping"]
    assert result == said


def post(url: str, token: str | None, body: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


@pytest.mark.processes
@pytest.mark.xdist_group("gateway-docs")
def test_its_http_refusals_are_the_gateways(served):
    _, url, tokens = served
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    status, headers, problem = post(f"{url}/mcp/dev-tools", None, listing)
    assert (status, headers["WWW-Authenticate"]) == (401, 'Bearer realm="airlock"')
    assert post(f"{url}/mcp/dev-tools", tokens["rita"], listing)[0] == 403
    assert post(f"{url}/mcp/no-such-gateway", tokens["ada"], listing)[0] == 404
    oversized = b'{"padding": "' + b"x" * server.MAX_MESSAGE_BYTES + b'"}'
    status, _, problem = post(f"{url}/mcp/dev-tools", tokens["ada"], oversized)
    assert (status, problem["code"]) == (413, "content_too_large")
    assert problem["detail"] in DOC, "the page quotes the refusal of an oversized message"
