"""The demo's policies (issue 13, item 7): `seed_demo` gives `assistant` the starter policy in shadow mode
and adds `guarded`, the same policy enforced; a mail outside example.com is the policy's question on
`guarded` and only a recorded verdict on `assistant`."""

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.core.management import call_command
from django.test import Client

from agents.definitions import DefinitionContent
from agents.models import Agent, Event
from approvals.models import PendingRequest
from console.management.commands.seed_demo import demo_agent, researcher_agent
from console.models import ApiToken, Membership, Tenant
from tests.conftest import Persona
from tests.helpers import call_line, run_ok

OUTSIDE = {"to": "x@outside.test", "subject": "Hello", "body": "Ship it."}


def seed() -> None:
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())


@pytest.fixture
def demo_admin(db, monkeypatch) -> Persona:
    """The demo tenant's `admin`, as seed_demo makes it (run twice: it must stay one of everything)."""
    monkeypatch.setenv("DEMO_PASSWORD", "demo-password")
    seed()
    seed()
    membership = Membership.objects.get(tenant__slug="demo", user__username="admin")
    _, token = ApiToken.issue(membership, "tests")
    return Persona(membership.user, membership, Client(), token)


def policy_verdicts(run_id: str) -> list[dict[str, Any]]:
    return [event.data for event in Event.objects.filter(run_id=run_id, type="policy.verdict").order_by("sequence")]


def test_it_seeds_the_agents_once(demo_admin):
    demo = Tenant.objects.get(slug="demo")
    agents = {agent.name: agent for agent in Agent.objects.live().filter(tenant=demo)}
    assert sorted(agents) == ["assistant", "deployer", "guarded", "planner", "researcher"]
    assert all(agent.current.definition.description for agent in agents.values()), "each says what it is for"
    assert {name: agent.current_version for name, agent in agents.items()} == dict.fromkeys(agents, 1)
    assert agents["assistant"].current.definition.sub_agents == ["researcher"]
    assistant, guarded = agents["assistant"].current.definition, agents["guarded"].current.definition
    assert assistant.hooks["configuration"]["mode"] == "evaluate_only"
    assert guarded.hooks["configuration"]["mode"] == "enforce"
    assert (
        [b["id"] for b in assistant.hooks["bindings"]] == [b["id"] for b in guarded.hooks["bindings"]] == ["mail-guard"]
    )
    assert {t.name: t.approval for t in guarded.tools} == {"get_time": "never", "send_email": "never"}
    assert [t.name for t in guarded.client_tools] == [t.name for t in assistant.client_tools]
    assert [s.connection for s in guarded.mcp_servers] == [s.connection for s in assistant.mcp_servers]


def test_the_policy_asks_before_guarded_mails_outside_example_com(demo_admin):
    result = run_ok(demo_admin, {"message": call_line("send_email", OUTSIDE), "sessionId": "g1"}, agent="guarded")

    assert result["status"] == "awaiting_approval", result
    [asked] = result["pendingRequests"]
    assert asked["kind"] == "approval"
    assert asked["toolName"] == "send_email"
    assert asked["policy"]["binding"] == "mail-guard"
    assert asked["policy"]["reason"] == "external_recipient"
    assert PendingRequest.objects.get(id=asked["requestId"]).status == "pending"
    [verdict] = policy_verdicts(result["runId"])
    assert verdict == {
        "point": "pre_tool_call",
        "decision": "escalate",
        "reason": "external_recipient",
        "message": "Mail outside example.com needs a human.",
        "binding": "mail-guard",
        "enforced": True,
        "toolName": "send_email",
        "toolCallId": "call_1",
        "arguments": OUTSIDE,
    }
    assert mail.outbox == []


def test_the_policy_lets_guarded_use_its_other_tools(demo_admin):
    """The client tool and the MCP server's tool are named in the policy's manifest: allowed, not denied as
    unknown tools."""
    located = run_ok(
        demo_admin,
        {"message": call_line("get_user_location", {"precision": "city"}), "sessionId": "g2"},
        agent="guarded",
    )
    booked = run_ok(
        demo_admin, {"message": call_line("book_meeting", {"topic": "Demo"}), "sessionId": "g3"}, agent="guarded"
    )

    assert located["status"] == "awaiting_tool_result", located
    assert booked["status"] == "awaiting_input", booked  # the MCP tool ran and asks which day
    assert policy_verdicts(located["runId"]) == policy_verdicts(booked["runId"]) == []


