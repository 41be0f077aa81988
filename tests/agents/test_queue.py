"""Queued runs (`Prefer: respond-async`): the 202 answer, lanes and their limits, cancel, retries of
transient failures, and reclaiming runs whose worker died. `drain()` plays the worker in this thread;
tests/processes/ runs real worker processes."""

import asyncio
import itertools
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core import mail
from django.db import IntegrityError, connection, connections, transaction
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents import claiming, keeper, queue
from agents.definitions import DefinitionContent
from agents.engine import Answers
from agents.models import Agent, Run, RunStatus, Session
from agents.outcomes import finish_run
from agents.run_lifecycle import execute
from approvals.models import PendingRequest, RequestStatus, Rule
from console.loops import run_here
from tests.agents.test_events import frames, read_stream, sse_headers, thread_connections  # noqa: F401
from tests.conftest import Persona, grant
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import EMAIL, assert_problem, call_line, run, run_ok, snapshot, stored_events

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def retry_at_once(settings):
    settings.RUN_RETRY_DELAY_SECONDS = 0


ASYNC = {"HTTP_PREFER": "respond-async"}
KEY_ENV = "AIRLOCK_TEST_QUEUE_KEY"


def queue_run(persona: Persona, body: dict[str, Any], agent: str = "assistant") -> dict[str, Any]:
    response = run(persona, body, agent, **ASYNC)
    assert response.status_code == 202, response.content
    accepted = response.json()
    assert response["Location"] == accepted["location"] == f"/api/runs/{accepted['runId']}"
    assert response["Preference-Applied"] == "respond-async"
    return accepted


def get_run(persona: Persona, run_id: str) -> dict[str, Any]:
    response = persona.api("GET", f"/api/runs/{run_id}")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def remote(admin, fake, monkeypatch) -> Agent:
    """An agent on a loopback OpenAI-compatible server."""
    monkeypatch.setenv(KEY_ENV, "sk-queue-test")
    grant("loopback", "openai", admin.tenant, base_url=fake.base_url, api_key_env=KEY_ENV)
    content = {
        "name": "remote",
        "instructions": "You help.",
        "model": {"connection": "loopback", "name": "loopback"},
        "tools": [{"name": "get_time", "approval": "never"}, {"name": "send_email", "approval": "never"}],
    }
    return Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)


def test_it_answers_202_and_the_worker_runs_the_turn(operator, assistant):
    accepted = queue_run(operator, {"message": "hello", "sessionId": "q1"})

    assert accepted["status"] == "queued"
    assert accepted["eventsLocation"] == f"/api/runs/{accepted['runId']}/events"
    assert get_run(operator, accepted["runId"])["status"] == "queued"
    assert [e.type for e in stored_events(accepted["runId"])] == ["run.started", "user.message"]

    assert claiming.drain() == 1

    result = get_run(operator, accepted["runId"])
    assert (result["status"], result["output"], result["lane"]) == ("completed", "You said: hello", "default")
    events = stored_events(accepted["runId"])
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert all(e.parent_id == before.id for before, e in itertools.pairwise(events))
    assert events[-1].type == "run.completed"
    run_row = Run.objects.get(id=accepted["runId"])
    assert (run_row.attempts, run_row.queued_input, run_row.lease_expires_at) == (1, None, None)
    assert claiming.drain() == 0


def drain_apart() -> int:
    """Play a worker in a thread of its own, closing its connection as a worker thread would."""
    try:
        return claiming.drain()
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_a_follower_sees_a_queued_run_through_to_its_end(operator, assistant):
    accepted = await sync_to_async(queue_run)(operator, {"message": "hello"})
    response = await AsyncClient().get(accepted["eventsLocation"], headers=sse_headers(operator))
    reading = asyncio.ensure_future(read_stream(response))
    await asyncio.sleep(0.5)
    assert not reading.done()  # still queued: the stream waits

    await sync_to_async(drain_apart, thread_sensitive=False)()

    streamed = frames(await asyncio.wait_for(reading, 10))
    assert [f["event"] for f in streamed][:2] == ["run.started", "user.message"]
    assert [f["event"] for f in streamed][-3:] == ["run.completed", "session.idle", "done"]
    assert streamed[-1]["data"]["output"] == "You said: hello"


