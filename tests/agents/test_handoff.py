"""The hand-over of a run queued in this process to an idle worker thread (agents.seats.Seat): a run refused as it
starts writes nothing and gives its thread back; a handed run reads its rules as its turn begins. (The hand-over
with real servers: tests/processes/test_handoff.py.)"""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import claiming, keeper, queue
from agents.models import Run, RunStatus
from agents.prepare import RunRejected, live_version, prepare_run
from agents.run_requests import RunRequest
from approvals.models import Rule
from tests.helpers import EMAIL, call_line, run_handed, run_ok, stored_events

pytestmark = pytest.mark.django_db(transaction=True)

SEND = call_line("send_email", EMAIL)


def test_a_run_refused_as_it_starts_gives_its_seat_back(operator, assistant, seat):
    version = live_version(operator.tenant, "assistant", None)
    prepared = prepare_run(operator.tenant, version, RunRequest(message="hello", session_id="kept"))
    first = queue.start_queued(prepared, operator.user)
    assert Run.objects.get(pk=first.run.pk).status == RunStatus.RUNNING  # handed to the pool's one thread
    seat.idle(0)  # its turn ended (this test runs none): the thread is idle again

    # The same request again: its session was made meanwhile, so the start is refused once the seat is taken.
    with pytest.raises(RunRejected) as refused:
        queue.start_queued(prepared, operator.user)
    assert refused.value.code == "session_busy"
    assert Run.objects.count() == 1
    assert seat.take_idle() == 0  # the refused start gave the thread back


def test_a_handed_run_consults_the_rules_in_force_as_its_turn_begins(operator, assistant, seat):
    asked = run_ok(operator, {"message": SEND, "sessionId": "first"})
    remembered = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True, "remember": True}
    answered = operator.api("POST", f"/api/runs/{asked['runId']}/responses", remembered).json()
    assert Run.objects.get(pk=answered["continuationRunId"]).status == RunStatus.RUNNING  # handed over
    run_handed(seat)
    assert Rule.objects.filter(tenant=operator.tenant, tool_name="send_email").count() == 1

    # A run queued and handed over in another session: its turn reads the rule, and the call goes through unasked.
    version = live_version(operator.tenant, "assistant", None)
    started = queue.start_queued(prepare_run(operator.tenant, version, RunRequest(message=SEND)), operator.user)
    run_handed(seat)
    run = Run.objects.get(pk=started.run.pk)
    assert run.status == RunStatus.COMPLETED, run.error
    assert not run.requests.exists()


def test_the_last_answer_hands_its_continuation_over_begun(operator, assistant, seat):
    """The continuation of the last answer, handed to the idle thread, is begun as it is handed (what queueing it
    read under the session's lock: the conversation, the session's last event): its first events follow the asked
    run's last one, name who answered, and are stored with its outcome, once."""
    asked = run_ok(operator, {"message": SEND, "sessionId": "begun"})
    request_id = asked["pendingRequests"][0]["requestId"]
    answered = operator.api(
        "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id, "approved": True}
    )
    continuation = answered.json()["continuationRunId"]
    assert Run.objects.get(pk=continuation).status == RunStatus.RUNNING  # handed over
    assert not stored_events(continuation)

    run_handed(seat)

    run = Run.objects.get(pk=continuation)
    assert (run.status, run.output) == (RunStatus.COMPLETED, f"send_email: sent to {EMAIL['to']}")
    events = stored_events(continuation)
    assert [e.type for e in events[:3]] == ["run.started", "permission.completed", "request.answered"]
    assert [e.type for e in events].count("run.started") == 1
    assert events[0].parent_id == stored_events(asked["runId"])[-1].id
    assert events[2].data["answeredBy"] == operator.user.username


def test_a_continuation_that_cannot_be_begun_as_it_is_handed_gives_the_thread_back(
    operator, assistant, seat, monkeypatch, settings
):
    """Should beginning it fail once the answer is committed, the answer stands, the thread goes back to idle, and
    the run, its lease run out, is queued again and begun by the worker that takes it."""
    settings.RUN_RETRY_DELAY_SECONDS = 0
    asked = run_ok(operator, {"message": SEND, "sessionId": "unbegun"})
    request_id = asked["pendingRequests"][0]["requestId"]

    def broken(*args: object) -> None:
        raise RuntimeError("beginning failed")

    monkeypatch.setattr(queue, "begin_queued", broken)
    answered = operator.api(
        "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id, "approved": True}
    )
    monkeypatch.undo()

    assert answered.json()["status"] == "accepted"
    continuation = answered.json()["continuationRunId"]
    assert seat.take_idle() == 0  # given back, not left waiting for a task it never gets
    seat.idle(0)
    Run.objects.filter(pk=continuation).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    keeper.reclaim_lost()
    assert claiming.drain() == 1
    run = Run.objects.get(pk=continuation)
    assert (run.status, run.output) == (RunStatus.COMPLETED, f"send_email: sent to {EMAIL['to']}")
    assert [e.type for e in stored_events(continuation)].count("run.started") == 1
