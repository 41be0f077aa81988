"""How many statements each step of a conversation sends to the database (issue 32): a run started up to its
approval, a plain answer, the answer that completes the run, and the continuation a worker runs.

Counted as pytest-django counts them (Django's `CaptureQueriesContext`), on committed transactions (as a server
runs them, not inside a test's transaction), without the transaction control Django 6 logs too (BEGIN, COMMIT,
SAVEPOINT, RELEASE): each budget is a number of statements that read or write. Each step is taken once before
it is counted, so what a process reads once (a version's parsed definition) is not counted.
"""

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents import claiming
from agents.models import Run, RunStatus
from agents.queue import run_claimed
from agents.turns import PROCESS_ID
from tests.conftest import Persona
from tests.helpers import EMAIL, call_line, make_agent, run_handed

pytestmark = pytest.mark.django_db(transaction=True)

CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")

SEND = call_line("send_email", EMAIL)


def statements(step: Callable[[], Any]) -> tuple[Any, list[str]]:
    """What `step` returns, and the statements it sent (transaction control left out)."""
    with CaptureQueriesContext(connection) as captured:
        result = step()
    sent = [query["sql"] for query in captured.captured_queries]
    return result, [sql for sql in sent if not sql.upper().startswith(CONTROL)]


# Per step: (PostgreSQL, SQLite). Before issue 32's round they were 18, 9, 22 and 18 on PostgreSQL (the issue asks
# 12, 4, 6 and 12: see its note for what the rest is). SQLite writes a receipt in three statements, and the answer
# before it in another: on PostgreSQL the answer's conditional update and its receipt are one statement
# (approvals.receipts.record_closing). No console of the tenant is open here: an open one adds the read of the
# members a push goes to (approvals.push).
BUDGETS = {
    "start": (11, 12),
    # The token, the request, its answer with its receipt, and the session's answers read again once committed.
    "plain answer": (4, 7),
    # The session's lock, the run and its task, the answer carried by it with its receipt: the database refuses a
    # second turn of the session (`run_one_turn_per_session`), and the worker that takes the run records its start
    # (agents.queue.queue_continuation, agents.run_lifecycle.begin_queued).
    "completing answer": (6, 9),
    # The claim (its task, its lane's lock and count, the task and the run taken), the run read with the session's
    # latest checkpoint (agents.checkpoints.with_latest_checkpoint), its carried answers, the rules; its outcome.
    # On PostgreSQL the task and the run taken are one statement, and so are the run's outcome and its session's row
    # (console.sql.update_together).
    "continuation": (11, 12),
    # Handed to an idle thread of the process that queued it (agents.seats.Seat), begun from what queueing it read:
    # no claim, nothing read again but the rules its turn may consult (the 12 met); the answer that hands it
    # over counts its lane under the lane's lock, as a claim would, and writes the run with its task claimed for the
    # thread (one statement on PostgreSQL: console.inserts.insert_rows).
    "handed continuation": (6, 7),
    "handing answer": (7, 10),
}


def within(step: str, sent: list[str]) -> None:
    budget = BUDGETS[step][0 if connection.vendor == "postgresql" else 1]
    listed = "\n".join(f"  {sql[:160]}" for sql in sent)
    assert len(sent) <= budget, f"{step}: {len(sent)} statements, budget {budget}:\n{listed}"


def start(persona: Persona, session: str, message: str = SEND) -> dict[str, Any]:
    response = persona.api("POST", "/api/agents/assistant/runs", {"message": message, "sessionId": session})
    assert response.status_code == 200, response.content
    return response.json()


def answer(persona: Persona, asked: dict[str, Any], index: int = 0) -> dict[str, Any]:
    body = {"requestId": asked["pendingRequests"][index]["requestId"], "approved": True}
    response = persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "accepted"
    return response.json()


def work() -> None:
    """A worker's part in one queued run: its claim and its turn (not the poll after it, which is the next one's)."""
    worker = f"{PROCESS_ID}:budget"
    db_task = claiming.claim_task(worker)
    assert db_task is not None
    run_claimed(db_task)


@pytest.fixture
def assistant(admin: Persona) -> None:
    make_agent(admin)


def test_a_run_up_to_its_approval_keeps_to_its_budget(operator, assistant):
    start(operator, "warm")
    asked, sent = statements(lambda: start(operator, "counted"))
    assert asked["status"] == "awaiting_approval"
    within("start", sent)


def test_a_plain_answer_keeps_to_its_budget(operator, assistant):
    twice = f"{SEND}\n{SEND}"
    answer(operator, start(operator, "warm", twice))
    asked = start(operator, "counted", twice)
    assert len(asked["pendingRequests"]) == 2
    answered, sent = statements(lambda: answer(operator, asked))
    assert answered["continuationRunId"] is None
    within("plain answer", sent)


def test_the_answer_that_completes_a_run_keeps_to_its_budget(operator, assistant):
    warm = start(operator, "warm")
    answer(operator, warm)
    work()
    asked = start(operator, "counted")
    answered, sent = statements(lambda: answer(operator, asked))
    assert Run.objects.get(id=answered["continuationRunId"]).status == RunStatus.QUEUED
    within("completing answer", sent)


def test_the_continuation_keeps_to_its_budget(operator, assistant):
    answer(operator, start(operator, "warm"))
    work()
    continuation = answer(operator, start(operator, "counted"))["continuationRunId"]
    _, sent = statements(work)
    assert Run.objects.get(id=continuation).status == RunStatus.COMPLETED
    within("continuation", sent)


def test_a_continuation_handed_to_an_idle_thread_keeps_to_its_budget(operator, assistant, seat):
    asked = start(operator, "warm")
    answer(operator, asked)
    run_handed(seat)
    asked = start(operator, "counted")
    continuation = answer(operator, asked)["continuationRunId"]
    assert Run.objects.get(id=continuation).status == RunStatus.RUNNING  # claimed as it was queued
    _, sent = statements(lambda: run_handed(seat))
    assert Run.objects.get(id=continuation).status == RunStatus.COMPLETED
    within("handed continuation", sent)


def test_the_answer_that_hands_its_continuation_over_keeps_to_its_budget(operator, assistant, seat):
    answer(operator, start(operator, "warm"))
    run_handed(seat)
    asked = start(operator, "counted")
    answered, sent = statements(lambda: answer(operator, asked))
    assert Run.objects.get(id=answered["continuationRunId"]).status == RunStatus.RUNNING
    within("handing answer", sent)