def test_it_keeps_documents_until_the_turn_and_forgets_them_after(operator, assistant):
    accepted = queue_run(operator, {"message": "echo documents", "documents": [{"name": "spec.md", "content": "x"}]})
    assert Run.objects.get(id=accepted["runId"]).queued_input["documents"] == [["spec.md", "x"]]

    claiming.drain()

    run_row = Run.objects.get(id=accepted["runId"])
    assert (run_row.output, run_row.queued_input) == ("spec.md", None)


def test_a_queued_run_keeps_its_answers_on_their_requests_and_the_worker_hands_them_over(operator, assistant):
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "a1"})
    request_id = asked["pendingRequests"][0]["requestId"]
    accepted = queue_run(operator, {"sessionId": "a1", "approvals": [{"requestId": request_id, "approved": True}]})

    kept = Run.objects.get(id=accepted["runId"]).queued_input
    assert set(kept) == {"instructions", "documents", "carried", "leftOpen"}
    assert kept["carried"] == [request_id]  # the request it carries, not a copy of the answer
    assert kept["leftOpen"] == []  # nothing else stays open through its turn
    assert claiming.drain() == 1
    assert get_run(operator, accepted["runId"])["output"] == f"send_email: sent to {EMAIL['to']}"
    assert len(mail.outbox) == 1


def test_a_queued_turn_that_abandons_requests_goes_on_as_a_turn_run_here(operator, assistant):
    message = call_line("send_email", EMAIL) + "\n" + call_line("get_user_location")
    ended = []
    for session, queued in (("here", False), ("queued", True)):
        run_ok(operator, {"message": message, "sessionId": session})
        body = {"sessionId": session, "message": "never mind", "abandonPending": True}
        if queued:
            accepted = queue_run(operator, body)
            assert claiming.drain() == 1
            ended.append(get_run(operator, accepted["runId"]))
        else:
            ended.append(run_ok(operator, body))

    here, worked = ended
    assert (worked["status"], worked["output"]) == (here["status"], here["output"])
    assert [e.type for e in stored_events(worked["runId"])] == [e.type for e in stored_events(here["runId"])]
    assert mail.outbox == []


def test_a_run_queued_with_a_copy_of_its_answers_runs_on_that_copy(operator, assistant):
    """A run queued before the answers were left on their requests only kept the engine's answers beside its
    input; its worker reads them from there."""
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "a2"})
    pending = asked["pendingRequests"][0]
    outcome = operator.api(
        "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": pending["requestId"], "approved": True}
    ).json()
    continuation = Run.objects.get(id=outcome["continuationRunId"])
    copy = Answers()
    copy.deny(pending["callId"], "Not today")  # unlike the request's answer: the copy is what the worker reads
    continuation.queued_input = {**continuation.queued_input, "answers": copy.dump()}
    continuation.save(update_fields=["queued_input"])

    assert claiming.drain() == 1

    assert get_run(operator, str(continuation.id))["output"] == "send_email denied: Not today"
    assert mail.outbox == []


def test_it_refuses_a_bad_lane_and_changes_nothing(operator, assistant):
    before = snapshot()

    response = run(operator, {"message": "hi", "lane": "Not A Lane"}, **ASYNC)

    problem = assert_problem(response, 400, "invalid_request")
    assert [e["field"] for e in problem["errors"]] == ["lane"]
    assert snapshot() == before  # no run, no task


def test_it_checks_a_queued_request_like_any_other(operator, assistant):
    before = snapshot()
    assert_problem(run(operator, {"message": "hi", "parameters": {"nope": 1}}, **ASYNC), 400, "unknown_parameter")
    assert snapshot() == before


