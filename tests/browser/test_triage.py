"""Keyboard triage on the inbox in a real browser: the skip link, j/k between cards, a approves, d denies
with a reason (Enter sends it), the focus moving on after each answer, the list of keys, and the selection
across runs answered at once."""

import re
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_inbox import SEND, api, continuation_of, create_agent, run  # noqa: F401 - `api` is a fixture
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser


def open_filtered(page: Page, agent: str) -> None:
    page.goto(f"/inbox/?agent={agent}")
    expect(page.locator("#inbox-list")).to_have_attribute("data-synced", "true")


def test_it_answers_three_requests_without_the_mouse_and_moves_the_focus_on(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    asked = [run(api["otto"], agent, SEND.replace("a@b.co", f"{n}@b.co"), uuid4().hex) for n in ("one", "two", "three")]
    page = sign_in("otto")
    open_filtered(page, agent)
    cards = [page.locator(f"#request-{a['pendingRequests'][0]['requestId']}") for a in asked]
    expect(page.locator(".request-card")).to_have_count(3)

    page.keyboard.press("?")
    keys = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(keys).to_be_visible()
    expect(keys).to_contain_text("deny: type the reason")
    page.keyboard.press("Escape")
    expect(keys).to_be_hidden()

    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to the first request")).to_be_focused()
    page.keyboard.press("Enter")
    expect(cards[0]).to_be_focused()
    page.keyboard.press("j")
    expect(cards[1]).to_be_focused()
    page.keyboard.press("j")
    expect(cards[2]).to_be_focused()
    page.keyboard.press("k")
    page.keyboard.press("k")
    expect(cards[0]).to_be_focused()

    page.keyboard.press("a")
    expect(cards[0]).to_have_count(0)
    expect(cards[1]).to_be_focused()

    page.keyboard.press("d")
    reason = cards[1].get_by_role("textbox", name="Reason")
    expect(reason).to_be_focused()
    page.keyboard.type("not to two")
    page.keyboard.press("Enter")
    expect(cards[1]).to_have_count(0)
    expect(cards[2]).to_be_focused()

    # The focus moved there by itself: for a moment no key answers it (a second press of Enter, say).
    expect(cards[2]).not_to_have_class(re.compile(r"\bsettling\b"))
    page.keyboard.press("a")
    expect(cards[2]).to_have_count(0)
    expect(page.locator(".inbox-empty")).to_be_visible()

    outputs = [continuation_of(api["otto"], a)["output"] for a in asked]
    assert outputs == [
        "send_email: sent to one@b.co",
        "send_email denied: not to two",
        "send_email: sent to three@b.co",
    ]


def test_it_approves_a_selection_across_runs_each_run_continuing_on_its_own(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    first, second, left = (run(api["otto"], agent, SEND, uuid4().hex) for _ in range(3))
    page = sign_in("otto")
    open_filtered(page, agent)
    expect(page.locator(".request-card")).to_have_count(3)
    bar = page.locator("#selection")
    expect(bar).to_be_hidden()  # nothing selected yet

    page.keyboard.press("x")  # the card selected on arrival (the first)
    page.keyboard.press("j")
    page.keyboard.press("x")
    expect(bar).to_contain_text("2 selected")
    bar.get_by_role("button", name="Approve selected").click()

    for asked in (first, second):
        expect(page.locator(f"#request-{asked['pendingRequests'][0]['requestId']}")).to_have_count(0)
    expect(page.locator(f"#request-{left['pendingRequests'][0]['requestId']}")).to_be_visible()
    expect(bar).to_be_hidden()
    runs = [continuation_of(api["otto"], asked) for asked in (first, second)]
    assert [r["output"] for r in runs] == ["send_email: sent to a@b.co"] * 2
    assert runs[0]["runId"] != runs[1]["runId"]
