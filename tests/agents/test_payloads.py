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
from agents.server_tools import REGISTRY
from tests.helpers import EMAIL, ask_to_send, call_line, make_agent, run_ok, run_queued, stored_events

rewrite = importlib.import_module("agents.migrations.0008_event_payloads").rewrite
rewrite_sdk = importlib.import_module("agents.migrations.0012_sdk_events").rewrite


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
    never_stored = {
        "assistant.message_delta",
        "assistant.reasoning_delta",
        "tool.execution_progress",
        "tool.execution_partial_result",
        "session.idle",
        "session.title_changed",
    }
    assert set(schema["transient"]) == never_stored
    # The SDK's flag: its requests and the usage are ephemeral too, though Airlock keeps them (docs/events.md).
    assert set(schema["ephemeral"]) == never_stored | {
        "assistant.usage",
        *(
            f"{kind}.{moment}"
            for kind in ("user_input", "elicitation", "exit_plan_mode", "session_limits_exhausted")
            for moment in ("requested", "completed")
        ),
    }
    assert "request.answered" in schema["extensions"] and "permission.requested" not in schema["extensions"]
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
        "kind": "custom-tool",
        "toolName": "send_email",
        "toolDescription": REGISTRY["send_email"].description,
        "args": EMAIL,
        "toolCallId": request["callId"],
    }
    [completed] = data_of(envelopes_of(operator, continued.id), "permission.completed")
    assert (completed["requestId"], completed["result"]["kind"]) == (request["requestId"], "approved")
    by_rule = envelopes_of(operator, again["runId"])
    [rule_completed] = data_of(by_rule, "permission.completed")  # nobody was asked: a request id of its own
    [rule_asked] = data_of(by_rule, "permission.requested")
    assert rule_asked["requestId"] == rule_completed["requestId"] != request["requestId"]
    uuid.UUID(rule_completed["requestId"])
    assert (rule_completed["result"], rule_completed["decisionSource"]) == ({"kind": "approved"}, "host_policy")
    [by] = data_of(by_rule, "request.answered")
    assert by["ruleId"] and "answeredBy" not in by
    [asking] = data_of(envelopes_of(operator, question["runId"]), "user_input.requested")
    assert (asking["question"], asking["choices"], asking["allowFreeform"]) == ("Which?", ["a"], False)
    [proposing] = data_of(envelopes_of(operator, plan["runId"]), "exit_plan_mode.requested")
    assert (proposing["planContent"], proposing["actions"]) == ("1. one\n2. two", ["interactive"])
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


def test_the_0008_migration_rewrites_each_older_shape():
    """0008 made the shapes of its day (0012 makes them the SDK's, below)."""
    context = {"model": "scripted", "duration": 42, "sessionKey": "s"}
    new = [rewrite(kind, data, context) for kind, data in OLD_RUN]
    by_type = dict(zip([k for k, _ in OLD_RUN], new, strict=False))

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


