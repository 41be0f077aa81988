"""A gateway's passed calls are recorded together, in its quiet moments after their clients have the results
(`gateway.writes.Recorder`: half a second to two seconds later); a console stopped meanwhile (SIGTERM, as a deploy
stops it) writes them before it exits (`console.periodic.stopping`), so no auto-approved call goes missing from its
session."""

import asyncio
import time

import pytest

from tests.gateway.conftest import mcp_client
from tests.processes.cluster import Api, manage_all, new_cluster

pytestmark = pytest.mark.processes


def test_it_writes_the_calls_still_gathering_when_the_console_stops(tmp_path):
    cluster = new_cluster(tmp_path)
    [token] = manage_all(cluster.env, ["create_token", "ada", "--tenant", "acme"])
    try:
        console = cluster.serve()
        ada = Api(console.url, token.strip())
        ada.ok(
            "POST",
            "/api/agents",
            {"name": "desk", "runtime": "gateway", "mcpServers": [{"connection": "meetings", "approval": "never"}]},
        )

        async def call_three() -> None:
            async with mcp_client(f"{console.url}/mcp/desk", token.strip()) as client:
                for _ in range(3):
                    result = await asyncio.wait_for(client.call_tool("ping", {}), 20)
                    assert not result.is_error

        asyncio.run(call_three())
        stopped = time.monotonic()
        cluster.stop(console)  # within the half second the calls gather in
        assert console.popen.returncode is not None and time.monotonic() - stopped < 10, console.output()

        again = Api(cluster.serve("again").url, token.strip())
        runs = again.ok("GET", "/api/runs?agent=desk")["items"]
        assert len(runs) == 3, console.output()
        assert {run["status"] for run in runs} == {"completed"}
    finally:
        cluster.stop_all()
