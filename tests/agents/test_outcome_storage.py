"""A turn's outcome the database refuses (issue 26: SQLite's "string or blob too big" left a run `running` and
its caller with a 500): the run ends `failed` with `outcome_not_stored`, its caller gets that result, and its
session takes the next turn. The refusals are the database's own (see `refused_message`)."""

import sqlite3
from collections.abc import Iterator

import pytest
from django.db import connection

from agents.models import Run, RunStatus
from tests.helpers import EMAIL, call_line, drain_queued, run, run_ok, stored_events

# Under it, a run's message fits in its row at the start; its output beside it at the end does not.
LIMIT = 100_000


@pytest.fixture
def refused_message(db: None) -> Iterator[str]:
    """A message whose turn's outcome the test database refuses. SQLite: a long one, under its length limit (lowered
    here on the connection the views share) while its output beside it is over. PostgreSQL: an email to send whose
    body has a NUL character, which no text or jsonb value holds (the message says it as `\\u0000`)."""
    if connection.vendor == "postgresql":
        yield call_line("send_email", {**EMAIL, "body": "Ship\x00it."})
        return
    connection.ensure_connection()
    raw = connection.connection
    before = raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
    try:
        yield "x" * 60_000
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


def test_it_ends_a_run_failed_when_the_database_refuses_its_outcome(operator, assistant, refused_message):
    response = run(operator, {"message": refused_message, "sessionId": "s1"})

    assert response.status_code == 200, response.content[:300]
    assert_not_stored(response.json())
    # Nothing of the run holds its session: the next turn runs.
    after = run_ok(operator, {"message": "hello", "sessionId": "s1"})
    assert (after["status"], after["output"]) == ("completed", "You said: hello")


def test_it_ends_a_queued_run_failed_when_the_database_refuses_its_outcome(operator, assistant, refused_message):
    response = run(operator, {"message": refused_message, "sessionId": "s1"}, HTTP_PREFER="respond-async")
    assert response.status_code == 202

    drain_queued(1)

    queued = operator.api("GET", f"/api/runs/{response.json()['runId']}")
    assert queued.status_code == 200
    assert_not_stored(queued.json())
