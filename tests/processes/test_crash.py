"""Crash safety with real processes: a worker SIGKILLed mid-turn, a console process killed and started
again. The model is a loopback OpenAI-compatible server whose reply the killed worker never gets."""

import http.client
import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.processes.cluster import Api, Cluster, login, new_cluster, wait_for

pytestmark = pytest.mark.processes

KEY_ENV = "AIRLOCK_TEST_CRASH_KEY"
EMAIL = {"to": "ada@example.com", "subject": "Hi", "body": "Ship it."}
FINISHED = ("completed", "failed", "cancelled", "awaiting_approval", "awaiting_input", "awaiting_tool_result")


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    env = {"RUN_LEASE_SECONDS": "2", "RUN_RETRY_DELAY_SECONDS": "0", KEY_ENV: "sk-crash-test"}
    cluster = new_cluster(Path(tmp_path_factory.mktemp("crash")), **env)
    token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
    try:
        yield cluster, token
    finally:
        cluster.stop_all()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def cluster(installation: tuple[Cluster, str]) -> Iterator[Cluster]:
    yield installation[0]
    installation[0].stop_all()
    installation[0].processes.clear()


@pytest.fixture
def api(installation: tuple[Cluster, str], cluster: Cluster, fake: FakeOpenAI, tmp_path: Path) -> Api:
    """The API of a console process that works no queue, with an agent `remote` on the fake model (a
    connection the installation loads from a file, as its operators would)."""
    connections = tmp_path / "connections.json"
    loopback = {"name": "loopback", "kind": "openai", "baseUrl": fake.base_url, "apiKeyEnv": KEY_ENV, "tenants": "*"}
    connections.write_text(json.dumps({"connections": [loopback]}))
    cluster.manage("load_connections", str(connections))
    console = cluster.serve()
    client = Api(console.url, installation[1])
    definition = {
        "name": "remote",
        "instructions": "You help.",
        "model": {"connection": "loopback", "name": "loopback"},
        "tools": [{"name": "get_time", "approval": "every_time"}, {"name": "send_email", "approval": "never"}],
    }
    status, _, _ = client.call("PUT", "/api/agents/remote", definition)
    if status == 404:
        client.ok("POST", "/api/agents", definition)
    return client


def queue_run(api: Api, body: dict[str, Any]) -> str:
    return api.ok("POST", "/api/agents/remote/runs", body, Prefer="respond-async")["runId"]


def events(api: Api, run_id: str) -> list[dict[str, Any]]:
    return api.ok("GET", f"/api/runs/{run_id}/events")["items"]


def mid_turn(api: Api, fake: FakeOpenAI, run_id: str, calls: int) -> None:
    """Wait until the worker waits on the model's `calls`-th reply."""
    wait_for(lambda: len(fake.requests) >= calls, "the worker to call the model")
    assert api.ok("GET", f"/api/runs/{run_id}")["status"] == "running"


def kill_mid_turn(cluster: Cluster, api: Api, fake: FakeOpenAI, body: dict[str, Any], calls: int) -> dict[str, Any]:
    """Queue a run, SIGKILL its worker while it waits on the model's `calls`-th reply, start another
    worker; the run as it ends."""
    first = cluster.worker("worker-1", "--threads", "1")
    run_id = queue_run(api, body)
    mid_turn(api, fake, run_id, calls)
    cluster.kill(first)
    cluster.worker("worker-2", "--threads", "1")
    return api.run_until(run_id, lambda r: r["status"] in FINISHED)


def test_a_run_whose_worker_is_killed_runs_again_on_another_worker(cluster, api, fake):
    fake.reply_text("never delivered", delay=60)
    fake.reply_text("Recovered.")

    run = kill_mid_turn(cluster, api, fake, {"message": "hi", "sessionId": "crash-1"}, calls=1)

    run_id = run["runId"]
    assert (run["status"], run["output"]) == ("completed", "Recovered."), run
    [retry] = [e for e in events(api, run_id) if e["type"] == "run.retrying"]
    assert retry["data"]["error"]["code"] == "worker_lost"


def attempts(cluster: Cluster, run_id: str) -> int:
    """How many times a worker claimed the run (not on the API: read from the installation's database)."""
    database = sqlite3.connect(f"file:{cluster.folder / 'airlock.sqlite3'}?mode=ro", uri=True)
    try:
        row = database.execute("SELECT attempts FROM agents_run WHERE id = ?", [uuid.UUID(run_id).hex]).fetchone()
    finally:
        database.close()
    assert row is not None, run_id
    return row[0]


def test_a_healthy_turn_longer_than_its_lease_completes_once(cluster, api, fake):
    # Leases last 2 s here and the model takes 5 s: only the worker's keeper renewing the lease every second
    # keeps its own keeper and the console's from taking the turn for a lost one and running it again.
    fake.reply_text("Slow but sure.", delay=5)
    cluster.worker("worker-1", "--threads", "1")

    run_id = queue_run(api, {"message": "take your time", "sessionId": "long-turn"})
    run = api.run_until(run_id, lambda r: r["status"] in FINISHED, timeout=60)

    assert (run["status"], run["output"]) == ("completed", "Slow but sure."), run
    types = [e["type"] for e in events(api, run_id)]
    assert "run.retrying" not in types
    assert types.count("run.completed") == 1
    assert len(fake.requests) == 1  # the model was asked once
    assert attempts(cluster, run_id) == 1


