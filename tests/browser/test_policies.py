"""A policy's escalation in a real browser: the card says which policy asks and why, offers no "don't ask
again", and the operator's approval lifts the deny (the mail is sent in the continuation)."""

import json
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from agents.starter_policy import starter_hooks
from tests.browser.test_inbox import Api, api, continuation_of, create_agent, open_inbox, run  # noqa: F401

pytestmark = pytest.mark.browser


def test_an_operator_lifts_a_policy_deny_from_the_inbox(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    tools = [{"name": "send_email", "approval": "never"}, {"name": "get_time", "approval": "never"}]
    agent = create_agent(api, tools=tools, hooks=starter_hooks())
    page = sign_in("otto")
    open_inbox(page)

    email = {"to": "bob@partner.test", "subject": "Hello", "body": "Ship it."}
    asked = run(api["otto"], agent, f"call send_email {json.dumps(email)}", "policy-session")

    assert asked["status"] == "awaiting_approval"
    rid = asked["pendingRequests"][0]["requestId"]
    card = page.locator(f"#request-{rid}")
    expect(card).to_contain_text("Policy mail-guard asks a person (external_recipient)")
    expect(card).to_contain_text("Mail outside example.com needs a human.")
    expect(card.get_by_text("Don't ask again")).to_have_count(0)
    page.screenshot(path="/tmp/airlock-policy-card.png", full_page=True)

    card.get_by_role("button", name="Approve", exact=True).click()

    expect(card).to_have_count(0)
    continuation = continuation_of(api["otto"], asked)
    assert (continuation["status"], continuation["output"]) == ("completed", "send_email: sent to bob@partner.test")
