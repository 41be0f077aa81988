"""Cancelling a run whose turn is running (SPEC section 9): an operator's cancel stops the turn; a reader's,
through any path that cancels, is refused and changes nothing, and the turn goes on to its end. The turn is
a real one, run by a worker thread and held at its model call until the test lets it go."""

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import mail
from django.db import connections

from agents import claiming
from agents.engine import scripted
from agents.models import Run, RunStatus
from agents.turns import _HELD, _HELD_LOCK, keep_held
from approvals.models import PendingRequest, RequestStatus
from tests.conftest import Persona
from tests.helpers import EMAIL, ask_to_send, assert_problem, snapshot, stored_events

pytestmark = pytest.mark.django_db(transaction=True)


class HeldTurn:
    """The queued run, turned by a worker thread (as `run_worker` does) whose model calls wait for
    `let_go()`: until then the run is `running` and its turn held by this process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.at_model, self.go_on = threading.Event(), threading.Event()
        self.ran: list[int] = []
        self.worker = threading.Thread(target=self._drain)

    def _drain(self) -> None:
        try:
            self.ran.append(claiming.drain())
        finally:
            connections.close_all()

    def start(self, run_id: str) -> None:
        decide = scripted._decide

        def held(messages: Any, info: Any) -> Any:
            self.at_model.set()
            assert self.go_on.wait(30), "the test never let the turn go"
            return decide(messages, info)

        self.monkeypatch.setattr(scripted, "_decide", held)
        self.worker.start()
        assert self.at_model.wait(30), "the turn never reached its model call"
        assert Run.objects.get(id=run_id).status == RunStatus.RUNNING
        with _HELD_LOCK:
            assert set(_HELD) == {Run.objects.get(id=run_id).id}

    def let_go(self) -> None:
        self.go_on.set()
        self.worker.join(30)
        assert not self.worker.is_alive()
        assert self.ran == [1]


@pytest.fixture
def held(monkeypatch) -> Iterator[HeldTurn]:
    turn = HeldTurn(monkeypatch)
    yield turn
    turn.go_on.set()  # a failed test must not leave the worker waiting
    if turn.worker.is_alive():
        turn.worker.join(30)


def approved_continuation(operator: Persona) -> tuple[str, str]:
    """A run of session s1 waiting for the approval of send_email, approved through the API: the request's
    id and its continuation's, queued."""
    asked = ask_to_send(operator)
    request_id = asked["pendingRequests"][0]["requestId"]
    body = {"requestId": request_id, "approved": True}
    outcome = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()
    assert outcome["status"] == "accepted", outcome
    return request_id, outcome["continuationRunId"]


def test_an_operator_cancels_a_running_turn(operator, assistant, held):
    _, continuation = approved_continuation(operator)
    held.start(continuation)

    response = operator.api("POST", f"/api/runs/{continuation}/cancel")

    assert response.json() == {"runId": continuation, "status": "cancelling"}
    held.let_go()
    run = Run.objects.get(id=continuation)
    assert (run.status, run.output) == (RunStatus.CANCELLED, None)
    assert stored_events(continuation)[-1].type == "run.cancelled"


def test_no_reader_cancels_a_running_turn_through_any_path(reader, operator, assistant, held):
    request_id, continuation = approved_continuation(operator)
    held.start(continuation)
    before = snapshot()

    assert_problem(reader.api("POST", f"/api/runs/{continuation}/cancel"), 403, "forbidden")
    assert snapshot() == before
    assert reader.client.post(f"/runs/{continuation}/cancel/").status_code == 403
    assert snapshot() == before
    # The card of the request whose answer the running turn carries.
    assert reader.client.post(f"/inbox/{request_id}/cancel-run/").status_code == 403
    assert snapshot() == before
    assert_problem(reader.api("DELETE", "/api/sessions/s1"), 403, "forbidden")
    assert snapshot() == before
    assert not Run.objects.get(id=continuation).cancel_requested

    keep_held()  # the keeper's round passes on any cancel asked: there is none
    held.let_go()

    run = Run.objects.get(id=continuation)
    assert (run.status, run.output, run.cancel_requested) == (
        RunStatus.COMPLETED,
        f"send_email: sent to {EMAIL['to']}",
        False,
    )
    assert stored_events(continuation)[-1].type == "run.completed"
    pending = PendingRequest.objects.get(id=request_id)
    assert (pending.status, pending.answered_in_id) == (RequestStatus.ANSWERED, run.id)
    assert len(mail.outbox) == 1
