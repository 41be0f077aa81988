"""“Always” asks first, in Chromium (issue 50, item 7): `r r` on an inbox card shows what the rule will cover instead of
the buttons (`a` no longer approves through it), Escape cancels, Enter confirms, and the open requests it matches are
approved too when chosen, each with its own receipt; the trial page's widget asks the same."""

import re
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.test_inbox import SEND, api, continuation_of, create_agent, run  # noqa: F401 - `api` is a fixture
from tests.browser.test_inbox_keys import open_filtered
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

TOOLS = [{"name": "send_email", "approval": "always"}]


def request_of(asked: dict[str, object]) -> str:
    return str(asked["pendingRequests"][0]["requestId"])  # type: ignore[index]


def receipt(caller: Api, request_id: str) -> dict[str, object]:
    status, body = caller("GET", f"/api/requests/{request_id}/receipt")
    assert status == 200, body
    return body


def test_always_asks_first_then_the_keys_cancel_or_confirm_it(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
    axe_source: str,
) -> None:
    agent = create_agent(api, tools=TOOLS)
    first, same, other = (
        run(api["otto"], agent, message, uuid4().hex) for message in (SEND, SEND, SEND.replace("a@b.co", "x@y.co"))
    )
    page = sign_in("otto")
    open_filtered(page, f"agent={agent}")
    card = page.locator(f"#request-{request_of(first)}")
    confirm = card.get_by_role("button", name="Approve and remember always")

    for key in "rra":  # the chord that used to approve a never-expiring, any-arguments rule at once
        page.keyboard.press(key)
    expect(confirm).to_be_focused()
    covers = card.get_by_role("group", name=f"Approve, and from now on let {agent} call send_email without asking?")
    expect(covers).to_contain_text("Argumentsany arguments")
    expect(covers).to_contain_text(re.compile(r"Expiresin 4\sweeks, [12]\sday"))
    expect(covers).to_contain_text("Open requests it matches now2 waiting that you may answer")
    expect(card.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    status, still = api["otto"]("GET", f"/api/requests/{request_of(first)}")
    assert status == 200 and still["status"] == "pending", still

    page.keyboard.press("Escape")
    expect(covers).to_have_count(0)
    expect(card.get_by_role("radio", name="ask next time")).to_be_checked()
    expect(card.get_by_role("radio", name="ask next time")).to_be_focused()
    expect(card.get_by_role("button", name="Approve", exact=True)).to_be_visible()

    page.keyboard.press("r")
    page.keyboard.press("r")
    expect(confirm).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(card.get_by_label(re.compile("Approve those 2 too"))).to_be_focused()
    page.keyboard.press("Space")
    page.keyboard.press("Tab")
    expect(confirm).to_be_focused()
    assert violations(page, axe_source) == []
    page.keyboard.press("Enter")

    for asked in (first, same, other):
        expect(page.locator(f"#request-{request_of(asked)}")).to_have_count(0)
        said = receipt(api["otto"], request_of(asked))
        assert (said["result"], said["answeredBy"], said["authMethod"]) == ("approved", "otto", "session"), said
    continuation_of(api["otto"], first)
    status, rules = api["otto"]("GET", f"/api/rules?agent={agent}")
    assert status == 200 and len(rules["items"]) == 1, rules
    assert (rules["items"][0]["arguments"], rules["items"][0]["expiresAt"][:4]) == (None, "2027")
    again = run(api["otto"], agent, SEND.replace("a@b.co", "z@y.co"), uuid4().hex)
    assert (again["status"], again["pendingRequests"]) == ("completed", [])


def test_the_trial_page_asks_the_same(api: dict[str, Api], sign_in: Callable[[str], Page]) -> None:  # noqa: F811
    agent = create_agent(api, tools=TOOLS)
    asked = run(api["otto"], agent, SEND, uuid4().hex)
    page = sign_in("otto")
    page.goto(f"/trial/?agent={agent}&session={asked['sessionId']}")
    widget = page.locator(".request-widget")

    widget.get_by_role("radio", name="always").check()

    covers = widget.get_by_role("group", name=re.compile("from now on let"))
    expect(covers).to_contain_text("Open requests it matches nownone")
    widget.get_by_role("button", name="Cancel").click()
    expect(covers).to_have_count(0)
    widget.get_by_role("radio", name="always").check()
    widget.get_by_label("…only with these exact arguments").check()
    expect(covers).to_contain_text("Argumentsonly exactly these")
    widget.get_by_role("button", name="Approve and remember always").click()

    expect(page.locator(".answered-elsewhere")).to_contain_text("Approved by otto")
    expect(widget).to_have_count(0)
    continuation_of(api["otto"], asked)
    status, rules = api["otto"]("GET", f"/api/rules?agent={agent}")
    assert status == 200 and rules["items"][0]["arguments"] == {"to": "a@b.co", "subject": "s", "body": "b"}, rules
