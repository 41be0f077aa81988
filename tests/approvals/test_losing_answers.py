"""An answer that loses to another changes nothing of the winner's: the request keeps who answered, when, how
and why, as the audit and the run's `permission.completed` say, whatever the channels (the respond API, the
inbox card, the trial page's card, a run request's `approvals`) and whoever the operators. Each loser is told
so in its channel's words.

The losers here read the request while it was open and store their answer after the winner's landed (the
moment a real race leaves open): either the winner answers, whole, in the middle of the loser's answer (any
database), or (PostgreSQL) every answer waits for the others before storing its own, in threads of their own."""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from agents.models import Agent, Event, Run, RunStatus
from agents.queue import queue_continuation
from agents.run_lifecycle import record_run
from approvals.audit_entries import ANSWER
from approvals.audit_queries import Criteria, iter_entries
from approvals.decisions import decide
from approvals.models import HeldAnswer, PendingRequest, RequestStatus
from tests.approvals.test_respond_race import together
from tests.conftest import Persona, make_persona
from tests.helpers import EMAIL, call_line, drain_queued, make_agent, run_ok

HTMX = {"HTTP_HX_REQUEST": "true"}
SEND = call_line("send_email", EMAIL)
# What a card says of an answer that came second (answered before it was read, or meanwhile).
CHANGED_NOTHING = "this answer changed nothing."


@pytest.fixture
def assistant(admin) -> Agent:
    return make_agent(admin)


@dataclass(frozen=True)
class Answer:
    """One operator's approval of a request through one channel, with a reason of its own."""

    persona: Persona
    via: str  # "api", "inbox", "trial" or "run": what the request stores as `answered_via`
    reason: str

    def give(self, asked: dict[str, Any], index: int = 0) -> str:
        """Post the answer; "accepted", or the refusal it got (the respond status, the card's word, the 409 code)."""
        run_id, session = asked["runId"], asked["sessionId"]
        rid = asked["pendingRequests"][index]["requestId"]
        if self.via == "api":
            body = {"requestId": rid, "approved": True, "reason": self.reason}
            response = self.persona.api("POST", f"/api/runs/{run_id}/responses", body)
            assert response.status_code == 200, response.content
            return response.json()["status"]
        if self.via in ("inbox", "trial"):
            form = {"decision": "approve", "reason": self.reason, **({"via": "trial"} if self.via == "trial" else {})}
            # A client of its own, in the persona's browser session: the race posts from several threads at once.
            client = Client()
            client.cookies.update(self.persona.client.cookies)
            response = client.post(f"/inbox/{rid}/answer/", form, **HTMX)
            assert response.status_code == 200, response.content
            card = response.content.decode()
            if not card:
                return "accepted"  # the card is swapped out
            assert CHANGED_NOTHING in card, card
            return "already_resolved"
        approvals = [{"requestId": rid, "approved": True, "reason": self.reason}]
        response = self.persona.api(
            "POST", "/api/agents/assistant/runs", {"sessionId": session, "approvals": approvals}
        )
        if response.status_code == 200:
            return "accepted"
        assert response.status_code == 409, response.content
        return response.json()["code"]


@pytest.fixture
def answers(operator, admin, acme) -> dict[str, Answer]:
    """Four operators, one channel each."""
    opal, olga = make_persona("opal", acme, "operator"), make_persona("olga", acme, "operator")
    return {
        "api": Answer(operator, "api", "otto through the API"),
        "inbox": Answer(admin, "inbox", "ada in the inbox"),
        "trial": Answer(opal, "trial", "opal on the trial page"),
        "run": Answer(olga, "run", "olga in her next turn"),
    }