def test_it_holds_a_lane_to_its_limit_over_all_workers(operator, assistant, settings):
    settings.RUN_LANES = {"slow": 1}
    first = queue_run(operator, {"message": "one", "lane": "slow"})
    second = queue_run(operator, {"message": "two", "lane": "slow"})
    other = queue_run(operator, {"message": "three", "lane": "fast"})

    taken = claiming.claim_task("worker-a")
    assert taken is not None and taken.args_kwargs["args"] == [first["runId"]]
    # Lane "slow" is full while its first run runs: the next claim takes the other lane's run.
    taken_next = claiming.claim_task("worker-b")
    assert taken_next is not None and taken_next.args_kwargs["args"] == [other["runId"]]
    assert claiming.claim_task("worker-c") is None
    assert Run.objects.get(id=second["runId"]).status == RunStatus.QUEUED

    queue.run_claimed(taken)
    assert Run.objects.get(id=first["runId"]).status == RunStatus.COMPLETED
    assert claiming.drain(["slow"]) == 1
    assert Run.objects.get(id=second["runId"]).status == RunStatus.COMPLETED


def test_a_batch_claim_takes_one_task_per_worker_within_the_lanes_limits(operator, assistant, settings):
    settings.RUN_LANES = {"slow": 1, "long-" + "x" * 40: 1}
    slow = [queue_run(operator, {"message": f"slow {n}", "lane": "slow"})["runId"] for n in range(3)]
    long = [queue_run(operator, {"message": f"long {n}", "lane": "long-" + "x" * 40})["runId"] for n in range(2)]
    fast = [queue_run(operator, {"message": f"fast {n}", "lane": "fast"})["runId"] for n in range(2)]

    taken = claiming.claim_batch(["worker-a", "worker-b", "worker-c", "worker-d", "worker-e"])

    # One of each limited lane, both of the other: four tasks for five workers, in queue order.
    assert [task.args_kwargs["args"][0] for task in taken] == [slow[0], long[0], *fast]
    for task, worker_id in zip(taken, ["worker-a", "worker-b", "worker-c", "worker-d"], strict=True):
        run_id = task.args_kwargs["args"][0]
        assert task.worker_ids == [worker_id]
        assert Run.objects.filter(id=run_id, status=RunStatus.RUNNING, worker_id=worker_id, attempts=1).exists()
    assert claiming.claim_batch(["worker-f", "worker-g"]) == []
    assert set(Run.objects.filter(status=RunStatus.QUEUED).values_list("id", flat=True)) == {
        Run.objects.get(id=run_id).id for run_id in [*slow[1:], *long[1:]]
    }


def test_a_worker_of_some_lanes_leaves_the_others_alone(operator, assistant):
    mine = queue_run(operator, {"message": "mine", "lane": "reports"})
    theirs = queue_run(operator, {"message": "theirs"})

    assert claiming.drain(["reports"]) == 1

    assert Run.objects.get(id=mine["runId"]).status == RunStatus.COMPLETED
    assert Run.objects.get(id=theirs["runId"]).status == RunStatus.QUEUED


def test_a_lane_longer_than_a_queue_name_still_works(operator, assistant):
    lane = "a" * 64
    accepted = queue_run(operator, {"message": "long", "lane": lane})

    assert claiming.drain([lane]) == 1
    assert get_run(operator, accepted["runId"])["lane"] == lane


def test_it_cancels_a_queued_run(operator, assistant):
    accepted = queue_run(operator, {"message": "never", "sessionId": "c1"})

    response = operator.api("POST", f"/api/runs/{accepted['runId']}/cancel")

    assert response.json() == {"runId": accepted["runId"], "status": "cancelled"}
    assert claiming.drain() == 0
    result = get_run(operator, accepted["runId"])
    assert (result["status"], result["output"]) == ("cancelled", None)
    assert stored_events(accepted["runId"])[-1].type == "run.cancelled"
    # The session is free for its next turn.
    assert run_ok(operator, {"message": "again", "sessionId": "c1"})["status"] == "completed"


def test_cancelling_a_queued_continuation_keeps_the_answer_for_the_next_turn(operator, assistant):
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "k1"})
    request_id = asked["pendingRequests"][0]["requestId"]
    outcome = operator.api(
        "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id, "approved": True}
    ).json()
    continuation = outcome["continuationRunId"]
    assert Run.objects.get(id=continuation).status == RunStatus.QUEUED

    assert operator.api("POST", f"/api/runs/{continuation}/cancel").json()["status"] == "cancelled"

    pending = PendingRequest.objects.get(id=request_id)
    assert (pending.status, pending.answer["approved"], pending.answered_in) == (RequestStatus.PENDING, True, None)
    assert mail.outbox == []
    after = run_ok(operator, {"message": "", "sessionId": "k1"})
    assert after["output"] == f"send_email: sent to {EMAIL['to']}"
    assert len(mail.outbox) == 1


