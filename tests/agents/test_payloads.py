"""Event payloads as the Copilot SDK's session events (SPEC section 10): every event a run stores validates
against its pydantic model and against the JSON schema published at /api/events/schema.json; the shapes field
for field; and the data migration that rewrote the events stored before."""

import importlib
import uuid
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from jsonschema import Draft202012Validator

from agents.models import Event, Run
from agents.payloads import PAYLOADS, EventType, validate
from tests.helpers import EMAIL, ask_to_send, call_line, make_agent, run_ok, run_queued, stored_events

rewrite = importlib.import_module("agents.migrations.0008_event_payloads").rewrite


def schema_of(persona: Any) -> dict[str, Any]:
    response = persona.api("GET", "/api/events/schema.json")
    assert response.status_code == 200, response.content
    return response.json()


def assert_valid(schema: dict[str, Any], envelopes: list[dict[str, Any]]) -> None:
    """Each envelope against the pydantic models and against the published JSON schema."""
    envelope_schema = Draft202012Validator(schema["envelope"])
    for envelope in envelopes:
        validate(envelope)
        envelope_schema.validate(envelope)
        Draft202012Validator(schema["payloads"][envelope["type"]]).validate(envelope["data"])


def envelopes_of(persona: Any, run_id: Any) -> list[dict[str, Any]]:
    response = persona.api("GET", f"/api/runs/{run_id}/events")
    assert response.status_code == 200, response.content
    return response.json()["items"]


def data_of(envelopes: list[dict[str, Any]], event_type: str) -> list[dict[str, Any]]:
    return [e["data"] for e in envelopes if e["type"] == event_type]


def test_the_schema_names_every_type_and_its_payload(operator):
    schema = schema_of(operator)

    assert set(schema["payloads"]) == {str(t) for t in EventType} == set(PAYLOADS)
    assert set(schema["ephemeral"]) == {
        "assistant.message_delta",
        "assistant.reasoning_delta",
        "tool.execution_progress",
        "tool.execution_partial_result",
        "session.idle",
        "session.title_changed",
    }
    delta = schema["payloads"]["assistant.message_delta"]
    assert set(delta["required"]) == {"messageId", "deltaContent"}
    assert set(schema["envelope"]["required"]) >= {"id", "runId", "sequence", "timestamp", "type", "data"}


def test_the_schema_needs_a_signed_in_caller(client):
    assert client.get("/api/events/schema.json").status_code == 401


def test_a_turn_with_a_tool_reads_as_the_sdk_events(operator, assistant):
    result = run_ok(operator, {"message": call_line("get_time"), "sessionId": "s1"})
    envelopes = envelopes_of(operator, result["runId"])
    assert_valid(schema_of(operator), envelopes)

    starts, ends = data_of(envelopes, "assistant.turn_start"), data_of(envelopes, "assistant.turn_end")
    assert [s["turnId"] for s in starts] == [e["turnId"] for e in ends] and len(starts) == 2
    asking, answer = data_of(envelopes, "assistant.message")
    [call] = asking["toolRequests"]
    assert (call["name"], call["arguments"]) == ("get_time", {})
    assert "toolRequests" not in answer and answer["messageId"] != asking["messageId"]
    [start] = data_of(envelopes, "tool.execution_start")
    [complete] = data_of(envelopes, "tool.execution_complete")
    assert start["toolCallId"] == complete["toolCallId"] == call["toolCallId"]
    assert complete["success"] is True and isinstance(complete["result"]["content"], str)
    assert "error" not in complete and "callId" not in start
    usages = data_of(envelopes, "assistant.usage")
    assert len(usages) == 2  # one per model call
    assert all(u["model"] == "scripted" and u["duration"] >= 0 for u in usages)
    assert sum(u["inputTokens"] for u in usages) == result["usage"]["inputTokens"]


