"""A run queued in a console process with an idle worker thread is handed to that thread (issue 32 item 3): the
queueing transaction claims it and the thread runs it the moment it commits: no claim, no wake-up, no poll.

Real `manage.py serve` processes whose poll is 30 s and whose wake-ups are off, on SQLite and on PostgreSQL: a run
taken within seconds was handed. A lane at its limit is not jumped: the run waits queued, as any, and a worker
takes it once the turn ahead ends."""

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.processes.cluster import Api, Cluster, new_cluster, scratch_database, unreachable

pytestmark = pytest.mark.processes

POLL = "30"  # far longer than any wait below: a run taken sooner was handed over
KEY_ENV = "AIRLOCK_TEST_HANDOFF_KEY"
CLOCK = {"name": "clock", "tools": [{"name": "get_time", "approval": "always"}]}


@pytest.fixture(params=["sqlite", "postgresql"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    env = {"RUN_LANES": "default=1", "WORKER_POLL_SECONDS": POLL, "WORKER_WAKEUPS": "0", KEY_ENV: "sk-handoff"}
    if request.param == "sqlite":
        cluster = new_cluster(tmp_path, **env)
        try:
            yield cluster
        finally:
            cluster.stop_all()
        return
    problem = unreachable("redis://127.0.0.1:6379/0")
    if problem is not None:
        pytest.skip(f"PostgreSQL is needed: {problem}")  # a failure under CI (tests/conftest.py)
    with scratch_database("airlock_handoff") as url:
        cluster = new_cluster(tmp_path, DATABASE_URL=url, **env)
        try:
            yield cluster
        finally:
            cluster.stop_all()


def _api(cluster: Cluster) -> Api:
    token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
    api = Api(cluster.serve(WORKER_THREADS="2").url, token)
    api.ok("POST", "/api/agents", CLOCK)
    time.sleep(1)  # the claimer's first look found nothing: it sleeps in its 30 s poll
    return api


def _handed(cluster: Cluster, run_id: str) -> bool:
    """Whether the run was claimed as it was queued: its task started in the transaction that wrote it (a claim
    starts it after that commits)."""
    sql = (
        "SELECT t.started_at <= t.enqueued_at FROM agents_run r"
        " JOIN django_tasks_database_dbtaskresult t ON t.id = r.task_id WHERE r.id = {}"
    )
    if "DATABASE_URL" in cluster.env:
        with psycopg.connect(cluster.env["DATABASE_URL"]) as db:
            [(handed,)] = db.execute(sql.format("%s").replace("r.task_id", "r.task_id::uuid"), [run_id]).fetchall()
    else:
        with sqlite3.connect(cluster.folder / "airlock.sqlite3") as db:
            query = sql.format("?").replace("t.id = r.task_id", "t.id = replace(r.task_id, '-', '')")
            [(handed,)] = db.execute(query, [run_id.replace("-", "")]).fetchall()
    return bool(handed)


def _ended(api: Api, run_id: str, seconds: float = 5) -> dict:
    return api.run_until(run_id, lambda run: run["status"] not in ("queued", "running"), timeout=seconds)


def test_a_queued_run_and_its_continuation_are_handed_to_an_idle_thread(cluster):
    api = _api(cluster)
    for n in range(3):
        body = {"message": "call get_time", "sessionId": f"handed-{n}"}
        queued = api.ok("POST", "/api/agents/clock/runs", body, Prefer="respond-async")
        asked = _ended(api, queued["runId"])
        assert asked["status"] == "awaiting_approval", asked
        assert _handed(cluster, queued["runId"])
        request_id = asked["pendingRequests"][0]["requestId"]
        answered = api.ok("POST", f"/api/runs/{queued['runId']}/responses", {"requestId": request_id, "approved": True})
        done = _ended(api, answered["continuationRunId"])
        assert done["status"] == "completed", done
        assert "get_time" in json.dumps(done["output"]), done
        assert _handed(cluster, answered["continuationRunId"])


def test_a_lane_at_its_limit_is_not_jumped(cluster, tmp_path):
    with FakeOpenAI() as fake:
        connections = tmp_path / "connections.json"
        loopback = {"name": "loopback", "kind": "openai", "baseUrl": fake.base_url, "apiKeyEnv": KEY_ENV}
        connections.write_text(json.dumps({"connections": [{**loopback, "tenants": "*"}]}))
        cluster.manage("load_connections", str(connections))
        api = _api(cluster)
        api.ok("POST", "/api/agents", {"name": "slow", "model": {"connection": "loopback", "name": "slow"}})

        fake.reply_text("done", delay=3)
        slow = api.ok("POST", "/api/agents/slow/runs", {"message": "take your time"}, Prefer="respond-async")["runId"]
        assert _handed(cluster, slow)
        # The lane holds one turn: the second run waits queued although a thread of the pool is idle.
        waiting = api.ok("POST", "/api/agents/clock/runs", {"message": "hello"}, Prefer="respond-async")["runId"]
        time.sleep(1)
        assert api.ok("GET", f"/api/runs/{waiting}")["status"] == "queued"
        assert _ended(api, slow)["status"] == "completed"
        # The thread that ran the slow turn looks for work once it ends (no wake-ups here): it takes the run.
        assert _ended(api, waiting)["status"] == "completed"
        assert not _handed(cluster, waiting)