def test_a_cancel_asked_elsewhere_reaches_the_running_turn(operator, assistant):
    accepted = queue_run(operator, {"message": "hi"})
    claiming.claim_task("worker-elsewhere")

    response = operator.api("POST", f"/api/runs/{accepted['runId']}/cancel")

    assert response.json()["status"] == "cancelling"
    assert Run.objects.get(id=accepted["runId"]).cancel_requested


def test_it_refuses_to_cancel_a_finished_run(operator, assistant):
    done = run_ok(operator, {"message": "hi"})
    before = snapshot()
    assert_problem(operator.api("POST", f"/api/runs/{done['runId']}/cancel"), 409, "run_finished")
    assert snapshot() == before


def test_a_continuation_from_the_inbox_is_queued_on_the_lane_that_asked(operator, assistant):
    accepted = queue_run(operator, {"message": call_line("send_email", EMAIL), "sessionId": "l1", "lane": "mail"})
    claiming.drain()
    asked = get_run(operator, accepted["runId"])
    assert asked["status"] == "awaiting_approval"

    outcome = operator.api(
        "POST",
        f"/api/runs/{accepted['runId']}/responses",
        {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True},
    ).json()

    continuation = Run.objects.get(id=outcome["continuationRunId"])
    assert (continuation.status, continuation.lane) == (RunStatus.QUEUED, "mail")
    assert mail.outbox == []
    assert claiming.drain(["default"]) == 0
    assert claiming.drain(["mail"]) == 1
    continuation.refresh_from_db()
    assert (continuation.status, len(mail.outbox)) == (RunStatus.COMPLETED, 1)


def test_it_retries_a_rate_limited_turn(operator, remote, fake):
    fake.fail(429)
    fake.fail(503)
    fake.reply_text("Done.")
    accepted = queue_run(operator, {"message": "hi"}, agent="remote")

    assert claiming.drain() == 3

    result = get_run(operator, accepted["runId"])
    assert (result["status"], result["output"]) == ("completed", "Done.")
    retries = [e for e in stored_events(accepted["runId"]) if e.type == "run.retrying"]
    assert [(e.data["attempt"], e.data["error"]["code"]) for e in retries] == [
        (1, "provider_rate_limited"),
        (2, "provider_unavailable"),
    ]
    assert Run.objects.get(id=accepted["runId"]).attempts == 3


def test_it_gives_up_after_the_last_attempt(operator, remote, fake, settings):
    settings.RUN_MAX_ATTEMPTS = 2
    fake.fail(429)
    fake.fail(429)
    accepted = queue_run(operator, {"message": "hi"}, agent="remote")

    claiming.drain()

    result = get_run(operator, accepted["runId"])
    assert (result["status"], result["error"]["code"]) == ("failed", "provider_rate_limited")
    assert Run.objects.get(id=accepted["runId"]).attempts == 2


def test_it_never_retries_a_permanent_failure(operator, remote, fake):
    fake.fail(401)
    accepted = queue_run(operator, {"message": "hi"}, agent="remote")

    assert claiming.drain() == 1
    assert get_run(operator, accepted["runId"])["error"]["code"] == "provider_auth_failed"


def test_it_never_retries_once_a_tool_with_side_effects_ran(operator, remote, fake):
    fake.reply_tool_call("send_email", EMAIL)
    fake.fail(503)
    accepted = queue_run(operator, {"message": "mail it"}, agent="remote")

    assert claiming.drain() == 1

    result = get_run(operator, accepted["runId"])
    assert (result["status"], result["error"]["code"]) == ("failed", "provider_unavailable")
    assert len(mail.outbox) == 1


