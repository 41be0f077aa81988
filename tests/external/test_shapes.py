"""What the adapters send without a console: an interrupt's value read as an Airlock request, and the request
ids that make a rerun ask nothing twice."""

import pytest
from airlock_client.client import Decision, answer_body, open_body
from airlock_client.langgraph import request_fields, request_id_for, resume_value


def test_it_reads_each_kind_of_interrupt():
    assert request_fields({"kind": "approval", "toolName": "deploy", "arguments": {"a": 1}}) == (
        "approval",
        {"tool_name": "deploy", "arguments": {"a": 1}},
    )
    assert request_fields({"tool_name": "deploy"}) == ("approval", {"tool_name": "deploy"})
    assert request_fields("Which region?") == ("question", {"question": "Which region?"})
    assert request_fields({"question": "Which?", "allowFreeform": False}) == (
        "question",
        {"question": "Which?", "allow_freeform": False},
    )
    assert request_fields({"message": "Notes", "requestedSchema": {"type": "object"}})[0] == "input"
    assert request_fields({"summary": "Roll out", "planContent": "1. a", "expiresIn": 60}) == (
        "plan",
        {"summary": "Roll out", "plan_content": "1. a", "expires_in": 60},
    )


def test_it_refuses_what_airlock_cannot_ask():
    with pytest.raises(ValueError, match="kind"):
        request_fields({"kind": "vote"})
    with pytest.raises(ValueError, match="no field colour"):
        request_fields({"question": "Which?", "colour": "red"})
    with pytest.raises(ValueError, match="dict or a string"):
        request_fields(42)


def test_request_ids_are_the_same_for_the_same_pause_only():
    first = request_id_for("deployer", "thread-1", "abc")
    assert first == request_id_for("deployer", "thread-1", "abc")
    assert len({first, request_id_for("deployer", "thread-2", "abc"), request_id_for("other", "thread-1", "abc")}) == 3


def test_the_wire_is_camel_case_without_nones():
    body = open_body("approval", "rid", {"tool_name": "deploy", "session_id": None, "allow_freeform": False})
    assert body == {"requestId": "rid", "kind": "approval", "toolName": "deploy", "allowFreeform": False}
    assert answer_body({"approved": True, "override_arguments": {"a": 1}, "reason": None}) == {
        "approved": True,
        "overrideArguments": {"a": 1},
    }
    decision = Decision(result={"kind": "approved"}, approved=True, answered_by="ada", via="web")
    assert resume_value("rid", decision)["answeredBy"] == "ada"
    assert resume_value("rid", decision)["requestId"] == "rid"