def test_the_shadow_policy_on_assistant_records_its_verdict_and_the_mail_goes(demo_admin):
    message = call_line("send_email", OUTSIDE)

    asked = run_ok(demo_admin, {"message": message, "sessionId": "a1"})

    # The policy would have escalated; in shadow mode the tool's own approval ("always") is all that asks.
    assert asked["status"] == "awaiting_approval", asked
    [request] = asked["pendingRequests"]
    assert request.get("policy") is None
    [verdict] = policy_verdicts(asked["runId"])
    assert (verdict["point"], verdict["decision"], verdict["binding"]) == ("pre_tool_call", "escalate", "mail-guard")
    assert verdict["enforced"] is False

    answer = {"requestId": request["requestId"], "approved": True}
    result = run_ok(demo_admin, {"sessionId": "a1", "approvals": [answer]})

    assert result["status"] == "completed", result
    [email] = mail.outbox
    assert (email.to, email.subject) == (["x@outside.test"], "Hello")
    assert all(v["enforced"] is False for v in policy_verdicts(result["runId"]))


def test_it_gives_an_unedited_assistant_of_an_earlier_seed_the_policy_and_leaves_an_edited_one(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-password")
    demo = Tenant.objects.create(slug="demo", name="Demo")
    admin = User.objects.create_user("admin")
    earlier = Agent.create(demo, demo_agent(policy=False), admin)

    seed()
    seed()

    earlier.refresh_from_db()
    assert earlier.current_version == 2
    assert earlier.current.definition.identity == demo_agent().identity

    edited = DefinitionContent.model_validate({**demo_agent(policy=False).wire(), "instructions": "Mine now."})
    earlier.append_version(edited, admin)
    seed()

    earlier.refresh_from_db()
    assert earlier.current_version == 3
    assert earlier.current.definition.hooks is None


def guarded_sends(demo_admin: Persona, to: Any, session: str) -> dict[str, Any]:
    email = {"to": to, "subject": "Hello", "body": "Ship it."}
    return run_ok(demo_admin, {"message": call_line("send_email", email), "sessionId": session}, agent="guarded")


def test_it_mails_nobody_when_guarded_names_several_recipients_in_one_string(demo_admin):
    """The policy checked how the string ended; the mail went to both."""
    result = guarded_sends(demo_admin, "x@evil.test, boss@example.com", "m1")

    assert mail.outbox == []
    assert result["status"] == "completed", result
    assert result["output"].startswith("send_email failed:")
    assert "'x@evil.test, boss@example.com' is not an e-mail address (several go in a list" in result["output"]


def test_the_policy_denies_a_list_of_recipients_with_one_at_evil_test(demo_admin):
    result = guarded_sends(demo_admin, ["boss@example.com", "x@evil.test"], "m2")

    assert mail.outbox == []
    assert result["output"] == "send_email denied: Mail to evil.test is never sent.", result
    [verdict] = policy_verdicts(result["runId"])
    assert (verdict["decision"], verdict["reason"]) == ("deny", "blocked_domain")


def test_the_policy_asks_for_a_list_of_recipients_with_one_outside_example_com(demo_admin):
    result = guarded_sends(demo_admin, ["boss@example.com", "x@outside.test"], "m3")

    assert result["status"] == "awaiting_approval", result
    assert result["pendingRequests"][0]["policy"]["reason"] == "external_recipient"
    assert mail.outbox == []


def test_guarded_mails_each_of_a_list_of_recipients_at_example_com(demo_admin):
    result = guarded_sends(demo_admin, ["boss@example.com", "ada@example.com"], "m4")

    assert result["output"] == "send_email: sent to boss@example.com, ada@example.com", result
    [email] = mail.outbox
    assert email.to == ["boss@example.com", "ada@example.com"]


def test_the_seeded_agents_policy_editors_warn_of_no_tool(demo_admin):
    """The demo's policy names every tool of its agents, the assistant's sub-agent included: its editor opens
    with no "These policies would deny every call of researcher" (a manifest that governs tool calls denies a
    tool it does not name)."""
    demo_admin.client.force_login(demo_admin.user)
    for agent in ("assistant", "guarded"):
        page = demo_admin.client.get(f"/agents/{agent}/edit/")
        assert page.status_code == 200
        assert page.context["blocked_tools"] == [], agent
        assert "would deny every call" not in page.content.decode(), agent
    assert Agent.objects.get(tenant__slug="demo", name="assistant").current.definition.sub_agents == ["researcher"]


def test_it_gives_an_assistant_seeded_before_its_policy_named_the_researcher_the_policy_that_does(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-password")
    demo = Tenant.objects.create(slug="demo", name="Demo")
    admin = User.objects.create_user("admin")
    Agent.create(demo, researcher_agent(), admin)
    earlier = Agent.create(demo, demo_agent(names_researcher=False), admin)

    seed()

    earlier.refresh_from_db()
    assert earlier.current_version == 2
    assert earlier.current.definition.identity == demo_agent().identity
    assert "id: researcher" in earlier.current.definition.hooks["bindings"][0]["config"]["manifest"]