def assert_answered_by(request_id: str, winner: Answer, answered_at: datetime | None = None, mails: int = 1) -> None:
    """The request holds the winner's answer, and only it: who, how, why (and when, if known), as the audit
    and the event of the run that carried it say, once the queued continuation ran; `mails` went out."""
    drain_queued(Run.objects.filter(status=RunStatus.QUEUED).count())
    pending = PendingRequest.objects.select_related("answered_by", "answered_in").get(id=request_id)
    assert (pending.status, pending.answered_by, pending.answered_via, pending.answer["reason"]) == (
        RequestStatus.ANSWERED,
        winner.persona.user,
        winner.via,
        winner.reason,
    )
    if answered_at is not None:
        assert pending.answered_at == answered_at
    [entry] = [e for e in iter_entries(pending.tenant, Criteria()) if e.request_id == request_id and e.source == ANSWER]
    assert (entry.who, entry.via, entry.reason, entry.when) == (
        winner.persona.user.username,
        winner.via,
        winner.reason,
        pending.answered_at,
    )
    carried = pending.answered_in
    assert carried is not None and carried.status == RunStatus.COMPLETED
    events = Event.objects.filter(run=carried, data__requestId=request_id)
    [completed] = [e for e in events if e.type == "permission.completed"]
    [answered] = [e for e in events if e.type == "request.answered"]  # Airlock's: who answered (SPEC section 10)
    assert completed.data["result"] == {"kind": "approved"}
    assert answered.data["answeredBy"] == winner.persona.user.username
    assert len(mail.outbox) == mails


def after_the_winner_lands(
    monkeypatch: pytest.MonkeyPatch, request_id: str, winner: Callable[[], str]
) -> dict[str, Any]:
    """The loser's answer, once it has read the request open, lets `winner` answer first, whole, before it
    stores its own (through the respond path), holds it (the console's) or starts the turn that carries it (a run
    request, whose transaction would take the winner's answer back with its own). What is returned fills in with the
    winner's outcome and the `answered_at` it stored."""
    seen: dict[str, Any] = {}

    def first_the_winner() -> None:
        monkeypatch.undo()  # the winner's answer goes straight through
        seen["outcome"] = winner()
        seen["answered_at"] = PendingRequest.objects.values_list("answered_at", flat=True).get(id=request_id)

    def record_second(*args: Any, **kwargs: Any) -> bool:
        first_the_winner()
        return decide(*args, **kwargs)

    def start_second(*args: Any, **kwargs: Any) -> Any:
        first_the_winner()
        return record_run(*args, **kwargs)

    def queue_second(*args: Any, **kwargs: Any) -> Any:
        first_the_winner()
        return queue_continuation(*args, **kwargs)

    held_save = HeldAnswer.save

    def hold_second(self: HeldAnswer, *args: Any, **kwargs: Any) -> None:
        first_the_winner()
        held_save(self, *args, **kwargs)

    monkeypatch.setattr("approvals.actions.answers.decide", record_second)
    # The last answer is stored in the transaction that queues its continuation: the winner lands before it opens.
    monkeypatch.setattr("agents.actions.sessions.queue_continuation", queue_second)
    # A console answer is held first (approvals.actions.held): the one whose held row is stored first wins.
    monkeypatch.setattr(HeldAnswer, "save", hold_second)
    # the run route's (agents.actions), not the queue's
    monkeypatch.setattr("agents.run_lifecycle.record_run", start_second)
    return seen


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("loser", "winner"), [("api", "inbox"), ("api", "run"), ("inbox", "api"), ("inbox", "trial"), ("trial", "run")]
)
def test_a_losing_answer_keeps_the_winners_who_when_and_how(operator, assistant, answers, monkeypatch, loser, winner):
    asked = run_ok(operator, {"message": SEND, "sessionId": "s1"})
    request_id = asked["pendingRequests"][0]["requestId"]
    seen = after_the_winner_lands(monkeypatch, request_id, lambda: answers[winner].give(asked))

    assert answers[loser].give(asked) == "already_resolved"

    assert seen["outcome"] == "accepted"
    assert_answered_by(request_id, answers[winner], seen["answered_at"])


