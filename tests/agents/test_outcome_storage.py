"""A turn's outcome the database refuses (issue 26: SQLite's "string or blob too big" left a run `running` and
its caller with a 500): the run ends `failed` with `outcome_not_stored`, its caller gets that result, and its
session takes the next turn. The refusal is the database's own: SQLite's length limit, lowered for the test."""

import sqlite3
from collections.abc import Iterator

import pytest
from django.db import connection

from agents.models import Run, RunStatus
from tests.helpers import drain_queued, run, run_ok, stored_events

# Under it, a run's message fits in its row at the start; its output beside it at the end does not.
LIMIT = 100_000
LONG = "x" * 60_000


@pytest.fixture
def refusing_long_rows(db: None) -> Iterator[None]:
    """The test database refuses a value or row over LIMIT bytes (the connection is the test's and its views')."""
    if connection.vendor != "sqlite":
        pytest.skip("the length limit is SQLite's")
    connection.ensure_connection()
    raw = connection.connection
    before = raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
    try:
        yield
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, before)


def assert_not_stored(result: dict) -> None:
    assert result["status"] == "failed", result
    assert result["output"] is None
    assert result["error"]["code"] == "outcome_not_stored"
    assert "could not be stored" in result["error"]["message"]
    stored = Run.objects.get(id=result["runId"])
    assert (stored.status, stored.output, stored.error) == (RunStatus.FAILED, None, result["error"])
    assert stored.finished_at is not None and stored.lease_expires_at is None
    kinds = [event.type for event in stored_events(result["runId"])]
    assert kinds == ["run.started", "user.message", "run.failed", "session.error"]


@pytest.mark.usefixtures("refusing_long_rows")
def test_it_ends_a_run_failed_when_the_database_refuses_its_outcome(operator, assistant):
    response = run(operator, {"message": LONG, "sessionId": "s1"})

    assert response.status_code == 200, response.content[:300]
    assert_not_stored(response.json())
    # Nothing of the run holds its session: the next turn runs.
    after = run_ok(operator, {"message": "hello", "sessionId": "s1"})
    assert (after["status"], after["output"]) == ("completed", "You said: hello")


@pytest.mark.usefixtures("refusing_long_rows")
def test_it_ends_a_queued_run_failed_when_the_database_refuses_its_outcome(operator, assistant):
    response = run(operator, {"message": LONG, "sessionId": "s1"}, HTTP_PREFER="respond-async")
    assert response.status_code == 202

    drain_queued(1)

    queued = operator.api("GET", f"/api/runs/{response.json()['runId']}")
    assert queued.status_code == 200
    assert_not_stored(queued.json())
