"""The keeper (agents/turns.py) writes the events of a turn held here while that turn finishes in another
thread: neither waits for the other (on SQLite they did, until the database's 20 s timeout, and the keeper's
write then failed "database is locked")."""

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from agents.events import EventLog
from agents.models import Event, Run
from agents.payloads import UserMessage
from agents.turns import _HELD, _HELD_LOCK, _Held, keep_held
from tests.helpers import make_agent, run_ok


@pytest.mark.django_db(transaction=True)
def test_the_keeper_writes_a_held_turns_events_while_that_turn_finishes(operator):
    make_agent(operator)
    run = Run.objects.get(id=run_ok(operator, {"message": "hello"})["runId"])
    log = EventLog.resume(run)
    log.record(UserMessage(content="written by the keeper"))
    errors: list[BaseException] = []
    at_insert, go_on = threading.Event(), threading.Event()

    def pause_at_the_events_insert(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith('INSERT INTO "agents_event"'):
            at_insert.set()
            go_on.wait(30)
        return execute(sql, params, many, context)

    def keeper() -> None:
        try:
            with connection.execute_wrapper(pause_at_the_events_insert):
                keep_held()
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    def finishing_turn() -> None:
        # As finish_run does: its write transaction, then the log's rest.
        try:
            with transaction.atomic():
                Run.objects.filter(pk=run.pk).update(output="finished")
                log.record(UserMessage(content="written by the finishing turn"))
                log.flush()
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    with _HELD_LOCK:
        _HELD[run.id] = _Held(None, None, log)  # type: ignore[arg-type]  # the keeper reads only the log
    try:
        keeping = threading.Thread(target=keeper)
        keeping.start()
        assert at_insert.wait(30)
        finishing = threading.Thread(target=finishing_turn)
        finishing.start()
        finishing.join(0.5)  # the turn is waiting for the keeper now (its lock or the log's)
        go_on.set()
        keeping.join(60)
        finishing.join(60)
    finally:
        with _HELD_LOCK:
            _HELD.pop(run.id, None)

    assert errors == []
    assert not keeping.is_alive() and not finishing.is_alive()
    contents = [e.data.get("content") for e in Event.objects.filter(run=run, type="user.message").order_by("sequence")]
    assert contents == ["hello", "written by the keeper", "written by the finishing turn"]
    assert Run.objects.get(pk=run.pk).output == "finished"
