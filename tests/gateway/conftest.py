"""What the gateway's tests share: a served console (a tests/processes/cluster.py installation: daphne through
`manage.py serve`) whose tenant acme has the installation's MCP connections `web` (tests/gateway/http_upstream.py
over Streamable HTTP) and `everything` (`@modelcontextprotocol/server-everything` over stdio through npx) besides
the built-in `meetings`, and the tokens of its members: ada (admin, who calls the tools), otto (operator, who
answers) and gil (admin of another tenant, globex, which has `web` too). The tests talk to it over HTTP only, with
the `mcp` SDK's own client."""

import asyncio
import json
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.processes.cluster import PYTHON, ROOT, Api, Cluster, free_port, manage_all, new_cluster

EVERYTHING = "@modelcontextprotocol/server-everything"


@dataclass(frozen=True)
class Installation:
    """The served console and its members' API clients (`ada` calls tools, `otto` answers, `gil` is globex's)."""

    cluster: Cluster
    url: str
    ada: Api
    otto: Api
    gil: Api

    def gateway(self, name: str, *servers: dict[str, Any], **fields: Any) -> str:
        """Create the gateway agent `name` of acme over `servers` (ada, through the API); its MCP endpoint."""
        definition = {"name": name, "runtime": "gateway", "mcpServers": list(servers), **fields}
        self.ada.ok("POST", "/api/agents", definition)
        return f"{self.url}/mcp/{name}"

    async def api(self, who: Api, method: str, path: str, body: Any = None) -> Any:
        """`who`'s JSON API call off the event loop (the MCP client's tasks go on meanwhile); its payload (2xx)."""
        return await asyncio.to_thread(who.ok, method, path, body)

    async def pending(self, agent: str, timeout: float = 20) -> dict[str, Any]:
        """The one request of `agent` waiting in acme's inbox, once it is there."""
        deadline = time.monotonic() + timeout
        while True:
            items = (await self.api(self.otto, "GET", f"/api/requests?status=pending&agent={agent}"))["items"]
            if items:
                assert len(items) == 1, items
                return items[0]  # type: ignore[no-any-return]
            if time.monotonic() > deadline:
                raise AssertionError(f"no request of {agent} opened in {timeout} s")
            await asyncio.sleep(0.1)

    async def completed_calls(self, agent: str, count: int = 1, timeout: float = 10) -> list[dict[str, Any]]:
        """The `tool.execution_complete` events of `agent`'s runs, once there are `count` (a call that asked nobody
        is recorded after its client has the result)."""
        deadline = time.monotonic() + timeout
        while True:
            found = []
            for run in (await self.api(self.otto, "GET", f"/api/runs?agent={agent}"))["items"]:
                stored = (await self.api(self.otto, "GET", f"/api/runs/{run['runId']}/events"))["items"]
                found += [event["data"] for event in stored if event["type"] == "tool.execution_complete"]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(found)} call(s) of {agent} recorded in {timeout} s, not {count}")
            await asyncio.sleep(0.2)

    async def requests(self, agent: str) -> list[dict[str, Any]]:
        """Every request of `agent`, whatever its status."""
        found: list[dict[str, Any]] = []
        for status in ("pending", "answered", "expired", "cancelled", "abandoned"):
            found += (await self.api(self.otto, "GET", f"/api/requests?status={status}&agent={agent}"))["items"]
        return found


@asynccontextmanager
async def mcp_client(url: str, token: str, mode: str = "legacy", **options: Any) -> AsyncIterator[Client]:
    """The `mcp` SDK's client of the gateway at `url`, authenticated with `token` (Authorization: Bearer)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client:
        yield client


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def web_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """tests/gateway/http_upstream.py serving on a loopback port of its own; its MCP URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("upstream") / "upstream.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [PYTHON, "-m", "tests.gateway.http_upstream", str(port)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the upstream server did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="module")
def everything_server() -> None:
    """The reference server's package in npx's cache, so that the gateway's first call does not download it (an
    upstream has 30 s to start). Skipped only when npm cannot reach its registry, as in test_mcp_progress.py."""
    if shutil.which("npx") is None or shutil.which("npm") is None:
        pytest.skip("npm and npx are not installed")
    try:
        subprocess.run(["npm", "view", EVERYTHING, "version"], check=True, capture_output=True, timeout=60)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"npm cannot reach its registry for {EVERYTHING}: {error}")
    # With stdin closed the server starts, reads end of file and exits.
    subprocess.run(["npx", "-y", EVERYTHING], stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=300)


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory, web_upstream: str) -> Iterator[Installation]:
    folder = tmp_path_factory.mktemp("gateway")
    connections = {
        "connections": [
            {"name": "web", "kind": "mcp", "url": web_upstream, "tenants": ["acme", "globex"]},
            # npx needs HOME for its cache.
            {
                "name": "everything",
                "kind": "mcp",
                "command": "npx",
                "args": ["-y", EVERYTHING],
                "env": ["HOME"],
                "tenants": ["acme"],
            },
        ]
    }
    (folder / "connections.json").write_text(json.dumps(connections))
    cluster = new_cluster(folder)
    *_, ada, otto, gil = manage_all(  # the last three print the tokens
        cluster.env,
        ["create_tenant", "globex", "--name", "Globex"],
        ["create_user", "otto", "--tenant", "acme", "--role", "operator"],
        ["create_user", "gil", "--tenant", "globex", "--role", "admin"],
        ["load_connections", str(folder / "connections.json")],
        ["create_token", "ada", "--tenant", "acme"],
        ["create_token", "otto", "--tenant", "acme"],
        ["create_token", "gil", "--tenant", "globex"],
    )
    try:
        console = cluster.serve()
        yield Installation(cluster, console.url, *(Api(console.url, token.strip()) for token in (ada, otto, gil)))
    finally:
        cluster.stop_all()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test shows the end of the console's log: what the gateway did is half the story."""
    report = yield
    served = getattr(item, "funcargs", {}).get("installation")
    if report.failed and isinstance(served, Installation):
        lines = (Path(served.cluster.folder) / "daphne.log").read_text(errors="replace").splitlines()
        report.sections.append(("console log, last 60 lines", "\n".join(lines[-60:])))
    return report