# What the 0008 rewrite made, that 0012 makes into the SDK's shapes (with Airlock's `request.answered` after).
BEFORE_SDK = [
    ("tool.execution_start", {"toolName": "get_time", "toolCallId": "c1", "arguments": {}, "sideEffects": True}),
    (
        "tool.execution_complete",
        {"toolName": "get_time", "toolCallId": "c1", "success": True, "result": {"content": "x"}},
    ),
    (
        "permission.requested",
        {
            "requestId": "q1",
            "permissionRequest": {
                "kind": "tool",
                "toolCallId": "c4",
                "toolName": "send_email",
                "arguments": {"to": "y"},
            },
            "expiresAt": "2026-12-01T00:00:00+00:00",
        },
    ),
    (
        "permission.completed",
        {
            "requestId": "q1",
            "toolCallId": "c4",
            "toolName": "send_email",
            "answeredBy": "otto",
            "result": {"kind": "denied-interactively-by-user", "reason": "No.", "overrideArguments": {"to": "z"}},
        },
    ),
    (
        "permission.completed",
        {
            "requestId": "q9",
            "toolCallId": "c3",
            "toolName": "send_email",
            "arguments": {"to": "x"},
            "result": {"kind": "approved-by-rule", "ruleId": "r1"},
        },
    ),
    (
        "permission.completed",
        {"requestId": "q8", "toolCallId": "c8", "result": {"kind": "abandoned", "reason": "gone"}},
    ),
    ("session_limits_exhausted.requested", {"requestId": "q3", "maxModelCalls": 5, "usedModelCalls": 5}),
    (
        "session_limits_exhausted.completed",
        {"requestId": "q3", "answeredBy": "otto", "response": {"action": "continue"}},
    ),
    (
        "exit_plan_mode.requested",
        {
            "requestId": "q4",
            "toolCallId": "c9",
            "summary": "s",
            "planContent": "1. a",
            "actions": ["approve", "revise"],
        },
    ),
    (
        "exit_plan_mode.completed",
        {"requestId": "q4", "approved": False, "selectedAction": "revise", "feedback": "Why?"},
    ),
    (
        "external_tool.completed",
        {"requestId": "q2", "toolName": "loc", "toolCallId": "c5", "closed": {"kind": "expired", "reason": "late"}},
    ),
    (
        "subagent.started",
        {
            "toolCallId": "c7",
            "agentName": "researcher",
            "agentDisplayName": "R",
            "model": "scripted",
            "agentId": "researcher-1",
        },
    ),
    (
        "subagent.completed",
        {"toolCallId": "c7", "agentName": "researcher", "durationMs": 3, "totalTokens": 4, "totalToolCalls": 0},
    ),
]


def rewritten(events: list[tuple[str, Any]], context: dict[str, Any]) -> list[tuple[str, Any]]:
    return [new for kind, data in events for new in rewrite_sdk(kind, data, context)]


def test_the_migration_rewrites_each_old_shape():
    context = {"tools": {}, "servers": {}, "agents": {"researcher": "Looks things up."}}
    new = rewritten(BEFORE_SDK, context)

    for kind, data in new:
        PAYLOADS[kind].model_validate(data)
        assert_sdk_reads(kind, data)
    kinds = [kind for kind, _ in new]
    assert new[0] == ("tool.execution_start", {"toolName": "get_time", "toolCallId": "c1", "arguments": {}})
    assert new[1][1] == {"toolCallId": "c1", "success": True, "result": {"content": "x"}}
    assert new[2][1] == {
        "requestId": "q1",
        "permissionRequest": {
            "kind": "custom-tool",
            "toolName": "send_email",
            "toolDescription": "",
            "args": {"to": "y"},
            "toolCallId": "c4",
        },
    }
    assert new[3:5] == [
        (
            "permission.completed",
            {
                "requestId": "q1",
                "toolCallId": "c4",
                "result": {"kind": "denied-interactively-by-user", "feedback": "No."},
                "decisionSource": "human_response",
            },
        ),
        (
            "request.answered",
            {
                "requestId": "q1",
                "kind": "approval",
                "toolCallId": "c4",
                "toolName": "send_email",
                "answeredBy": "otto",
                "overrideArguments": {"to": "z"},
            },
        ),
    ]
    # A rule's decision: the SDK's pair, then which rule.
    assert kinds[5:8] == ["permission.requested", "permission.completed", "request.answered"]
    assert new[6][1]["decisionSource"] == "host_policy" and new[7][1]["ruleId"] == "r1"
    assert new[8][1] == {"requestId": "q8", "toolCallId": "c8", "result": {"kind": "cancelled", "reason": "abandoned"}}
    assert new[9][1] == {"requestId": "q3", "maxAiCredits": 5, "usedAiCredits": 5}
    assert new[10][1] == {"requestId": "q3", "response": {"action": "add", "additionalAiCredits": 5}}
    assert new[11] == ("request.answered", {"requestId": "q3", "kind": "continuation", "answeredBy": "otto"})
    assert new[12][1] == {
        "requestId": "q4",
        "summary": "s",
        "planContent": "1. a",
        "actions": ["interactive"],
        "recommendedAction": "interactive",
    }
    assert new[13][1] == {"requestId": "q4", "approved": False, "feedback": "Why?"}
    assert new[14] == ("external_tool.completed", {"requestId": "q2"})  # closed: `request.terminated` says how
    assert new[15][1]["agentDescription"] == "Looks things up." and "agentId" not in new[15][1]
    assert (new[16][1]["agentDisplayName"], new[16][1]["model"]) == ("R", "scripted")
    assert len(new) == 17
    assert rewritten(new, dict(context)) == new  # a second pass changes nothing


