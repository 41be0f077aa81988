"""A second MCP client against the gateway (SPEC section 15): the MCP Inspector's CLI, a TypeScript client (the
official TypeScript SDK) where the other gateway tests use the Python `mcp` SDK. It lists and calls tools through a
served console (`manage.py serve`, tests/processes/cluster.py) that fronts the built-in `meetings` server and the
reference server `@modelcontextprotocol/server-everything` (stdio, through npx), with its bearer token in
`--header`, as a user would point it at `/mcp/{agent}`.

The Inspector is pinned: on Node 20, npm gives the newest release whose `engines` admits it, 0.15.0, whose CLI has
no `--header` (so no token) and posts to `/mcp` at the URL's root whatever path follows; 2.x takes both and runs on
Node 20. Skipped only when npm cannot reach its registry (under CI the suite fails a skip, tests/conftest.py)."""

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.processes.cluster import Api, Cluster, manage_all, new_cluster, wait_for

# One worker takes the whole module (`--dist loadgroup`): its served console starts once, not per worker.
pytestmark = [pytest.mark.processes, pytest.mark.xdist_group("gateway-inspector")]

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
EVERYTHING = "@modelcontextprotocol/server-everything"
# The Inspector exits with this status when the tool's result has `isError` (it prints the result first).
TOOL_IS_ERROR = 5


@dataclass(frozen=True)
class Served:
    """The console, its gateways' address, and its members: otto (operator) calls tools, ada (admin) answers."""

    cluster: Cluster
    url: str
    otto_token: str
    ada: Api
    otto: Api

    def endpoint(self, agent: str) -> str:
        return f"{self.url}/mcp/{agent}"


def _npx(*args: str, timeout: float = 300, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["npx", "-y", *args], capture_output=True, text=True, timeout=timeout, **options)


@pytest.fixture(scope="module")
def packages() -> None:
    """The Inspector and the reference server in npx's cache, so that no call below waits on a download (the
    gateway gives an upstream server 30 s to start)."""
    if shutil.which("npx") is None or shutil.which("npm") is None:
        pytest.skip("npm and npx are not installed")
    for package in (INSPECTOR, EVERYTHING):
        try:
            subprocess.run(["npm", "view", package, "version"], check=True, capture_output=True, timeout=60)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            pytest.skip(f"npm cannot reach its registry for {package}: {error}")
    assert _npx(INSPECTOR, "--cli", "--help").returncode == 0
    # With stdin closed the server starts, reads end of file and exits.
    _npx(EVERYTHING, stdin=subprocess.DEVNULL, check=True)


