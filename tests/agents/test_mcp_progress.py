"""MCP progress notifications as ephemeral `tool.execution_progress` events (SPEC section 10), against the
reference server `@modelcontextprotocol/server-everything` (from the npm registry, through `npx`) as an
installation's MCP connection: its `trigger-long-running-operation` tool reports each of its steps."""

import json
import shutil
import subprocess

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from agents.definitions import DefinitionContent
from agents.engine import mcp as mcp_bridge
from agents.models import Agent, Event
from tests.agents.test_events import frames, read_stream, sse_headers
from tests.conftest import grant
from tests.helpers import call_line, run_ok

PACKAGE = "@modelcontextprotocol/server-everything"
TOOL = "trigger-long-running-operation"
STEPS = 3


@pytest.fixture(scope="module")
def everything_server() -> None:
    """The server's package in npx's cache, so that starting it in a turn does not download it (a turn waits
    15 seconds for a server to start). Skipped only when npm cannot reach its registry."""
    if shutil.which("npx") is None or shutil.which("npm") is None:
        pytest.skip("npm and npx are not installed")
    try:
        subprocess.run(["npm", "view", PACKAGE, "version"], check=True, capture_output=True, timeout=60)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"npm cannot reach its registry for {PACKAGE}: {error}")
    # With stdin closed the server starts, reads end of file and exits.
    subprocess.run(["npx", "-y", PACKAGE], stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=300)


@pytest.fixture(autouse=True)
def everything(everything_server, acme) -> None:
    """The reference server as the installation's connection `everything` (npx needs HOME for its cache)."""
    grant("everything", "mcp", acme, command="npx", args=["-y", PACKAGE], env=["HOME"])
    mcp_bridge._TOOL_LISTS.clear()
    yield
    mcp_bridge._TOOL_LISTS.clear()


@pytest.fixture
def reference(admin) -> Agent:
    content = {
        "name": "reference",
        "instructions": "You run long operations.",
        "mcpServers": [{"connection": "everything", "approval": "never"}],
    }
    return Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)


LONG_OPERATION = call_line(TOOL, {"duration": 1, "steps": STEPS})
OUTPUT = f"{TOOL}: Long running operation completed. Duration: 1 seconds, Steps: {STEPS}."


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_worker_thread_connections")
async def test_it_streams_each_progress_notification_before_the_call_completes(operator, reference):
    response = await AsyncClient().post(
        "/api/agents/reference/runs",
        json.dumps({"message": LONG_OPERATION}),
        content_type="application/json",
        headers=sse_headers(operator),
    )

    streamed = frames(await read_stream(response))

    result = streamed[-1]["data"]
    assert (result["status"], result["output"]) == ("completed", OUTPUT), result
    types = [f["event"] for f in streamed]
    [start] = [f["data"] for f in streamed if f["event"] == "tool.execution_start"]
    call_id = start["data"]["toolCallId"]
    assert call_id
    progress = [f for f in streamed if f["event"] == "tool.execution_progress"]
    assert [f["data"]["data"] for f in progress] == [
        {"toolCallId": call_id, "progressMessage": f"{step}/{STEPS}"} for step in range(1, STEPS + 1)
    ]
    assert all(f["data"]["ephemeral"] is True and "id" not in f for f in progress)
    assert all(f["data"]["runId"] == result["runId"] for f in progress)
    first, last = types.index("tool.execution_progress"), len(types) - 1 - types[::-1].index("tool.execution_progress")
    assert types.index("tool.execution_start") < first
    assert last < types.index("tool.execution_complete")
    # Streamed, never stored: the stored chain is what streamed with an id, and holds no progress.
    stored = await sync_to_async(
        lambda: list(Event.objects.filter(run_id=result["runId"]).values_list("sequence", "type"))
    )()
    assert stored == [(f["id"], f["event"]) for f in streamed if "id" in f]
    assert "tool.execution_progress" not in {t for _, t in stored}


def test_it_stores_no_progress_of_a_run_nobody_streams(operator, reference):
    result = run_ok(operator, {"message": LONG_OPERATION}, agent="reference")

    assert (result["status"], result["output"]) == ("completed", OUTPUT), result
    types = list(Event.objects.filter(run_id=result["runId"]).values_list("type", flat=True))
    assert "tool.execution_complete" in types
    assert not Event.objects.filter(type__in=["tool.execution_progress", "tool.execution_partial_result"]).exists()
