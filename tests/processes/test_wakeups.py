"""Workers woken, not polling (issue 32 item 3), with real processes on this machine's PostgreSQL: a run
queued through one console process is taken at once by a worker process whose poll is 30 s, by the
NOTIFY its task's trigger sends; a run that waits for its lane's room is taken by another worker process
once the run ahead ends (the trigger on a task's end).
Without the wake-ups (`WORKER_WAKEUPS=0`) the same worker leaves the run queued until its poll."""

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.processes.cluster import Api, Cluster, new_cluster, scratch_database, unreachable

pytestmark = pytest.mark.processes

POLL = "30"  # far longer than any wait below: a run taken sooner was woken
KEY_ENV = "AIRLOCK_TEST_WAKEUPS_KEY"
CLOCK = {"name": "clock", "tools": [{"name": "get_time", "approval": "never"}]}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    problem = unreachable("redis://127.0.0.1:6379/0")
    if problem is not None:
        pytest.skip(f"PostgreSQL is needed: {problem}")  # a failure under CI (tests/conftest.py)
    with scratch_database("airlock_wakeups") as url:
        env = {"RUN_LANES": "default=1", "WORKER_POLL_SECONDS": POLL, KEY_ENV: "sk-wakeups"}
        cluster = new_cluster(tmp_path, DATABASE_URL=url, **env)
        try:
            yield cluster
        finally:
            cluster.stop_all()


def _queue(api: Api, message: str) -> str:
    return api.ok("POST", "/api/agents/clock/runs", {"message": message}, Prefer="respond-async")["runId"]


def _taken_within(api: Api, run_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if api.ok("GET", f"/api/runs/{run_id}")["status"] != "queued":
            return True
        time.sleep(0.05)
    return False


def test_a_worker_in_another_process_takes_a_queued_run_at_once(cluster):
    token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
    api = Api(cluster.serve().url, token)
    api.ok("POST", "/api/agents", CLOCK)
    cluster.worker("worker", "--threads", "1")
    time.sleep(1)  # listening, and idle in its poll

    for _ in range(3):
        run_id = _queue(api, "call get_time")
        assert _taken_within(api, run_id, 5), "a queued run waited for the poll"
        api.run_until(run_id, lambda run: run["status"] == "completed", timeout=10)


def test_a_run_waiting_for_its_lane_is_taken_by_another_process_when_the_run_ahead_ends(cluster, tmp_path):
    token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
    with FakeOpenAI() as fake:
        connections = tmp_path / "connections.json"
        loopback = {"name": "loopback", "kind": "openai", "baseUrl": fake.base_url, "apiKeyEnv": KEY_ENV}
        connections.write_text(json.dumps({"connections": [{**loopback, "tenants": "*"}]}))
        cluster.manage("load_connections", str(connections))
        api = Api(cluster.serve().url, token)
        api.ok("POST", "/api/agents", CLOCK)
        api.ok("POST", "/api/agents", {"name": "slow", "model": {"connection": "loopback", "name": "slow"}})
        workers = {process.pid: process for process in (cluster.worker("w1"), cluster.worker("w2"))}
        time.sleep(1)

        fake.reply_text("done", delay=3)
        slow = api.ok("POST", "/api/agents/slow/runs", {"message": "take your time"}, Prefer="respond-async")["runId"]
        assert _taken_within(api, slow, 5)
        with psycopg.connect(cluster.env["DATABASE_URL"]) as db:
            [(worker_id,)] = db.execute("SELECT worker_id FROM agents_run WHERE id = %s", [slow]).fetchall()
        taker = workers.pop(int(worker_id.split(":")[1]))
        # The lane holds one turn: the other worker finds it full and sleeps in its 30 s poll.
        waiting = _queue(api, "call get_time")
        time.sleep(0.5)
        assert api.ok("GET", f"/api/runs/{waiting}")["status"] == "queued"
        taker.popen.terminate()  # it ends the slow turn and claims nothing more
        done = api.run_until(waiting, lambda run: run["status"] not in ("queued", "running"), timeout=10)
        assert done["status"] == "completed", done
        assert api.ok("GET", f"/api/runs/{slow}")["status"] == "completed"
        with psycopg.connect(cluster.env["DATABASE_URL"]) as db:
            [(worker_id,)] = db.execute("SELECT worker_id FROM agents_run WHERE id = %s", [waiting]).fetchall()
        assert int(worker_id.split(":")[1]) in workers


def test_without_wakeups_a_worker_of_another_process_waits_for_its_poll(cluster):
    token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
    api = Api(cluster.serve().url, token)
    api.ok("POST", "/api/agents", CLOCK)
    cluster.worker("worker", "--threads", "1", WORKER_WAKEUPS="0")
    time.sleep(1)  # its first poll found nothing: it sleeps 30 s

    run_id = _queue(api, "call get_time")
    assert not _taken_within(api, run_id, 3)
