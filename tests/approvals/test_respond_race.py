"""Answers given at the same moment, each through its own connection: one is accepted, the rest are told
the request was already resolved, and the run continues once. Needs PostgreSQL: SQLite serializes
every write, so nothing would race."""

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from django.core import mail
from django.db import connection
from django.test import Client
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent, Run, RunStatus
from approvals.actions import expire_due
from approvals.models import PendingRequest, Receipt, RequestStatus
from tests.conftest import Persona
from tests.helpers import drain_queued, make_agent, run_ok, run_queued

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # Concurrent answers only race on PostgreSQL (SQLite serializes writes): `make test-postgres`.
    pytest.mark.postgresql,
]

EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}
SEND = f"call send_email {json.dumps(EMAIL)}"


@pytest.fixture
def assistant(admin) -> Agent:
    return make_agent(admin)


def ask(persona: Persona, message: str = SEND, session: str = "s1") -> dict[str, Any]:
    result = run_ok(persona, {"message": message, "sessionId": session})
    assert result["status"] == "awaiting_approval", result
    return result


def together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run every call in its own thread and connection, released at the same moment."""
    barrier = threading.Barrier(len(calls))

    def call(index: int) -> Any:
        try:
            barrier.wait(timeout=30)
            return calls[index]()
        finally:
            # Each thread's connection must end with it, or the test database cannot be dropped.
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(call, range(len(calls))))


def answer(persona: Persona, run_id: str, body: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    def post() -> dict[str, Any]:
        response = Client().post(
            f"/api/runs/{run_id}/responses",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {persona.token}",
        )
        assert response.status_code == 200, response.content
        return response.json()

    return post


def answer_together(persona: Persona, answers: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return together([answer(persona, run_id, body) for run_id, body in answers])


def test_it_accepts_one_of_fifty_answers_given_at_the_same_moment(operator, assistant):
    asked = ask(operator)
    request_id = asked["pendingRequests"][0]["requestId"]
    bodies = [{"requestId": request_id, "approved": True, "reason": f"answer {i}"} for i in range(50)]

    outcomes = answer_together(operator, [(asked["runId"], body) for body in bodies])

    statuses = [o["status"] for o in outcomes]
    assert statuses.count("accepted") == 1, statuses
    assert statuses.count("already_resolved") == 49, statuses
    [winner] = [i for i, o in enumerate(outcomes) if o["status"] == "accepted"]
    assert [o["continuationRunId"] is not None for o in outcomes].count(True) == 1
    [continuation] = Run.objects.filter(previous_run_id=asked["runId"])
    assert str(continuation.id) == outcomes[winner]["continuationRunId"]
    assert mail.outbox == []
    continuation = run_queued(continuation.id)
    assert (continuation.status, continuation.output) == (RunStatus.COMPLETED, "send_email: sent to a@b.co")
    request = PendingRequest.objects.get(id=request_id)
    assert (request.status, request.answer["reason"]) == (RequestStatus.ANSWERED, f"answer {winner}")
    assert len(mail.outbox) == 1


def test_it_continues_once_when_the_last_two_answers_arrive_together(operator, assistant):
    for round_ in range(5):
        asked = ask(operator, f"{SEND}\n{SEND}", session=f"s{round_}")
        ids = [p["requestId"] for p in asked["pendingRequests"]]

        outcomes = answer_together(operator, [(asked["runId"], {"requestId": i, "approved": True}) for i in ids])

        assert [o["status"] for o in outcomes] == ["accepted", "accepted"]
        started = [o["continuationRunId"] for o in outcomes if o["continuationRunId"]]
        [continuation] = Run.objects.filter(previous_run_id=asked["runId"])
        assert started == [str(continuation.id)]
        continuation = run_queued(continuation.id)
        assert continuation.output == "send_email: sent to a@b.co\nsend_email: sent to a@b.co"
    assert len(mail.outbox) == 10


def test_it_tells_every_answer_racing_the_sweep_what_became_of_the_request(operator, admin):
    make_agent(admin, requestDeadlineSeconds=60)
    for round_ in range(5):
        asked = ask(operator, session=f"s{round_}")
        body = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
        sweep = partial(expire_due, timezone.now() + timedelta(seconds=61))

        *outcomes, expired = together([answer(operator, asked["runId"], body)] * 20 + [sweep])

        statuses = sorted(o["status"] for o in outcomes)
        drain_queued()
        [continuation] = Run.objects.filter(previous_run_id=asked["runId"])
        if expired:
            # The sweep won: every answer that came too late is told so, none is told "already resolved".
            assert set(statuses) == {"expired"}, statuses
            assert continuation.output.startswith("send_email denied: The request expired")
        else:
            assert statuses == ["accepted"] + ["already_resolved"] * 19
            assert continuation.output == "send_email: sent to a@b.co"
    assert Run.objects.filter(previous_run__isnull=False).count() == 5


def test_it_runs_nothing_for_answers_racing_the_deletion_of_their_agent(operator, admin):
    for round_ in range(5):
        make_agent(admin, name=f"mailer-{round_}")
        asked = run_ok(operator, {"message": SEND, "sessionId": f"s{round_}"}, agent=f"mailer-{round_}")
        body = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}

        def delete(name: str = f"mailer-{round_}") -> int:
            return admin.api("DELETE", f"/api/agents/{name}").status_code

        *outcomes, deleted = together([answer(operator, asked["runId"], body)] * 10 + [delete])

        assert deleted == 204
        statuses = sorted(o["status"] for o in outcomes)
        # An answer stored before the deletion is closed with the request, and its continuation (if it
        # was queued) is cancelled; every later answer is told the request ended.
        assert set(statuses) <= {"accepted", "already_resolved", "execution_ended"}, statuses
        assert statuses.count("accepted") <= 1
        request = PendingRequest.objects.get(id=body["requestId"])
        assert request.status == RequestStatus.ABANDONED
        assert not Run.objects.filter(session__key=f"s{round_}", status__in=(RunStatus.QUEUED, RunStatus.RUNNING))
    drain_queued(0)
    assert mail.outbox == []


def test_an_external_request_approved_and_cancelled_at_the_same_moment_ends_one_way(operator, admin):
    """An external agent cancels its request as a person approves it: one of the two wins, and the other is told so.
    The answer was stored, then settled in a second transaction; a cancel in between closed the request `cancelled`
    with the approval (and its receipt) standing: both were told they had won (found by a client in 3 of 30)."""
    content = DefinitionContent.model_validate(
        {"name": "deployer", "runtime": "external", "tools": [{"name": "deploy", "approval": "always"}]}
    )
    Agent.create(admin.tenant, content, admin.user)
    for _ in range(20):
        opened = operator.api("post", "/api/agents/deployer/requests", {"toolName": "deploy", "arguments": {}})
        rid = opened.json()["requestId"]

        approved, cancelled = together(
            [
                lambda rid=rid: operator.api("post", f"/api/requests/{rid}/responses", {"approved": True}).json(),
                lambda rid=rid: operator.api("delete", f"/api/requests/{rid}"),
            ]
        )

        request = PendingRequest.objects.get(id=rid)
        if cancelled.status_code == 200:
            assert approved["status"] == "cancelled", approved
            assert (request.status, request.answer) == (RequestStatus.CANCELLED, None)
        else:
            assert cancelled.status_code == 409 and cancelled.json()["code"] == "request_closed"
            assert approved["status"] == "accepted", approved
            assert (request.status, request.answer["approved"]) == (RequestStatus.ANSWERED, True)
            assert request.run.status == RunStatus.COMPLETED
    assert Receipt.objects.filter(request_id__in=PendingRequest.objects.values("id")).count() == 20