def test_a_session_of_every_kind_validates(operator, admin):
    """An approval answered, a rule's approval, a question, a plan, a client tool, a failed turn."""
    make_agent(
        admin,
        tools=[*({"name": n} for n in ("ask_user", "propose_plan")), {"name": "send_email", "approval": "always"}],
    )
    schema = schema_of(operator)
    asked = ask_to_send(operator, "kinds")
    [request] = asked["pendingRequests"]
    body = {"requestId": request["requestId"], "approved": True, "remember": True}
    answered = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()
    continued = run_queued(answered["continuationRunId"])
    again = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "kinds"})
    question = run_ok(
        operator, {"message": call_line("ask_user", {"question": "Which?", "choices": ["a"]}), "sessionId": "q"}
    )
    plan = run_ok(operator, {"message": call_line("propose_plan", {"steps": ["one", "two"]}), "sessionId": "p"})
    client_tool = run_ok(operator, {"message": call_line("get_user_location"), "sessionId": "c"})
    runs = [asked["runId"], continued.id, again["runId"], question["runId"], plan["runId"], client_tool["runId"]]

    everything = [e for run_id in runs for e in envelopes_of(operator, run_id)]
    assert_valid(schema, everything)

    [requested] = data_of(envelopes_of(operator, asked["runId"]), "permission.requested")
    assert requested["permissionRequest"] == {
        "kind": "tool",
        "toolCallId": request["callId"],
        "toolName": "send_email",
        "arguments": EMAIL,
    }
    [completed] = data_of(envelopes_of(operator, continued.id), "permission.completed")
    assert (completed["requestId"], completed["result"]["kind"]) == (request["requestId"], "approved")
    by_rule = envelopes_of(operator, again["runId"])
    [rule_completed] = data_of(by_rule, "permission.completed")  # nobody was asked: no permission.requested
    assert not data_of(by_rule, "permission.requested")
    uuid.UUID(rule_completed["requestId"])
    assert rule_completed["result"]["kind"] == "approved-by-rule" and rule_completed["result"]["ruleId"]
    [asking] = data_of(envelopes_of(operator, question["runId"]), "user_input.requested")
    assert (asking["question"], asking["choices"], asking["allowFreeform"]) == ("Which?", ["a"], False)
    [proposing] = data_of(envelopes_of(operator, plan["runId"]), "exit_plan_mode.requested")
    assert (proposing["planContent"], proposing["actions"]) == ("1. one\n2. two", ["approve", "revise"])
    [external] = data_of(envelopes_of(operator, client_tool["runId"]), "external_tool.requested")
    assert (external["sessionId"], external["toolName"]) == ("c", "get_user_location")


def test_a_failed_turn_says_session_error(operator, admin):
    make_agent(admin, tools=[{"name": "send_email", "approval": "always"}])
    result = run_ok(operator, {"message": call_line("send_email", EMAIL)})  # asks, with no session to answer in
    envelopes = envelopes_of(operator, result["runId"])
    assert_valid(schema_of(operator), envelopes)
    [failed], [error] = data_of(envelopes, "run.failed"), data_of(envelopes, "session.error")
    assert error == {"errorType": failed["error"]["code"], "message": failed["error"]["message"]}


# ---- the data migration -----------------------------------------------------------------------------------

OLD_RUN = [
    (
        "run.started",
        {
            "agent": "a",
            "definitionVersion": 1,
            "sessionId": "s",
            "culture": None,
            "parameters": {},
            "previousRunId": None,
        },
    ),
    ("user.message", {"content": "hi"}),
    ("assistant.turn_start", {}),
    ("assistant.message", {"content": "Let me check."}),
    ("assistant.turn_end", {}),
    ("tool.execution_start", {"toolName": "get_time", "callId": "c1", "arguments": {}, "sideEffects": False}),
    ("tool.execution_complete", {"toolName": "get_time", "callId": "c1", "success": True, "result": {"now": "12:00"}}),
    ("tool.execution_complete", {"toolName": "boom", "callId": "c2", "success": False, "error": "ValueError: no"}),
    (
        "permission.completed",
        {
            "toolName": "send_email",
            "callId": "c3",
            "arguments": {"to": "x"},
            "result": {"kind": "approved-by-rule", "ruleId": "r1"},
        },
    ),
    (
        "permission.requested",
        {
            "requestId": "q1",
            "toolName": "send_email",
            "callId": "c4",
            "arguments": {"to": "y"},
            "message": None,
            "requestedSchema": None,
            "expiresAt": None,
            "policy": None,
        },
    ),
    (
        "external_tool.completed",
        {
            "requestId": "q2",
            "toolName": "loc",
            "callId": "c5",
            "answeredBy": None,
            "result": {"kind": "expired", "reason": "late"},
        },
    ),
    ("request.terminated", {"requestId": "q2", "kind": "expired", "toolName": "loc", "callId": "c5"}),
    (
        "policy.verdict",
        {
            "point": "pre_tool_call",
            "decision": "deny",
            "reason": "r",
            "message": "m",
            "binding": "b",
            "enforced": True,
            "toolName": "t",
            "callId": "c6",
        },
    ),
    ("assistant.usage", {"requests": 2, "inputTokens": 10, "outputTokens": 4}),
    ("run.completed", {"output": "done"}),
]