@pytest.fixture(scope="module")
def served(packages: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("inspector")
    # npx needs HOME for its cache.
    everything = {"name": "everything", "kind": "mcp", "command": "npx", "args": ["-y", EVERYTHING], "env": ["HOME"]}
    (folder / "connections.json").write_text(json.dumps({"connections": [{**everything, "tenants": ["acme"]}]}))
    cluster = new_cluster(folder)
    *_, ada_token, otto_token = manage_all(
        cluster.env,
        ["create_user", "otto", "--tenant", "acme", "--role", "operator"],
        ["load_connections", str(folder / "connections.json")],
        ["create_token", "ada", "--tenant", "acme"],
        ["create_token", "otto", "--tenant", "acme"],
    )
    try:
        console = cluster.serve()
        ada, otto = Api(console.url, ada_token.strip()), Api(console.url, otto_token.strip())
        # Two servers: the tools are named <connection>__<tool>.
        servers = [{"connection": "meetings", "approval": "never"}, {"connection": "everything", "approval": "never"}]
        ada.ok("POST", "/api/agents", {"name": "tools", "runtime": "gateway", "mcpServers": servers})
        asking = [{"connection": "everything", "approval": "always"}]
        ada.ok("POST", "/api/agents", {"name": "asks", "runtime": "gateway", "mcpServers": asking})
        yield Served(cluster, console.url, otto_token.strip(), ada, otto)
    finally:
        cluster.stop_all()


@pytest.fixture(scope="module")
def npm_cache(packages: None) -> str:
    return subprocess.run(["npm", "config", "get", "cache"], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def home(npm_cache: str, tmp_path: Path) -> dict[str, str]:
    """The Inspector keeps files of its own under HOME (~/.mcp-inspector): a home in the test's folder, with npm's
    cache where the packages are."""
    return {"HOME": str(tmp_path), "npm_config_cache": npm_cache, "npm_config_update_notifier": "false"}


def inspector_command(url: str, token: str, *args: str) -> list[str]:
    authorization = f"Authorization: Bearer {token}"
    return ["npx", "-y", INSPECTOR, "--cli", url, "--transport", "http", "--header", authorization, *args]


def inspect(env: dict[str, str], url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = inspector_command(url, token, *args)
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def printed(done: subprocess.CompletedProcess[str]) -> Any:
    """What the Inspector printed on stdout (the method's result as JSON)."""
    assert done.stdout.strip(), f"nothing on stdout (exit {done.returncode}); stderr:\n{done.stderr}"
    return json.loads(done.stdout)


def texts(result: dict[str, Any]) -> list[str]:
    return [block["text"] for block in result["content"] if block["type"] == "text"]


def requests_of(served: Served, agent: str, status: str) -> list[dict[str, Any]]:
    return served.otto.ok("GET", f"/api/requests?status={status}&agent={agent}")["items"]  # type: ignore[no-any-return]


def tool_starts(served: Served, agent: str, tool: str) -> list[dict[str, Any]]:
    """The `tool.execution_start` events of `tool` in the runs of `agent`."""
    found: list[dict[str, Any]] = []
    for run in served.otto.ok("GET", f"/api/runs?agent={agent}")["items"]:
        events = served.otto.ok("GET", f"/api/runs/{run['runId']}/events")["items"]
        found += [e for e in events if e["type"] == "tool.execution_start" and e["data"]["toolName"] == tool]
    return found


def test_it_lists_the_fronted_servers_tools_under_the_gateways_names(served, home):
    done = inspect(home, served.endpoint("tools"), served.otto_token, "--method", "tools/list")

    assert done.returncode == 0, done.stderr
    tools = {tool["name"]: tool for tool in printed(done)["tools"]}
    assert {"meetings__ping", "meetings__book_meeting", "everything__echo", "everything__get-sum"} <= set(tools)
    assert all(name.startswith(("meetings__", "everything__")) for name in tools), sorted(tools)
    assert tools["everything__echo"]["inputSchema"]["required"] == ["message"]
    assert tools["meetings__book_meeting"]["inputSchema"]["properties"]["topic"]["type"] == "string"


def test_it_calls_a_tool_that_needs_no_approval_with_the_arguments_given(served, home):
    done = inspect(
        home,
        served.endpoint("tools"),
        served.otto_token,
        *("--method", "tools/call", "--tool-name", "everything__get-sum", "--tool-arg", "a=2", "b=3"),
    )

    assert done.returncode == 0, done.stderr
    result = printed(done)
    assert texts(result) == ["The sum of 2 and 3 is 5."]
    assert not result.get("isError")
    # Nobody was asked (no request); the call is recorded in the MCP session's run, with the numbers the Inspector
    # read from the tool's schema. The run is written after the client has its result.
    assert requests_of(served, "tools", "pending") == requests_of(served, "tools", "answered") == []
    started = wait_for(lambda: tool_starts(served, "tools", "everything__get-sum"), "the call's run", 20)
    assert [event["data"]["arguments"] for event in started] == [{"a": 2, "b": 3}]


def test_it_calls_the_built_in_servers_tool(served, home):
    done = inspect(
        home, served.endpoint("tools"), served.otto_token, "--method", "tools/call", "--tool-name", "meetings__ping"
    )

    assert done.returncode == 0, done.stderr
    assert texts(printed(done)) == ["pong"]


def test_it_waits_for_an_approval_then_returns_the_result_of_the_edited_call(served, home):
    command = inspector_command(
        served.endpoint("asks"),
        served.otto_token,
        *("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=from the agent"),
    )
    calling = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **home}
    )
    try:
        [pending] = wait_for(lambda: requests_of(served, "asks", "pending"), "the call's request in the inbox", 60)
        assert (pending["toolName"], pending["arguments"]) == ("echo", {"message": "from the agent"})
        time.sleep(1)
        assert calling.poll() is None, "the Inspector's call returned before anyone decided"

        edited = {"approved": True, "overrideArguments": {"message": "as approved"}}
        served.ada.ok("POST", f"/api/requests/{pending['requestId']}/responses", edited)
        stdout, stderr = calling.communicate(timeout=60)
    finally:
        if calling.poll() is None:
            calling.kill()
            calling.communicate()

    assert calling.returncode == 0, stderr
    result = json.loads(stdout)
    assert texts(result) == ["Echo: as approved"]
    assert not result.get("isError")


def test_it_returns_a_denial_as_a_tool_error_with_the_reason(served, home):
    command = inspector_command(
        served.endpoint("asks"),
        served.otto_token,
        *("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=please"),
    )
    calling = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **home}
    )
    try:
        [pending] = wait_for(lambda: requests_of(served, "asks", "pending"), "the call's request in the inbox", 60)
        denial = {"approved": False, "reason": "Not on a Friday."}
        served.ada.ok("POST", f"/api/requests/{pending['requestId']}/responses", denial)
        stdout, stderr = calling.communicate(timeout=60)
    finally:
        if calling.poll() is None:
            calling.kill()
            calling.communicate()

    assert calling.returncode == TOOL_IS_ERROR, stderr
    result = json.loads(stdout)
    assert result["isError"] is True
    [words] = texts(result)
    assert words.startswith("Denied by ada in Airlock: the call was not run.")
    assert "Not on a Friday." in words


def test_it_shows_the_inspector_the_refusal_of_a_bad_token(served, home):
    # --stored-auth-only: on a 401 the Inspector would otherwise start an interactive OAuth login.
    done = inspect(home, served.endpoint("tools"), "al_not_a_token", "--stored-auth-only", "--method", "tools/list")

    assert done.returncode != 0
    assert not done.stdout.strip()
    error = json.loads(done.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "auth_required"
    assert "An Airlock API token is needed: Authorization: Bearer <token>." in error["message"]


def test_it_shows_the_inspector_that_no_gateway_has_that_name(served, home):
    done = inspect(home, served.endpoint("nobody"), served.otto_token, "--stored-auth-only", "--method", "tools/list")

    assert done.returncode != 0
    error = json.loads(done.stderr.strip().splitlines()[-1])["error"]
    assert error["status"] == 404
    assert "No MCP gateway named 'nobody' in this tenant." in error["message"]
