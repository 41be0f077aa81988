"""The respond contract's continuation fields (SPEC section 9): `definitionVersion` (continue on another
version of the agent) and `newRunId` (the continuation's id, chosen by the client); each refusal changes
nothing."""

import json
import uuid
from typing import Any

import pytest

from agents.definitions import DefinitionContent
from agents.models import Run, RunStatus
from tests.helpers import ASSISTANT, EMAIL, assert_problem, make_agent, run_ok, run_queued, snapshot

SEND = f"call send_email {json.dumps(EMAIL)}"


def ask(persona: Any) -> dict[str, Any]:
    result = run_ok(persona, {"message": SEND, "sessionId": "s1"})
    assert result["status"] == "awaiting_approval", result
    return result


def answer(persona: Any, asked: dict[str, Any], **fields: Any) -> Any:
    body = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True, **fields}
    return persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)


def test_the_continuation_runs_on_the_version_the_answer_names(admin, operator):
    agent = make_agent(admin)
    asked = ask(operator)
    edited = DefinitionContent.model_validate({**ASSISTANT, "instructions": "Version two."})
    agent.append_version(edited, admin.user, note="edited while the run waited")

    outcome = answer(operator, asked, definitionVersion=2).json()
    continued = run_queued(outcome["continuationRunId"])

    assert (continued.status, continued.version.number) == (RunStatus.COMPLETED, 2)
    assert continued.output == "send_email: sent to ada@example.com"


def test_without_a_version_the_continuation_keeps_the_one_that_asked(admin, operator):
    agent = make_agent(admin)
    asked = ask(operator)
    agent.append_version(DefinitionContent.model_validate(ASSISTANT), admin.user)

    continued = run_queued(answer(operator, asked).json()["continuationRunId"])

    assert continued.version.number == 1


def test_a_version_that_does_not_exist_is_refused(admin, operator):
    make_agent(admin)
    asked = ask(operator)
    before = snapshot()

    assert_problem(answer(operator, asked, definitionVersion=7), 400, "unknown_version")
    for not_a_number in (True, "1", 1.5):
        assert_problem(answer(operator, asked, definitionVersion=not_a_number), 400, "invalid_request")
    assert snapshot() == before


def test_the_continuation_takes_the_run_id_the_client_chose(admin, operator):
    make_agent(admin)
    asked = ask(operator)
    chosen = uuid.uuid4()

    outcome = answer(operator, asked, newRunId=str(chosen)).json()

    assert outcome["continuationRunId"] == str(chosen)
    assert run_queued(chosen).status == RunStatus.COMPLETED
    assert operator.api("GET", f"/api/runs/{chosen}").json()["previousRunId"] == asked["runId"]


def test_a_run_id_in_use_is_refused(admin, operator):
    make_agent(admin)
    asked = ask(operator)
    before = snapshot()

    assert_problem(answer(operator, asked, newRunId=asked["runId"]), 409, "run_exists")
    assert snapshot() == before
    assert Run.objects.count() == 1


def test_a_json_answer_is_read_as_the_requests_type(admin, operator):
    make_agent(admin)
    asked = ask(operator)
    body = {"requestId": asked["pendingRequests"][0]["requestId"], "json": True}

    outcome = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()

    assert outcome["status"] == "accepted"
    assert run_queued(outcome["continuationRunId"]).output == "send_email: sent to ada@example.com"


@pytest.mark.parametrize(
    "fields",
    [
        {"json": "yes"},  # not a boolean: no field of an approval takes it
        {"json": True, "approved": True},  # both ways at once
        {"text": "sure"},  # words answer a question or a plan, not an approval
        {"approved": True, "text": "sure"},
    ],
)
def test_an_answer_of_the_wrong_type_is_a_mismatch_and_changes_nothing(admin, operator, fields):
    make_agent(admin)
    asked = ask(operator)
    before = snapshot()

    body = {"requestId": asked["pendingRequests"][0]["requestId"], **fields}
    outcome = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body)

    assert outcome.status_code == 200
    assert outcome.json()["status"] == "response_type_mismatch"
    assert snapshot() == before