def assert_sdk_reads(kind: str, data: dict[str, Any]) -> None:
    """The SDK parses the event, and reads everything in it (Airlock's own types aside)."""
    from copilot.session_events import SessionEvent, SessionEventType

    from tests.agents.test_copilot_contract import differences

    envelope = {
        "id": str(uuid.uuid4()),
        "timestamp": "2026-12-01T00:00:00+00:00",
        "parentId": None,
        "type": kind,
        "data": data,
    }
    parsed = SessionEvent.from_dict(envelope)
    if parsed.type != SessionEventType.UNKNOWN:
        assert differences(data, parsed.data.to_dict()) == [], kind


@pytest.mark.django_db(transaction=True)
def test_the_migration_rewrites_stored_events_and_nothing_else(operator, assistant):
    first = run_ok(operator, {"message": call_line("get_time"), "sessionId": "m"})
    second = run_ok(operator, {"message": "again", "sessionId": "m"})
    run = Run.objects.get(pk=first["runId"])
    Event.objects.filter(run=run).delete()
    Event.objects.filter(run_id=second["runId"]).update(parent_id=None)  # as runs began their own chains
    old = [
        Event(run=run, sequence=n, parent_id=None, type=kind, data=data) for n, (kind, data) in enumerate(OLD_RUN, 1)
    ]
    Event.objects.bulk_create(old)
    before = {e.id: (e.type, e.timestamp, e.data) for e in stored_events(str(run.id))}
    later = [(e.id, e.type, e.data) for e in stored_events(second["runId"])]

    executor = MigrationExecutor(connection)
    executor.migrate([("agents", "0007_checkpoints")])
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    after = stored_events(str(run.id))
    kept = {e.id: e for e in after}
    assert set(before) <= set(kept)  # every event stays, with its id, type and time
    for event_id, (kind, timestamp, data) in before.items():
        event = kept[event_id]
        assert (event.type, event.timestamp) == (kind, timestamp)
        PAYLOADS[kind].model_validate(event.data)
        assert_sdk_reads(kind, event.data)
        if kind in ("run.started", "user.message", "run.completed"):
            assert event.data == data
    added = [e for e in after if e.id not in before]
    # The rule's decision of OLD_RUN gets the SDK's request before its completion, and which rule after it.
    assert [e.type for e in added] == ["permission.requested", "request.answered"]
    assert added[1].data["ruleId"] == "r1" and added[1].data["arguments"] == {"to": "x"}
    assert [e.sequence for e in after] == list(range(1, len(after) + 1))
    # One chain across the session: the second run's first event follows the first run's last.
    chained = after + stored_events(second["runId"])
    assert [e.parent_id for e in chained] == [None] + [e.id for e in chained[:-1]]
    assert [(e.id, e.type, e.data) for e in stored_events(second["runId"])] == later  # already new: untouched
    usage = next(e for e in after if e.type == "assistant.usage")
    assert usage.data["model"] == "scripted" and usage.data["inputTokens"] == 10
    start = next(e for e in after if e.type == "tool.execution_start")
    assert "sideEffects" not in start.data and start.side_effects is False