def test_a_run_killed_after_a_tool_with_side_effects_fails_worker_lost_and_is_not_repeated(cluster, api, fake):
    fake.reply_tool_call("send_email", EMAIL)
    fake.reply_text("never delivered", delay=60)

    run = kill_mid_turn(cluster, api, fake, {"message": "mail ada", "sessionId": "crash-2"}, calls=2)

    run_id = run["runId"]
    assert (run["status"], run["error"]["code"]) == ("failed", "worker_lost"), run
    types = [e["type"] for e in events(api, run_id)]
    assert types.count("tool.execution_start") == 1
    assert "run.retrying" not in types
    assert len(fake.requests) == 2  # nobody asked the model again


def test_an_answer_given_before_the_crash_is_kept_for_the_next_turn(cluster, api, fake):
    # Every process that may reclaim the run allows one attempt: the lost run fails instead of running again.
    cluster.stop(cluster.processes[0])
    api = Api(cluster.serve("daphne-one-attempt", RUN_MAX_ATTEMPTS="1").url, api.token)
    fake.reply_tool_call("get_time", {})
    fake.reply_text("never delivered", delay=60)
    fake.reply_text("It is time.")
    first = cluster.worker("worker-1", "--threads", "1", RUN_MAX_ATTEMPTS="1")
    asked_id = queue_run(api, {"message": "time?", "sessionId": "crash-3"})
    asked = api.run_until(asked_id, lambda r: r["status"] in FINISHED)
    assert asked["status"] == "awaiting_approval", asked
    request_id = asked["pendingRequests"][0]["requestId"]
    answer = {"requestId": request_id, "approved": True}
    continuation = api.ok("POST", f"/api/runs/{asked_id}/responses", answer)["continuationRunId"]
    mid_turn(api, fake, continuation, 2)

    cluster.kill(first)
    cluster.worker("worker-2", "--threads", "1", RUN_MAX_ATTEMPTS="1")

    lost = api.run_until(continuation, lambda r: r["status"] in FINISHED)
    assert (lost["status"], lost["error"]["code"]) == ("failed", "worker_lost"), lost
    request = api.ok("GET", f"/api/requests/{request_id}")
    assert request["status"] == "pending"
    # Answering again cannot resume the lost turn: runtime_unavailable, never a run stuck waiting.
    again = api.ok("POST", f"/api/runs/{asked_id}/responses", {"requestId": request_id, "approved": False})
    assert again["status"] == "runtime_unavailable", again
    # The next turn of the session carries the stored answer: the approved call runs.
    next_id = queue_run(api, {"message": "", "sessionId": "crash-3"})
    done = api.run_until(next_id, lambda r: r["status"] in FINISHED)
    assert (done["status"], done["output"]) == ("completed", "It is time."), done


def test_a_console_restart_loses_no_pending_request(cluster, api, fake):
    fake.reply_tool_call("get_time", {})
    cluster.worker("worker-1", "--threads", "1")
    run_id = queue_run(api, {"message": "time?", "sessionId": "restart"})
    asked = api.run_until(run_id, lambda r: r["status"] in FINISHED)
    request_id = asked["pendingRequests"][0]["requestId"]
    [console] = [p for p in cluster.processes if p.name == "daphne"]

    cluster.kill(console)
    again = cluster.serve("daphne-again")

    restarted = Api(again.url, api.token)
    pending = restarted.ok("GET", "/api/requests?status=pending")["items"]
    assert request_id in [r["requestId"] for r in pending]
    inbox = login(again.url).open(f"{again.url}/inbox/", timeout=10).read().decode()
    assert request_id in inbox


def test_a_cancel_sent_to_the_console_stops_a_turn_running_in_a_worker(cluster, api, fake):
    fake.reply_text("never delivered", delay=60)
    cluster.worker("worker-1", "--threads", "1")
    run_id = queue_run(api, {"message": "hi", "sessionId": "cancel-far"})
    mid_turn(api, fake, run_id, 1)

    assert api.ok("POST", f"/api/runs/{run_id}/cancel")["status"] == "cancelling"

    run = api.run_until(run_id, lambda r: r["status"] in FINISHED, timeout=10)
    assert run["status"] == "cancelled", run
    assert events(api, run_id)[-1]["type"] == "run.cancelled"


def test_a_turn_of_a_console_killed_mid_request_ends_worker_lost(cluster, api, fake):
    fake.reply_text("never delivered", delay=60)
    [console] = [p for p in cluster.processes if p.name == "daphne"]
    watcher = Api(cluster.serve("daphne-watcher").url, api.token)
    cut_off: list[Exception] = []

    def call() -> None:
        try:
            api.call("POST", "/api/agents/remote/runs", {"message": "hi"})
        except (OSError, http.client.HTTPException) as error:
            cut_off.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    wait_for(lambda: fake.requests, "the console to call the model")
    [running] = watcher.ok("GET", "/api/runs?status=running")["items"]

    cluster.kill(console)
    caller.join(30)
    assert cut_off, "the killed console still answered"

    run = watcher.run_until(running["runId"], lambda r: r["status"] in FINISHED)
    assert (run["status"], run["error"]["code"]) == ("failed", "worker_lost"), run
