"""The scale-out shape (SPEC section 7) with real processes on this machine's PostgreSQL and Redis: two
console processes, two worker processes. An approval opened by a run on worker 1 reaches an inbox
connected to console 2; answering there continues the run on worker 2."""

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from websockets.sync.client import connect

from tests.processes.cluster import Api, Cluster, login, new_cluster, scratch_database, wait_for

pytestmark = pytest.mark.processes

ADMIN_URL = os.environ.get("AIRLOCK_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("AIRLOCK_TEST_REDIS", "redis://127.0.0.1:6379/5")
EMAIL = {"to": "ada@example.com", "subject": "Hi", "body": "Ship it."}


def _reachable() -> str | None:
    try:
        psycopg.connect(ADMIN_URL, connect_timeout=3).close()
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as error:
        return str(error)
    return None


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh PostgreSQL database of its own, dropped afterwards."""
    problem = _reachable()
    if problem is not None:
        pytest.skip(f"PostgreSQL and Redis are needed: {problem}")  # a failure under CI (tests/conftest.py)
    with scratch_database("airlock_scaleout") as url:
        yield url


@pytest.fixture
def cluster(tmp_path: Path, database: str) -> Iterator[Cluster]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    cluster = new_cluster(tmp_path, DATABASE_URL=database, REDIS_URL=REDIS_URL)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def inbox_messages(url: str) -> Any:
    """A websocket to console `url`'s inbox, as the logged-in admin's browser opens it."""
    cookies = login(url).cookies  # type: ignore[attr-defined]
    headers = {"Cookie": f"sessionid={cookies['sessionid']}", "Origin": url}
    return connect(url.replace("http", "ws") + "/ws/console/", additional_headers=headers, open_timeout=10)


def receive_until(socket: Any, wanted: str, timeout: float = 30) -> dict[str, Any]:
    def next_wanted() -> dict[str, Any] | None:
        message = json.loads(socket.recv(timeout=timeout))
        return message if message["type"] == wanted else None

    return wait_for(next_wanted, f"a {wanted} push", timeout, every=0)


def test_an_approval_opened_on_worker_1_is_answered_through_console_2_and_runs_on_worker_2(cluster):
    token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
    console_1, console_2 = cluster.serve("daphne-1"), cluster.serve("daphne-2")
    api_1, api_2 = Api(console_1.url, token), Api(console_2.url, token)
    api_1.ok(
        "POST",
        "/api/agents",
        {"name": "assistant", "instructions": "You help.", "tools": [{"name": "send_email", "approval": "always"}]},
    )
    worker_1 = cluster.worker("worker-1", "--threads", "2")

    with inbox_messages(console_2.url) as inbox:
        assert json.loads(inbox.recv(timeout=10))["type"] == "heartbeat"
        # Idle longer than channels_redis's blocking receive (5 s): the console must stay connected.
        time.sleep(7)
        message = f"call send_email {json.dumps(EMAIL)}"
        asked_id = api_1.ok(
            "POST", "/api/agents/assistant/runs", {"message": message, "sessionId": "scale"}, Prefer="respond-async"
        )["runId"]

        opened = receive_until(inbox, "requests_opened")
        asked = api_1.ok("GET", f"/api/runs/{asked_id}")
        [request] = asked["pendingRequests"]
        assert opened["ids"] == [request["requestId"]]
        assert request["requestId"] in opened["html"]

        # Worker 1 leaves; worker 2 is the only one left to run the continuation.
        worker_2 = cluster.worker("worker-2", "--threads", "2")
        cluster.stop(worker_1)
        outcome = api_2.ok(
            "POST", f"/api/runs/{asked_id}/responses", {"requestId": request["requestId"], "approved": True}
        )
        assert outcome["status"] == "accepted"
        closed = receive_until(inbox, "requests_closed")
        assert closed["ids"] == [request["requestId"]]

    done = api_1.run_until(outcome["continuationRunId"], lambda r: r["status"] not in ("queued", "running"))
    assert (done["status"], done["output"]) == ("completed", f"send_email: sent to {EMAIL['to']}"), done
    with psycopg.connect(cluster.env["DATABASE_URL"]) as db:
        workers = dict(db.execute("SELECT id::text, worker_id FROM agents_run").fetchall())
    assert workers[asked_id].split(":")[1] == str(worker_1.pid)
    assert workers[outcome["continuationRunId"]].split(":")[1] == str(worker_2.pid)
