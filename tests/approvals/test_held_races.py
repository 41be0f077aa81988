"""Two sweeps that find the same held answer due (issue 48 item 9): a timer and the deadline sweep, or the sweeps
of two processes. Each claims the row by a conditional update before it applies it, so the answer applies once
and the other sweep leaves it alone, on SQLite and on PostgreSQL.

Both sweeps run with `now` equal to the row's `due_at` (due, at the boundary): a claim moves `due_at` to its own
`now`, which then leaves it unchanged, so only the claim's state condition tells the second sweep that the row
was taken."""

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from agents.models import Run
from approvals.actions import apply_due
from approvals.models import HeldAnswer, HeldState, PendingRequest
from approvals.receipts import Receipt
from tests.approvals.test_inbox_pages import answer, ask, make_agent, request_id
from tests.conftest import Persona

# Long enough that the holding process's own timer never fires during a test: the sweeps are its only appliers.
WINDOW = 3600
CLAIM = f'UPDATE "{HeldAnswer._meta.db_table}" SET "state" = '


@pytest.fixture(autouse=True)
def window(settings):
    settings.ANSWER_UNDO_SECONDS = WINDOW


def held(operator: Persona, admin: Persona) -> tuple[dict[str, Any], HeldAnswer]:
    """An approval answered in the inbox and held: (the run that asked, its held answer)."""
    make_agent(admin)
    asked = ask(operator)
    assert answer(operator, request_id(asked), {"decision": "approve"}).status_code == 302
    row = HeldAnswer.objects.get(request__pk=request_id(asked))
    assert row.state == HeldState.HELD
    return asked, row


@contextmanager
def before_each_claim(hook: Callable[[], None]) -> Iterator[None]:
    """Call `hook` on this thread's connection just before each claim of a held answer goes to the database."""

    def wrapper(execute, sql, params, many, context):
        if sql.startswith(CLAIM) and '"due_at" = ' in sql.split(" WHERE ")[0]:
            hook()
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield


def applied_once(asked: dict[str, Any], row: HeldAnswer, operator: Persona) -> None:
    row.refresh_from_db()
    assert (row.state, row.outcome) == (HeldState.APPLIED, "The answer was stored.")
    stored = PendingRequest.objects.get(id=row.request_id)
    given = stored.answer or {}
    assert (given.get("approved"), stored.answered_by, stored.answered_via) == (True, operator.user, "inbox")
    assert Run.objects.filter(previous_run_id=asked["runId"]).count() == 1
    assert Receipt.objects.get(request_id=row.request_id).result == "approved"


@pytest.mark.django_db
def test_a_sweep_that_finds_the_answer_claimed_under_it_leaves_it_alone(operator, admin):
    asked, row = held(operator, admin)
    due: datetime = row.due_at
    inner: list[list[HeldAnswer]] = []

    def second_sweep() -> None:
        if not inner:  # once: the second sweep's own claim passes through here too
            inner.append([])
            inner[0] = apply_due(due)

    # The first sweep has read the row as held; the second reads, claims and applies it before the first claims.
    with before_each_claim(second_sweep):
        first = apply_due(due)

    assert [r.pk for r in inner[0]] == [row.pk]
    assert first == []
    applied_once(asked, row, operator)


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_apply_a_held_answer_once(operator, admin, close_worker_thread_connections):
    asked, row = held(operator, admin)
    both_read = threading.Barrier(2)

    def wait_for_the_other() -> None:
        both_read.wait(timeout=30)

    def sweep() -> list[HeldAnswer]:
        try:
            # Each has read the row as held before either claims it.
            with before_each_claim(wait_for_the_other):
                return apply_due(row.due_at)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        settled = [pool.submit(sweep) for _ in range(2)]
        first, second = (future.result(timeout=60) for future in settled)

    assert sorted([len(first), len(second)]) == [0, 1], (first, second)
    applied_once(asked, row, operator)