def test_it_retries_after_a_tool_without_side_effects(operator, remote, fake):
    fake.reply_tool_call("get_time", {})
    fake.fail(503)
    fake.reply_tool_call("get_time", {})
    fake.reply_text("It is late.")
    accepted = queue_run(operator, {"message": "time?"}, agent="remote")

    claiming.drain()

    assert get_run(operator, accepted["runId"])["output"] == "It is late."


def lose_worker(run_id: str) -> Run:
    """Claim the run's task as a worker that then dies: its lease runs out."""
    assert claiming.claim_task("worker-that-dies") is not None
    Run.objects.filter(id=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    return Run.objects.get(id=run_id)


def test_it_queues_again_a_run_whose_worker_died(operator, assistant):
    accepted = queue_run(operator, {"message": "hello"})
    lose_worker(accepted["runId"])

    [reclaimed] = keeper.reclaim_lost()

    assert str(reclaimed.id) == accepted["runId"]
    assert Run.objects.get(id=accepted["runId"]).status == RunStatus.QUEUED
    assert DBTaskResult.objects.filter(status="FAILED").count() == 1
    assert claiming.drain() == 1
    result = get_run(operator, accepted["runId"])
    assert (result["status"], result["output"]) == ("completed", "You said: hello")
    [retry] = [e for e in stored_events(accepted["runId"]) if e.type == "run.retrying"]
    assert retry.data["error"]["code"] == "worker_lost"


def test_a_run_lost_on_its_last_attempt_fails_worker_lost_and_keeps_its_answers(operator, assistant, settings):
    settings.RUN_MAX_ATTEMPTS = 1
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "w1"})
    request_id = asked["pendingRequests"][0]["requestId"]
    continuation = operator.api(
        "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id, "approved": True}
    ).json()["continuationRunId"]
    lose_worker(continuation)

    keeper.reclaim_lost()

    result = get_run(operator, continuation)
    assert (result["status"], result["error"]["code"]) == ("failed", "worker_lost")
    pending = PendingRequest.objects.get(id=request_id)
    assert (pending.status, pending.answer["approved"]) == (RequestStatus.PENDING, True)
    # An answer now cannot resume the lost turn: the respond says so (SPEC section 9), and nothing changes.
    again = operator.api("POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id, "approved": False})
    assert again.json()["status"] == "runtime_unavailable"
    assert PendingRequest.objects.get(id=request_id).answer["approved"] is True
    assert run_ok(operator, {"message": "", "sessionId": "w1"})["output"] == f"send_email: sent to {EMAIL['to']}"


def test_the_last_answer_queues_its_continuation_and_the_worker_that_takes_it_begins_it(operator, assistant):
    """The answer that completes a session writes its continuation, the task and the answer carried by it, nothing
    more (issue 32); the worker that takes the run records its start, after the asked run's last event, and once
    however often the run is tried (here its first worker dies before storing anything)."""
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "b1"})
    request_id = asked["pendingRequests"][0]["requestId"]
    continuation = operator.api(
        "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id, "approved": True}
    ).json()["continuationRunId"]
    pending = PendingRequest.objects.get(id=request_id)
    assert (Run.objects.get(id=continuation).status, pending.status) == (RunStatus.QUEUED, RequestStatus.ANSWERED)
    assert (str(pending.answered_in_id), stored_events(continuation)) == (continuation, [])

    lose_worker(continuation)
    keeper.reclaim_lost()
    assert claiming.drain() == 1

    events = stored_events(continuation)
    types = [event.type for event in events]
    assert types[:4] == ["run.started", "permission.completed", "request.answered", "run.retrying"]
    assert (types.count("run.started"), types.count("permission.completed"), types[-1]) == (1, 1, "run.completed")
    assert events[0].parent_id == stored_events(asked["runId"])[-1].id
    assert events[2].data["answeredBy"] == operator.user.username
    assert get_run(operator, continuation)["output"] == f"send_email: sent to {EMAIL['to']}"
    assert len(mail.outbox) == 1


