"""`console.sql.update_together`: UPDATEs in one statement on PostgreSQL, their rows locked in the order given."""

import threading
import time
from typing import Any

import psycopg
import pytest
from django.db import connection, connections
from django.utils import timezone

from agents.models import Run, Session
from console.sql import update_together
from tests.helpers import EMAIL, call_line, make_agent, run_ok


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql
def test_the_other_updates_lock_their_rows_before_the_main_one_touches_its_own(operator, admin):
    """A run's outcome writes its session's row before the run's (agents.outcomes): it waits for a session another
    transaction holds without having touched the run. That transaction (the last answer's continuation, which holds
    the session's lock and inserts a run of the session) may be waiting on the run's row itself: had the outcome
    touched the run first, the two would deadlock (seen in tests/approvals/test_losing_answers.py)."""
    make_agent(admin)
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "order"})
    run = Run.objects.get(id=asked["runId"])
    params = connection.get_connection_params()
    holder = psycopg.connect(**params)
    holder.execute("SELECT 1 FROM agents_session WHERE id = %s FOR UPDATE", [run.session_id])
    written: dict[str, Any] = {}

    def write() -> None:
        try:
            session = (Session.objects.filter(pk=run.session_id), {"updated_at": timezone.now()})
            written["rows"] = update_together(Run.objects.filter(pk=run.pk), {"output": "after"}, session)
        finally:
            connections.close_all()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with psycopg.connect(**params, autocommit=True) as checker:
            deadline = time.monotonic() + 10
            waiting = "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH w0 AS%%'"
            while not checker.execute(waiting).fetchone():
                assert time.monotonic() < deadline, "the update never waited for the session's row"
                time.sleep(0.05)
            # The run's row is untouched while its statement waits: locking it does not wait.
            checker.execute("BEGIN")
            checker.execute("SELECT 1 FROM agents_run WHERE id = %s FOR UPDATE NOWAIT", [run.pk])
            checker.execute("ROLLBACK")
    finally:
        holder.rollback()
        holder.close()
        writer.join(10)
    assert written["rows"] == 1 and Run.objects.get(pk=run.pk).output == "after"


@pytest.mark.django_db
def test_the_main_update_writes_only_when_every_other_wrote_a_row(operator, admin):
    make_agent(admin)
    run = Run.objects.get(id=run_ok(operator, {"message": "hello", "sessionId": "s"})["runId"])
    missing = (Session.objects.filter(pk=-1), {"updated_at": timezone.now()})
    assert update_together(Run.objects.filter(pk=run.pk), {"output": "no"}, missing) == 0
    assert Run.objects.get(pk=run.pk).output != "no"
    assert update_together(Run.objects.filter(pk=run.pk), {"output": "yes"}) == 1
    assert Run.objects.get(pk=run.pk).output == "yes"
