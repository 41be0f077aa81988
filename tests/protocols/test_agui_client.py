"""The npm AG-UI client against a real Airlock (SPEC section 16, issue 53): `@ag-ui/client`'s HttpAgent runs the
assistant until it asks for an approval (an interrupt), then resumes the interrupt, from node
(tests/protocols/agui_client/run.cjs).

The client is installed from the npm registry into `.tools/agui-client` (gitignored) the first time; without npm or
its registry the test is skipped, which tests/conftest.py turns into a failure under CI."""

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ASSISTANT, EMAIL
from tests.processes.cluster import ROOT, new_cluster

pytestmark = pytest.mark.processes

HERE = Path(__file__).parent / "agui_client"
INSTALLED = ROOT / ".tools" / "agui-client"


def install() -> Path:
    """The folder whose node_modules hold the client at the version of agui_client/package.json."""
    wanted = json.loads((HERE / "package.json").read_text())["dependencies"]["@ag-ui/client"]
    installed = INSTALLED / "node_modules" / "@ag-ui" / "client" / "package.json"
    if installed.exists() and json.loads(installed.read_text())["version"] == wanted:
        return INSTALLED
    INSTALLED.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "package.json", INSTALLED / "package.json")
    try:
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent"],
            cwd=INSTALLED,
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        pytest.skip(f"npm cannot install @ag-ui/client@{wanted}: {detail.strip()[-500:]}")
    return INSTALLED


def post_json(url: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        json.dumps(body).encode(),
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_it_drives_a_run_an_interrupt_and_a_resume_with_the_npm_client(tmp_path):
    folder = install()
    cluster = new_cluster(tmp_path / "data")
    try:
        token = cluster.manage("create_token", "ada", "--tenant", "acme").strip().splitlines()[-1]
        console = cluster.serve(WORKER_THREADS="2")  # the continuation a resume queues runs on these
        post_json(f"{console.url}/api/agents", token, ASSISTANT)

        env = {
            **os.environ,
            "NODE_PATH": str(folder / "node_modules"),
            "AIRLOCK_AGUI_URL": f"{console.url}/api/agents/assistant/ag-ui",
            "AIRLOCK_TOKEN": token,
            "AIRLOCK_THREAD": "node-thread",
        }
        ran = subprocess.run(
            ["node", str(HERE / "run.cjs")], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert ran.returncode == 0, ran.stderr
        seen = json.loads(ran.stdout.strip().splitlines()[-1])
    finally:
        cluster.stop_all()

    assert seen["first"][0] == "RUN_STARTED" and seen["first"][-1] == "RUN_FINISHED"
    assert [t for t in seen["first"] if t.startswith("TOOL")] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    (interrupt,) = seen["interrupts"]
    assert (interrupt["reason"], interrupt["required"]) == ("tool_approval", ["approved"])
    assert seen["second"][0] == "RUN_STARTED" and seen["second"][-1] == "RUN_FINISHED"
    assert "TOOL_CALL_RESULT" in seen["second"] and "TEXT_MESSAGE_CONTENT" in seen["second"]
    assert seen["pendingAfter"] == 0
    # The client's conversation: the request, the call (with its arguments), its result, the model's reply.
    roles = [m["role"] for m in seen["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"], seen["messages"]
    call = seen["messages"][1]["toolCalls"][0]
    assert (call["id"], json.loads(call["function"]["arguments"])) == (interrupt["toolCallId"], EMAIL)
    assert seen["messages"][-1]["content"].startswith("send_email: ")
