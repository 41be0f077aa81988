"""Long polls across console processes (SPEC section 12, "Wait for the answer"): two daphnes on one PostgreSQL
database and the Redis channel layer. An external agent waits on console A (`GET /api/requests/{id}?wait=N`);
the request is answered, or cancelled, through console B, and the waiter on A hears of it over the layer."""

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.processes.cluster import Api, Cluster, manage_all, new_cluster, scratch_database, unreachable, wait_for

# One worker runs every test of this module (`--dist loadgroup`): each flushes its Redis DB as it starts, which
# would drop the groups and messages of one running beside it on another worker (a waiter never woken).
pytestmark = [pytest.mark.processes, pytest.mark.xdist_group("long-poll-cluster-redis-6")]

# Its own Redis DB (test_scaleout flushes 5, the benchmarks use 7 and 8).
REDIS_URL = os.environ.get("AIRLOCK_TEST_REDIS_LONG_POLL", "redis://127.0.0.1:6379/6")
DEPLOY = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {
        "type": "object",
        "properties": {"service": {"type": "string"}},
        "required": ["service"],
        "additionalProperties": False,
    },
}
# How much later than the answer's response the poll's may come.
WAKE_SECONDS = 1.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    problem = unreachable(REDIS_URL)
    if problem is not None:
        pytest.skip(f"PostgreSQL and Redis are needed: {problem}")  # a failure under CI (tests/conftest.py)
    redis.Redis.from_url(REDIS_URL).flushdb()
    with scratch_database("airlock_long_poll") as database:
        cluster = new_cluster(tmp_path, DATABASE_URL=database, REDIS_URL=REDIS_URL)
        try:
            yield cluster
        finally:
            cluster.stop_all()


@pytest.fixture
def consoles(cluster: Cluster) -> tuple[Api, Api, Api]:
    """(the agent on console A, the agent on console B, the admin on console B): the agent is an operator's
    token, the admin answers."""
    _, agent_token, admin_token = manage_all(
        cluster.env,
        ["create_user", "ci", "--tenant", "acme", "--role", "operator", "--password", "ci-password-7f3a"],
        ["create_token", "ci", "--tenant", "acme"],
        ["create_token", "ada", "--tenant", "acme"],
    )
    console_a, console_b = cluster.serve("daphne-a"), cluster.serve("daphne-b")
    admin_b = Api(console_b.url, admin_token.strip())
    admin_b.ok("POST", "/api/agents", {"name": "deployer", "runtime": "external", "tools": [DEPLOY]})
    return Api(console_a.url, agent_token.strip()), Api(console_b.url, agent_token.strip()), admin_b


class Poll(threading.Thread):
    """`GET /api/requests/{id}?wait=N` on its own thread; `answered_at` is the monotonic time its response came."""

    def __init__(self, api: Api, request_id: str, seconds: int) -> None:
        super().__init__(daemon=True)
        self.api, self.path = api, f"/api/requests/{request_id}?wait={seconds}"
        self.started_at = self.answered_at = 0.0
        self.status = 0
        self.body: Any = None

    def run(self) -> None:
        self.started_at = time.monotonic()
        self.status, self.body = self.api("GET", self.path)
        self.answered_at = time.monotonic()

    def result(self, timeout: float = 60) -> tuple[int, Any]:
        self.join(timeout)
        assert not self.is_alive(), f"{self.path} did not come back within {timeout} s"
        return self.status, self.body


def open_request(agent: Api) -> str:
    opened = agent.ok("POST", "/api/agents/deployer/requests", {"toolName": "deploy", "arguments": {"service": "x"}})
    assert opened["status"] == "pending", opened
    return opened["requestId"]


def held(request_id: str) -> None:
    """Wait until a waiter of `request_id` listens on the layer (channels_redis's group key), then a little longer
    so its first look at the request (which said to wait) is over."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        wait_for(lambda: client.zcard(f"asgi:group:request.{request_id}"), f"a waiter of {request_id}", timeout=20)
    finally:
        client.close()
    time.sleep(0.5)


def test_an_answer_on_console_b_wakes_the_agent_waiting_on_console_a(consoles):
    agent_a, _, admin_b = consoles
    rid = open_request(agent_a)
    poll = Poll(agent_a, rid, 30)
    poll.start()
    held(rid)
    assert poll.is_alive(), poll.body

    outcome = admin_b.ok("POST", f"/api/requests/{rid}/responses", {"approved": True, "reason": "go"})
    answered_at = time.monotonic()
    assert outcome["status"] == "accepted", outcome

    status, body = poll.result()
    assert status == 200, body
    # Decided: the answer is stored. `status` turns "answered" once a worker's continuation carries it (none
    # runs here), so the agent reads `decision` (SPEC section 12: "once decided, `decision`").
    assert body["answered"] is True and body["status"] in ("pending", "answered"), body
    assert body["decision"]["result"] == {"kind": "approved"}, body
    assert body["decision"]["approved"] is True and body["decision"]["text"] == "go", body
    assert body["decision"]["answeredBy"] == "ada"
    late = poll.answered_at - answered_at
    print(f"woken {late * 1000:.0f} ms after the answer's response")  # shown with -s
    assert late < WAKE_SECONDS, f"the poll came back {late:.3f} s after the answer"


def test_a_short_wait_on_an_open_request_comes_back_pending_when_its_time_is_up(consoles):
    agent_a, _, _ = consoles
    rid = open_request(agent_a)
    poll = Poll(agent_a, rid, 2)
    poll.start()
    status, body = poll.result(20)
    took = poll.answered_at - poll.started_at
    assert status == 200, body
    assert (body["status"], body["decision"]) == ("pending", None), body
    print(f"wait=2 came back after {took:.2f} s")  # shown with -s
    assert 1.9 <= took < 3.5, f"wait=2 came back after {took:.2f} s"


def test_a_cancel_on_console_b_wakes_the_agent_waiting_on_console_a(consoles):
    agent_a, agent_b, _ = consoles
    rid = open_request(agent_a)
    poll = Poll(agent_a, rid, 30)
    poll.start()
    held(rid)
    assert poll.is_alive(), poll.body

    cancelled = agent_b.ok("DELETE", f"/api/requests/{rid}")
    cancelled_at = time.monotonic()
    assert cancelled["status"] == "cancelled", cancelled

    status, body = poll.result()
    assert status == 200, body
    assert body["status"] == "cancelled", body
    assert body["decision"]["result"] == {"kind": "cancelled", "reason": "cancelled"}, body
    late = poll.answered_at - cancelled_at
    print(f"woken {late * 1000:.0f} ms after the cancel's response")  # shown with -s
    assert late < WAKE_SECONDS, f"the poll came back {late:.3f} s after the cancel"
