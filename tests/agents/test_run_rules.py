"""Answers that remember ("do not ask again"): the rule they store and the calls it approves later."""

from django.core import mail
from django.utils import timezone

from agents.rule_matching import arguments_hash
from approvals.models import PendingRequest, Rule
from tests.helpers import (
    EMAIL,
    ask_to_send,
    call_line,
    make_agent,
    run_ok,
    stored_events,
)


def approve_and_remember(persona, session="s1", arguments_only=False, **email):
    asked = ask_to_send(persona, session=session, **email)
    approval = {
        "requestId": asked["pendingRequests"][0]["requestId"],
        "approved": True,
        "remember": True,
        "rememberArgumentsOnly": arguments_only,
    }
    return run_ok(persona, {"sessionId": session, "approvals": [approval]})


def send(persona, session="s2", agent="assistant", **email):
    return run_ok(persona, {"message": call_line("send_email", {**EMAIL, **email}), "sessionId": session}, agent)


def test_it_stores_a_rule_for_the_agent_and_tool(operator, assistant):
    result = approve_and_remember(operator)

    rule = Rule.objects.get()
    assert (rule.tenant, rule.agent, rule.tool_name) == (operator.tenant, assistant, "send_email")
    assert rule.arguments_hash == ""
    assert rule.conditions == []
    assert rule.created_by == operator.user
    assert rule.created_from == PendingRequest.objects.get()
    [decision] = [e for e in stored_events(result["runId"]) if e.type == "permission.completed"]
    assert decision.data["result"] == {"kind": "approved"}
    [answered] = [e for e in stored_events(result["runId"]) if e.type == "request.answered"]
    assert answered.data["rememberedRuleId"] == str(rule.id) and answered.data["answeredBy"] == "otto"


def test_it_approves_the_next_call_by_the_rule(operator, assistant):
    approve_and_remember(operator)
    rule = Rule.objects.get()

    result = send(operator)

    assert result["status"] == "completed"
    assert result["output"] == "send_email: sent to ada@example.com"
    assert result["pendingRequests"] == []
    assert len(mail.outbox) == 2
    assert PendingRequest.objects.count() == 1
    events = stored_events(result["runId"])
    # The rule's decision: the SDK's pair, decided by the host, then which rule it was.
    [asked] = [e.data for e in events if e.type == "permission.requested"]
    assert (asked["permissionRequest"]["toolName"], asked["permissionRequest"]["args"]) == ("send_email", EMAIL)
    [decision] = [e.data for e in events if e.type == "permission.completed"]
    assert decision == {
        "requestId": asked["requestId"],
        "toolCallId": "call_1",
        "result": {"kind": "approved"},
        "decisionSource": "host_policy",
    }
    [answered] = [e.data for e in events if e.type == "request.answered"]
    assert (answered["ruleId"], answered["toolName"], answered["arguments"]) == (str(rule.id), "send_email", EMAIL)
    assert "answeredBy" not in answered
    types = [e.type for e in events]
    assert (
        types.index("permission.requested") < types.index("permission.completed") < types.index("tool.execution_start")
    )


def test_it_approves_any_arguments_by_a_rule_for_the_whole_tool(operator, assistant):
    approve_and_remember(operator)

    result = send(operator, to="bob@example.com", subject="Other")

    assert result["output"] == "send_email: sent to bob@example.com"


def test_it_still_asks_for_other_arguments_when_only_these_were_remembered(operator, assistant):
    approve_and_remember(operator, arguments_only=True)
    rule = Rule.objects.get()
    assert rule.arguments_hash == arguments_hash(EMAIL)

    same = send(operator, session="s2")
    other = send(operator, session="s3", to="bob@example.com")

    assert same["status"] == "completed"
    assert other["status"] == "awaiting_approval"
    assert other["pendingRequests"][0]["arguments"]["to"] == "bob@example.com"
    assert [m.to for m in mail.outbox] == [["ada@example.com"], ["ada@example.com"]]


def test_it_remembers_the_arguments_as_approved_with_their_override(operator, assistant):
    """An operator who corrects the address and remembers "these arguments" approved the corrected call,
    never the one the model made: the model asking for the original address again must still ask."""
    asked = ask_to_send(operator, to="mallory@example.net")
    approval = {
        "requestId": asked["pendingRequests"][0]["requestId"],
        "approved": True,
        "remember": True,
        "rememberArgumentsOnly": True,
        "overrideArguments": EMAIL,
    }
    run_ok(operator, {"sessionId": "s1", "approvals": [approval]})

    again = send(operator, session="s2", to="mallory@example.net")
    corrected = send(operator, session="s3")

    assert again["status"] == "awaiting_approval"
    assert corrected["status"] == "completed"
    assert [m.to for m in mail.outbox] == [["ada@example.com"], ["ada@example.com"]]


def test_it_keeps_a_rule_to_its_agent(operator, admin, assistant):
    make_agent(admin, name="other")
    approve_and_remember(operator)

    result = send(operator, agent="other")

    assert result["status"] == "awaiting_approval"


def test_it_ignores_a_revoked_rule(operator, assistant):
    approve_and_remember(operator)
    Rule.objects.update(revoked_at=timezone.now())

    assert send(operator)["status"] == "awaiting_approval"


def test_it_applies_a_rule_by_its_conditions(operator, admin, assistant):
    Rule.objects.create(
        tenant=operator.tenant,
        agent=assistant,
        tool_name="send_email",
        conditions=[
            {"argument": "to", "operator": "in", "value": ["ada@example.com", "bob@example.com"]},
            {"argument": "subject", "operator": "not_equals", "value": "Invoice"},
        ],
    )

    assert send(operator, session="s2")["status"] == "completed"
    assert send(operator, session="s3", to="bob@example.com")["status"] == "completed"
    assert send(operator, session="s4", to="eve@example.com")["status"] == "awaiting_approval"
    assert send(operator, session="s5", subject="Invoice")["status"] == "awaiting_approval"


def test_it_never_applies_a_rule_to_a_tool_that_asks_every_time(operator, admin):
    agent = make_agent(admin, tools=[{"name": "send_email", "approval": "every_time"}])
    Rule.objects.create(tenant=operator.tenant, agent=agent, tool_name="send_email")

    assert send(operator)["status"] == "awaiting_approval"
    assert mail.outbox == []


def test_it_does_not_remember_without_being_asked(operator, assistant):
    asked = ask_to_send(operator)
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    run_ok(operator, {"sessionId": "s1", "approvals": [approval]})

    assert Rule.objects.count() == 0
    assert send(operator)["status"] == "awaiting_approval"