def test_the_database_keeps_one_turn_at_a_time_per_session(operator, assistant):
    """A second queued or running run of a session is refused by the database itself, whatever writes it (issue 32:
    the last answer's continuation asks nothing else); runs that ended, and runs of other sessions, are not."""
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "one-turn"})
    first = Run.objects.select_related("session").get(id=asked["runId"])

    def another(status: str, session: Any = first.session) -> Run:
        return Run.objects.create(
            tenant=first.tenant, agent=first.agent, version=first.version, session=session, status=status
        )

    another(RunStatus.QUEUED)
    with pytest.raises(IntegrityError), transaction.atomic():
        another(RunStatus.RUNNING)
    another(RunStatus.COMPLETED)
    another(RunStatus.QUEUED, session=None)
    another(RunStatus.QUEUED, session=None)
    assert Run.objects.filter(session=first.session, status__in=(RunStatus.QUEUED, RunStatus.RUNNING)).count() == 1


def test_a_last_answer_that_finds_another_turn_on_its_way_is_stored_and_starts_none(operator, assistant):
    """The session is busy when its last answer comes (another turn queued): the answer is stored, to go with the
    session's next turn, and no second turn starts."""
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "b2"})
    first = Run.objects.get(id=asked["runId"])
    busy = Run.objects.create(
        tenant=first.tenant, agent=first.agent, version=first.version, session=first.session, status=RunStatus.QUEUED
    )
    request_id = asked["pendingRequests"][0]["requestId"]
    body = {"requestId": request_id, "approved": True}
    answered = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()

    assert (answered["status"], answered["continuationRunId"]) == ("accepted", None)
    pending = PendingRequest.objects.get(id=request_id)
    assert (pending.status, pending.answered_in_id, pending.answer["approved"]) == (RequestStatus.PENDING, None, True)
    assert list(Run.objects.filter(session=first.session_id, status=RunStatus.QUEUED)) == [busy]
    assert stored_events(str(busy.id)) == []


def test_it_leaves_a_run_alone_while_its_lease_holds(operator, assistant):
    accepted = queue_run(operator, {"message": "hello"})
    claiming.claim_task("worker-alive")

    assert keeper.reclaim_lost() == []
    assert Run.objects.get(id=accepted["runId"]).status == RunStatus.RUNNING


def test_a_late_outcome_of_a_reclaimed_run_is_dropped(operator, assistant):
    accepted = queue_run(operator, {"message": "hello"})
    task = claiming.claim_task("worker-slow")
    assert task is not None
    Run.objects.filter(id=accepted["runId"]).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    keeper.reclaim_lost()  # queued again
    queue.run_claimed(task)  # the slow worker wakes up: its turn must not land

    assert Run.objects.get(id=accepted["runId"]).status == RunStatus.QUEUED
    claiming.drain()
    assert [e.type for e in stored_events(accepted["runId"])].count("run.completed") == 1


def test_a_claimed_task_ends_with_its_runs_outcome(operator, assistant):
    """The task's row ends in the outcome's statement (issue 56), as django-tasks-db's worker would end it, and once."""
    accepted = queue_run(operator, {"message": "hello", "sessionId": "ends"})
    task = claiming.claim_task("worker-a")
    assert task is not None
    with CaptureQueriesContext(connection) as statements:
        queue.run_claimed(task)

    row = DBTaskResult.objects.get(id=task.id)
    ended = (row.status, row.return_value, row.exception_class_path, row.traceback)
    assert ended == ("SUCCESSFUL", "completed", "", "")
    assert row.finished_at is not None and (task.status, task.finished_at) == (row.status, row.finished_at)
    assert Run.objects.get(id=accepted["runId"]).status == RunStatus.COMPLETED
    written = [s["sql"] for s in statements.captured_queries if "django_tasks_database_dbtaskresult" in s["sql"]]
    assert len(written) == 1, written
    if connection.vendor == "postgresql":
        assert '"agents_run"' in written[0]  # the run's outcome and its task's end in one statement