def test_the_migration_rewrites_each_old_shape():
    context = {"model": "scripted", "duration": 42, "sessionKey": "s"}
    new = [rewrite(kind, data, context) for kind, data in OLD_RUN]
    by_type = dict(zip([k for k, _ in OLD_RUN], new, strict=False))

    for (kind, _), data in zip(OLD_RUN, new, strict=True):
        PAYLOADS[kind].model_validate(data)
    assert new[0] == OLD_RUN[0][1] and new[1] == OLD_RUN[1][1] and new[-1] == OLD_RUN[-1][1]  # untouched
    assert new[2]["turnId"] == new[4]["turnId"]
    assert new[3] == {"messageId": new[3]["messageId"], "content": "Let me check."}
    assert new[5] == {"toolName": "get_time", "toolCallId": "c1", "arguments": {}, "sideEffects": False}
    assert new[6]["result"]["content"] == '{"now": "12:00"}' and new[6]["toolCallId"] == "c1"
    assert new[7]["error"] == {"message": "ValueError: no"} and new[7]["success"] is False
    assert new[8]["result"] == {"kind": "approved-by-rule", "ruleId": "r1"} and new[8]["arguments"] == {"to": "x"}
    uuid.UUID(new[8]["requestId"])  # a rule's decision had no request: it gets an id of its own
    assert new[9] == {
        "requestId": "q1",
        "permissionRequest": {"kind": "tool", "toolCallId": "c4", "toolName": "send_email", "arguments": {"to": "y"}},
    }
    assert new[10]["closed"] == {"kind": "expired", "reason": "late"} and "result" not in new[10]
    assert by_type["request.terminated"]["toolCallId"] == "c5"
    assert by_type["policy.verdict"]["toolCallId"] == "c6"
    assert by_type["assistant.usage"] == {"model": "scripted", "inputTokens": 10, "outputTokens": 4, "duration": 42}
    again = [rewrite(kind, data, dict(context)) for (kind, _), data in zip(OLD_RUN, new, strict=True)]
    assert again == new  # a second pass changes nothing


@pytest.mark.django_db(transaction=True)
def test_the_migration_rewrites_stored_events_and_nothing_else(operator, assistant):
    result = run_ok(operator, {"message": call_line("get_time"), "sessionId": "m"})
    run = Run.objects.get(pk=result["runId"])
    Event.objects.filter(run=run).delete()
    old = [
        Event(run=run, sequence=n, parent_id=None, type=kind, data=data) for n, (kind, data) in enumerate(OLD_RUN, 1)
    ]
    Event.objects.bulk_create(old)
    before = {e.id: (e.sequence, e.type, e.timestamp, e.parent_id, e.data) for e in stored_events(str(run.id))}

    executor = MigrationExecutor(connection)
    executor.migrate([("agents", "0007_checkpoints")])
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    after = {e.id: e for e in stored_events(str(run.id))}
    assert set(after) == set(before)
    for event_id, (sequence, kind, timestamp, parent, data) in before.items():
        event = after[event_id]
        assert (event.sequence, event.type, event.timestamp, event.parent_id) == (sequence, kind, timestamp, parent)
        PAYLOADS[kind].model_validate(event.data)
        if kind in ("run.started", "user.message", "run.completed"):
            assert event.data == data
    usage = next(e for e in after.values() if e.type == "assistant.usage")
    assert usage.data["model"] == "scripted" and usage.data["inputTokens"] == 10
