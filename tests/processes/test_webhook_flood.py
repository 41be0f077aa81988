"""Issue 26's flood, as it was found: a served console whose policy webhook answers a 40 MB verdict. The run is
`blocked` in seconds, and the console's memory (its resident set, read from /proc) ends within 10% of where it
was before the run."""

import json
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.policies.test_webhook_answers import FORTY_MB, HOOKS, TOOLS, Receiver
from tests.processes.cluster import Api, new_cluster

pytestmark = pytest.mark.processes


def resident_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    [line] = [line for line in status.splitlines() if line.startswith("VmRSS:")]
    return int(line.split()[1]) * 1024


ANSWER = {"size": 0}


@pytest.fixture
def receiver_url() -> Iterator[str]:
    """A policy webhook answering `input` with a deny of ANSWER["size"] bytes (chunked), allowing the rest."""

    def answer(handler: Receiver, context: dict[str, Any]) -> bool:
        if context["interception_point"] != "input":
            return False
        handler.oversized(ANSWER["size"], chunked=True)
        return True

    Receiver.answer = staticmethod(answer)
    Receiver.sent = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/verdict"
    finally:
        server.shutdown()
        server.server_close()
        Receiver.answer = staticmethod(lambda handler, context: None)


def test_it_blocks_a_run_whose_webhook_floods_it_and_gives_the_memory_back(tmp_path, receiver_url):
    cluster = new_cluster(tmp_path)
    try:
        connections = tmp_path / "connections.json"
        receiver = {"name": "receiver", "kind": "webhook", "url": receiver_url, "tenants": "*"}
        connections.write_text(json.dumps({"connections": [receiver]}))
        cluster.manage("load_connections", str(connections))
        token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
        console = cluster.serve()
        api = Api(console.url, token)
        api.ok("POST", "/api/agents", {"name": "guarded", "instructions": "You help.", "tools": TOOLS, "hooks": HOOKS})
        # Warm: the same path once with an answer over the limit, so what stays loaded after a first run is not
        # counted as the flood's.
        ANSWER["size"] = 1024 * 1024
        for _ in range(3):
            assert api.ok("POST", "/api/agents/guarded/runs", {"message": "hello"})["status"] == "blocked"
        before = resident_bytes(console.pid)

        ANSWER["size"] = FORTY_MB
        started = time.monotonic()
        flooded = api.ok("POST", "/api/agents/guarded/runs", {"message": "hello"})
        took = time.monotonic() - started
        time.sleep(1)  # the keeper's round and the request's clean-up
        after = resident_bytes(console.pid)

        print(f"40 MB answer: {took:.2f} s; console RSS {before / 2**20:.1f} MB before, {after / 2**20:.1f} MB after")
        assert took < 5
        assert after <= before * 1.10
        assert len(json.dumps(flooded)) < 10_000
        assert (flooded["status"], flooded["error"]["reason"]) == ("blocked", "host_error:interceptor_failed")
        assert api.ok("GET", f"/api/runs/{flooded['runId']}")["status"] == "blocked"
    finally:
        cluster.stop_all()
