"""Answers given at the same moment at an earlier checkpoint and at the latest one (SPEC section 9), each through
its own connection: at the latest one they race as any answers do (one `accepted`), at the earlier one each
makes its own fork; no run continues twice and the original session is untouched. Needs PostgreSQL: SQLite
serializes every write, so nothing would race."""

from typing import Any

import pytest
from django.core import mail

from agents.checkpoints import conversation_at
from agents.models import Checkpoint, Run, RunStatus, Session
from approvals.models import PendingRequest, RequestStatus
from tests.approvals.test_respond_race import SEND, answer_together, assistant, pytestmark  # noqa: F401
from tests.helpers import drain_queued, run_ok, run_queued


def ask(persona: Any) -> dict[str, Any]:
    result = run_ok(persona, {"message": SEND, "sessionId": "s1"})
    assert result["status"] == "awaiting_approval", result
    return result


@pytest.mark.usefixtures("assistant")
def test_answers_at_an_earlier_and_at_the_latest_checkpoint_at_once(operator):
    # s1 asked, was answered and sent (its first checkpoint is an earlier one now), then asked again.
    first = ask(operator)
    first_request = first["pendingRequests"][0]["requestId"]
    body = {"requestId": first_request, "approved": True}
    accepted = answer_together(operator, [(first["runId"], body)])[0]
    run_queued(accepted["continuationRunId"])
    second = ask(operator)
    second_request = second["pendingRequests"][0]["requestId"]
    earlier = Checkpoint.objects.get(run_id=first["runId"])
    latest = Checkpoint.objects.get(run_id=second["runId"])
    untouched = list(PendingRequest.objects.filter(id=first_request).values())

    # 10 answers at the earlier checkpoint (each a denial with its own reason) and 10 at the latest one (half
    # naming it, half not), all released at the same moment.
    at_earlier = [
        (first["runId"], {**body, "approved": False, "reason": f"fork {i}", "checkpointId": str(earlier.id)})
        for i in range(10)
    ]
    named = {"checkpointId": str(latest.id)}
    at_latest = [
        (second["runId"], {"requestId": second_request, "approved": True, **(named if i % 2 else {})})
        for i in range(10)
    ]
    outcomes = answer_together(operator, at_earlier + at_latest)

    forks, latest_outcomes = outcomes[:10], outcomes[10:]
    statuses = sorted(o["status"] for o in latest_outcomes)
    assert statuses == ["accepted"] + ["already_resolved"] * 9, statuses
    assert [o["status"] for o in forks] == ["accepted"] * 10
    copies = PendingRequest.objects.filter(id__in=[o["requestId"] for o in forks])
    assert len({copy.session_id for copy in copies}) == 10
    assert {copy.call_id for copy in copies} == {first["pendingRequests"][0]["callId"]}
    continuations = [o["continuationRunId"] for o in outcomes if o["continuationRunId"]]
    assert len(continuations) == len(set(continuations)) == 11

    drain_queued(11)
    # The original went on once, from its latest checkpoint.
    [continued] = Run.objects.filter(session__key="s1", previous_run_id=second["runId"])
    assert (continued.status, continued.output) == (RunStatus.COMPLETED, "send_email: sent to a@b.co")
    assert list(PendingRequest.objects.filter(id=first_request).values()) == untouched
    # Each fork went on once, from the earlier checkpoint, with its own answer.
    for outcome, (_, given) in zip(forks, at_earlier, strict=True):
        copy = PendingRequest.objects.select_related("session").get(id=outcome["requestId"])
        fork = copy.session
        assert (fork.forked_from_session.key, fork.forked_from_checkpoint_id) == ("s1", earlier.id)
        [run] = Run.objects.filter(session=fork)
        assert (str(run.id), run.previous_run_id) == (outcome["continuationRunId"], earlier.run_id)
        assert (run.status, run.output) == (RunStatus.COMPLETED, f"send_email denied: {given['reason']}")
        assert (copy.status, copy.answered_in_id) == (RequestStatus.ANSWERED, run.id)
        at_checkpoint = conversation_at(earlier)
        assert at_checkpoint is not None
        assert fork.conversation["messages"][: earlier.length] == at_checkpoint["messages"]
    assert Session.objects.count() == 11
    # The first answer's mail and the latest one's: no fork sent any.
    assert len(mail.outbox) == 2
