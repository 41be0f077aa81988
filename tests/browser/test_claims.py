"""Claims in real browsers: one operator claims a card and every other open inbox shows who within a second,
over the console websocket; releasing clears it everywhere; the other operator can still answer."""

import time
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_inbox import SEND, api, create_agent, open_inbox, run  # noqa: F401 - `api` is a fixture
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser


def test_a_claim_shows_in_a_second_browser_within_a_second(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    claimer, watcher = sign_in("otto"), sign_in("ada")
    for page in (claimer, watcher):
        open_inbox(page)
    asked = run(api["otto"], agent, SEND, uuid4().hex)
    rid = asked["pendingRequests"][0]["requestId"]
    mine, theirs = claimer.locator(f"#request-{rid}"), watcher.locator(f"#request-{rid}")
    expect(theirs).to_be_visible()
    expect(theirs.locator("[data-claim]")).to_have_text("")

    mine.get_by_role("button", name="Claim").click()
    clicked = time.monotonic()
    expect(theirs.locator("[data-claim]")).to_contain_text("claimed by otto", timeout=1000)
    assert time.monotonic() - clicked < 1.0
    expect(mine.locator("[data-claim]")).to_contain_text("claimed by otto")
    expect(mine.get_by_role("button", name="Release")).to_be_visible()
    expect(theirs.get_by_role("button", name="Claim")).to_be_visible()  # ada may take it over
    status, body = api["ada"]("GET", f"/api/requests/{rid}")
    assert (status, body["claimedBy"]) == (200, "otto")

    mine.get_by_role("button", name="Release").click()
    expect(theirs.locator("[data-claim]")).to_have_text("", timeout=1000)
    expect(mine.get_by_role("button", name="Claim")).to_be_visible()

    # A claim is a signal, not a lock: claimed by otto, answered by ada.
    mine.get_by_role("button", name="Claim").click()
    expect(theirs.locator("[data-claim]")).to_contain_text("claimed by otto")
    theirs.get_by_role("button", name="Approve", exact=True).click()
    expect(mine).to_have_count(0)
    expect(theirs).to_have_count(0)