def test_the_outcome_of_a_run_taken_over_meanwhile_writes_neither_the_run_nor_its_session(operator, assistant):
    """The run's outcome and its session's row are written in one statement on PostgreSQL (`update_together`): when
    the run is no longer held by the worker finishing it, neither is written."""
    accepted = queue_run(operator, {"message": "hello", "sessionId": "late"})
    assert claiming.claim_task("worker-slow") is not None
    started = queue.load_started(queue.loaded_runs().get(id=accepted["runId"]))
    result = run_here(execute(started))
    assert result.outcome is not None and result.outcome.conversation is not None
    Run.objects.filter(id=accepted["runId"]).update(worker_id="worker-new")  # its lease ran out; another holds it

    finish_run(started, result)

    session = Session.objects.get(key="late")
    assert (session.conversation, session.last_run_id, session.checkpoints.count()) == (None, None, 0)
    assert Run.objects.get(id=accepted["runId"]).status == RunStatus.RUNNING


def test_another_tenants_queued_run_is_not_found(operator, outsider, assistant):
    accepted = queue_run(operator, {"message": "hello"})
    before = snapshot()

    assert_problem(outsider.api("POST", f"/api/runs/{accepted['runId']}/cancel"), 404, "run_not_found")
    assert snapshot() == before


def test_a_reader_may_not_queue_a_run(reader, assistant):
    before = snapshot()
    assert_problem(run(reader, {"message": "hi"}, **ASYNC), 403, "forbidden")
    assert snapshot() == before


# --- a turn that fails after its answers were applied -----------------------------------------------


@pytest.fixture
def asking(admin, fake, monkeypatch) -> Agent:
    """On the loopback model: send_email (side effects) and get_time (none), both asking for approval."""
    monkeypatch.setenv(KEY_ENV, "sk-queue-test")
    grant("loopback", "openai", admin.tenant, base_url=fake.base_url, api_key_env=KEY_ENV)
    content = {
        "name": "asking",
        "model": {"connection": "loopback", "name": "loopback"},
        "tools": [{"name": "get_time", "approval": "always"}, {"name": "send_email", "approval": "always"}],
    }
    return Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)


def test_an_approved_call_that_ran_in_a_failed_turn_never_runs_again(operator, asking, fake):
    fake.reply_tool_call("send_email", EMAIL)
    asked = run_ok(operator, {"message": "mail ada", "sessionId": "f1"}, agent="asking")
    request_id = asked["pendingRequests"][0]["requestId"]
    fake.fail(401)  # the mail goes out, then the model fails for good

    failed = run_ok(
        operator, {"sessionId": "f1", "approvals": [{"requestId": request_id, "approved": True}]}, agent="asking"
    )

    assert (failed["status"], failed["error"]["code"]) == ("failed", "provider_auth_failed")
    assert len(mail.outbox) == 1
    pending = PendingRequest.objects.get(id=request_id)
    assert (pending.status, pending.answer["ranInFailedTurn"]) == (RequestStatus.PENDING, True)

    fake.reply_text("Noted.")
    after = run_ok(operator, {"message": "", "sessionId": "f1"}, agent="asking")

    assert (after["status"], after["output"]) == ("completed", "Noted.")
    assert len(mail.outbox) == 1  # not sent twice
    [told] = [m for m in fake.requests[-1].messages if m.get("role") == "tool"]
    assert "already ran" in told["content"]
    # The approval's SDK completion is the failed turn's; the next turn says the call ran there, and did not run it.
    assert not [e for e in stored_events(after["runId"]) if e.type == "permission.completed"]
    [answered] = [e.data for e in stored_events(after["runId"]) if e.type == "request.answered"]
    assert (answered["requestId"], answered["ranInFailedTurn"]) == (request_id, True)


def test_a_remembered_approval_makes_one_rule_however_often_its_turn_is_tried(operator, asking, fake):
    fake.reply_tool_call("get_time", {})
    asked = run_ok(operator, {"message": "time?", "sessionId": "r1"}, agent="asking")
    request_id = asked["pendingRequests"][0]["requestId"]
    fake.fail(401)
    approval = {"requestId": request_id, "approved": True, "remember": True}

    failed = run_ok(operator, {"sessionId": "r1", "approvals": [approval]}, agent="asking")
    assert failed["status"] == "failed"
    fake.reply_text("It is late.")
    after = run_ok(operator, {"message": "", "sessionId": "r1"}, agent="asking")

    assert after["output"] == "It is late."
    assert Rule.objects.filter(tool_name="get_time").count() == 1
