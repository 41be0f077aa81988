"""Policies in the audit in a real browser: a call a policy denied is an audit line naming the policy, the point
and the reason, found by the tool, policy and argument filters and in the CSV download; and the reason an
operator types when denying a policy's escalation in the inbox is what the agent reads."""

import csv
import io
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from agents.starter_policy import starter_hooks
from tests.browser.axe import violations
from tests.browser.test_inbox import Api, api, continuation_of, create_agent, open_inbox, run  # noqa: F401

pytestmark = pytest.mark.browser

TOOLS = [{"name": "send_email", "approval": "never"}, {"name": "get_time", "approval": "never"}]


def mail(to: str) -> str:
    return f"call send_email {json.dumps({'to': to, 'subject': 'Hello', 'body': 'Ship it.'})}"


def test_a_policy_deny_is_an_audit_line_on_the_page_and_in_the_csv(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
    axe_source: str,
) -> None:
    agent = create_agent(api, tools=TOOLS, hooks=starter_hooks())
    denied = run(api["otto"], agent, mail("eve@evil.test"), "audit-policy")
    assert denied["output"] == "send_email denied: Mail to evil.test is never sent."
    run(api["otto"], agent, "call get_time", "audit-policy")

    page = sign_in("rita")
    page.goto("/audit/")
    page.get_by_label("Agent").select_option(agent)
    page.get_by_label("Tool").fill("send_email")
    page.get_by_label("Policy").fill("mail-guard")
    page.get_by_label("Arguments contain").fill("evil.test")
    page.get_by_role("button", name="Filter").click()

    rows = page.locator("table.audit tbody tr.entry")
    expect(rows).to_have_count(1)
    line = rows.first
    expect(line.locator("td.actor")).to_have_text("policy mail-guard@1")
    expect(line.locator("td.outcome")).to_contain_text("denied by policy")
    expect(line.locator("td.outcome")).to_contain_text("at pre_tool_call")
    expect(line.locator("td.why")).to_have_text("Mail to evil.test is never sent.")
    expect(line.locator("td.request")).to_contain_text("send_email")
    expect(page).to_have_url(re.compile(r"[?&]search=evil\.test"))
    assert violations(page, axe_source) == []
    page.screenshot(path="/tmp/airlock-audit-policies.png", full_page=True)

    with page.expect_download() as downloading:
        page.get_by_role("link", name="CSV").click()
    [exported] = list(csv.DictReader(io.StringIO(downloading.value.path().read_text())))
    assert (exported["decision"], exported["policyBinding"], exported["point"]) == (
        "policy-deny",
        "mail-guard",
        "pre_tool_call",
    )
    assert exported["reason"] == "Mail to evil.test is never sent." and exported["runId"] == denied["runId"]

    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_the_reason_typed_when_denying_an_escalation_reaches_the_agent(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent = create_agent(api, tools=TOOLS, hooks=starter_hooks())
    page = sign_in("otto")
    open_inbox(page)
    asked: dict[str, Any] = run(api["otto"], agent, mail("bob@partner.test"), "audit-escalation")
    assert asked["status"] == "awaiting_approval"

    card = page.locator(f"#request-{asked['pendingRequests'][0]['requestId']}")
    card.get_by_label("Reason").fill("Partners get mail from sales only")
    card.get_by_role("button", name="Deny", exact=True).click()
    expect(card).to_have_count(0)

    continuation = continuation_of(api["otto"], asked)
    assert continuation["output"] == "send_email denied: Partners get mail from sales only"
    page.goto(f"/audit/?agent={agent}")
    expect(page.locator("table.audit tbody")).to_contain_text("confirmed the deny of policy mail-guard")
    expect(page.locator("table.audit tbody")).to_contain_text("escalated by policy")