@pytest.mark.django_db
@pytest.mark.parametrize("winner", ["api", "inbox"])
def test_a_run_request_whose_answer_lost_keeps_the_winners(operator, assistant, answers, monkeypatch, winner):
    """Two requests, so the winner's answer to the first starts no continuation: the run request that answers
    both finds the first answered when it carries it."""
    asked = run_ok(operator, {"message": f"{SEND}\n{SEND}", "sessionId": "s1"})
    first, second = (p["requestId"] for p in asked["pendingRequests"])
    seen = after_the_winner_lands(monkeypatch, first, lambda: answers[winner].give(asked))
    olga = answers["run"]
    both = [{"requestId": rid, "approved": True, "reason": olga.reason} for rid in (first, second)]

    response = olga.persona.api("POST", "/api/agents/assistant/runs", {"sessionId": "s1", "approvals": both})

    assert (response.status_code, response.json()["code"]) == (409, "already_answered")
    assert seen["outcome"] == "accepted"
    pending = PendingRequest.objects.get(id=first)
    assert (pending.answered_by, pending.answered_via, pending.answered_at) == (
        answers[winner].persona.user,
        winner,
        seen["answered_at"],
    )
    assert PendingRequest.objects.get(id=second).answer is None
    assert answers["api"].give(asked, index=1) == "accepted"
    assert_answered_by(first, answers[winner], seen["answered_at"], mails=2)


def storing_together(monkeypatch: pytest.MonkeyPatch, barrier: threading.Barrier) -> None:
    """Each answer, once it has read the request open, waits at `barrier` for the others before it stores its
    own (the respond path), holds it (the console's: the first held row of a request wins, then applies) or
    starts the turn that carries it (a run request): all store at the same moment, and all but one lose there.
    Each waits once, at the first of those it comes to."""
    held_save, waited = HeldAnswer.save, threading.local()

    def meet() -> None:
        if not getattr(waited, "once", False):
            waited.once = True
            barrier.wait(timeout=30)

    def record_together(*args: Any, **kwargs: Any) -> bool:
        meet()
        return decide(*args, **kwargs)

    def hold_together(self: HeldAnswer, *args: Any, **kwargs: Any) -> None:
        meet()
        held_save(self, *args, **kwargs)

    def start_together(*args: Any, **kwargs: Any) -> Any:
        meet()
        return record_run(*args, **kwargs)

    def queue_together(*args: Any, **kwargs: Any) -> Any:
        meet()
        return queue_continuation(*args, **kwargs)

    monkeypatch.setattr("approvals.actions.answers.decide", record_together)
    monkeypatch.setattr(HeldAnswer, "save", hold_together)
    monkeypatch.setattr("agents.run_lifecycle.record_run", start_together)  # as above
    monkeypatch.setattr("agents.actions.sessions.queue_continuation", queue_together)


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql
def test_answers_through_every_channel_at_the_same_moment_keep_the_winners(operator, assistant, answers):
    """Four operators, three answers each through their own channel, stored at once; five rounds."""
    for round_ in range(5):
        mail.outbox.clear()
        asked = run_ok(operator, {"message": SEND, "sessionId": f"r{round_}"})
        request_id = asked["pendingRequests"][0]["requestId"]
        given = [Answer(a.persona, a.via, f"{a.reason} ({n})") for a in answers.values() for n in range(3)]
        began = timezone.now()

        with pytest.MonkeyPatch.context() as monkeypatch:
            storing_together(monkeypatch, threading.Barrier(len(given)))
            outcomes = together([partial(answer.give, asked) for answer in given])

        assert outcomes.count("accepted") == 1, outcomes
        [winner] = [answer for answer, outcome in zip(given, outcomes, strict=True) if outcome == "accepted"]
        for answer, outcome in zip(given, outcomes, strict=True):
            if answer is not winner:
                # A run request that finds the winner's turn or continuation on its way is told the session is
                # busy (SPEC section 4: one turn at a time), before its answer is looked at.
                expected = {"already_answered", "session_busy"} if answer.via == "run" else {"already_resolved"}
                assert outcome in expected, (answer, outcome)
        assert_answered_by(request_id, winner)
        answered_at = PendingRequest.objects.values_list("answered_at", flat=True).get(id=request_id)
        assert began <= answered_at <= timezone.now()
