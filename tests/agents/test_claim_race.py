"""Two worker processes claiming on a full lane at the same moment: the lane's limit holds over all of
them, so exactly one of the lane's runs is `running`. Real OS processes, so the claim's in-process lock
cannot hide the race; PostgreSQL, where only the claim's advisory lock keeps two claims apart."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from django.db import connection, transaction
from django_tasks_db.models import DBTaskResult

from agents.models import Run, RunStatus
from tests.conftest import Persona
from tests.helpers import run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]

ROOT = Path(__file__).resolve().parents[2]

# A worker process: Django set up on the test database, then one claim on lane "slow" when told to go.
CLAIMER = """
import json, sys
import django
django.setup()
from django.db import connection
from agents.claiming import claim_task
print("ready", flush=True)
sys.stdin.readline()
task = claim_task(sys.argv[1], ["slow"])
print(json.dumps(task.args_kwargs["args"][0] if task else None), flush=True)
connection.close()
"""


def database_of_the_tests() -> str:
    """pytest-django's test database, as a URL for another process."""
    db = connection.settings_dict
    return f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def start_claimer(worker_id: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": database_of_the_tests(),
        "RUN_LANES": "slow=1",
    }
    return subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "python"), "-c", CLAIMER, worker_id],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def waiting_on_locks() -> int:
    """How many other sessions of the test database wait for a lock (a row's, or an advisory one)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # else the view is read once per transaction
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def queue_on_slow_lane(persona: Persona, session: str) -> str:
    response = run(persona, {"message": "hi", "sessionId": session, "lane": "slow"}, HTTP_PREFER="respond-async")
    assert response.status_code == 202, response.content
    return response.json()["runId"]


def test_two_worker_processes_claiming_at_once_run_one_turn_of_a_lane_with_limit_one(operator, assistant):
    queued = {queue_on_slow_lane(operator, "s1"), queue_on_slow_lane(operator, "s2")}
    claimers = [start_claimer("worker-a"), start_claimer("worker-b")]
    try:
        for claimer in claimers:
            assert claimer.stdout is not None and claimer.stdout.readline().strip() == "ready"
        # Both claims are let go at once and held at the same point: this transaction locks the runs, so a
        # claim that read the lane as free waits to mark its run running, and a claim kept out by the
        # claim lock waits for that lock. Once both wait, the runs are let go.
        with transaction.atomic():
            assert len(Run.objects.select_for_update().filter(id__in=queued)) == 2
            for claimer in claimers:
                assert claimer.stdin is not None
                claimer.stdin.write("go\n")
                claimer.stdin.flush()
            deadline = time.monotonic() + 30
            while waiting_on_locks() < 2:
                assert time.monotonic() < deadline, "the two claims never both waited on a lock"
                time.sleep(0.05)
        claimed = []
        for claimer in claimers:
            out, _ = claimer.communicate(timeout=30)
            assert claimer.returncode == 0, out
            claimed.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for claimer in claimers:
            if claimer.poll() is None:
                claimer.kill()
                claimer.wait()

    # One claim took a run; the other found the lane full.
    assert claimed.count(None) == 1, claimed
    [taken] = [c for c in claimed if c is not None]
    assert taken in queued
    statuses = dict(Run.objects.filter(id__in=queued).values_list("id", "status"))
    assert sorted(statuses.values()) == [RunStatus.QUEUED, RunStatus.RUNNING]
    assert sorted(DBTaskResult.objects.values_list("status", flat=True)) == ["READY", "RUNNING"]
