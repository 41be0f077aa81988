"""The dense inbox in a real browser: at 1366 px one row per request with the selected request's card beside
the rows, live (new rows, answered ones gone, claims); the saved views. (A phone's rows: test_inbox_phone.py.)"""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.test_inbox import SEND, api, create_agent, run  # noqa: F401 - `api` is a fixture
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

LAPTOP = {"width": 1366, "height": 768}


def waiting(api: dict[str, Api], count: int) -> tuple[str, list[str], list[str]]:  # noqa: F811
    """A new agent with `count` approval requests, each of its own run: (agent, request ids oldest first, their
    runs)."""
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    asked = [run(api["otto"], agent, SEND.replace("a@b.co", f"n{n}@b.co"), uuid4().hex) for n in range(count)]
    return agent, [a["pendingRequests"][0]["requestId"] for a in asked], [a["runId"] for a in asked]


def open_agent(page: Page, agent: str, query: str = "") -> None:
    page.goto(f"/inbox/?agent={agent}{query}")
    expect(page.locator("#inbox-list")).to_have_attribute("data-synced", "true")


def rows_in_sight(page: Page) -> int:
    return page.evaluate(
        """() => [...document.querySelectorAll(".card-row")].filter((row) => {
             const box = row.getBoundingClientRect();
             return box.height > 0 && box.top >= 0 && box.bottom <= window.innerHeight;
           }).length"""
    )


def test_it_lists_a_row_per_request_with_the_selected_card_beside_them_live(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
    axe_source: str,
) -> None:
    agent, ids, runs = waiting(api, 12)
    page = sign_in("otto")
    page.set_viewport_size(LAPTOP)
    open_agent(page, agent)

    assert rows_in_sight(page) >= 10
    cards = [page.locator(f"#request-{rid}") for rid in ids]
    expect(cards[0].locator(".card-row")).to_contain_text("to: n0@b.co")
    # The first request's card stands beside the rows; the others are rows only.
    expect(cards[0].locator(".card-body")).to_be_visible()
    expect(cards[1].locator(".card-body")).to_be_hidden()
    row_box, body_box = cards[0].locator(".card-row").bounding_box(), cards[0].locator(".card-body").bounding_box()
    assert row_box and body_box and body_box["x"] > row_box["x"] + row_box["width"]
    assert violations(page, axe_source) == []
    page.screenshot(path="/tmp/airlock-inbox-dense.png")

    cards[2].locator(".card-row").click()
    expect(cards[2].locator(".card-body")).to_be_visible()
    expect(cards[0].locator(".card-body")).to_be_hidden()
    expect(cards[2].locator(".card-row")).to_have_attribute("aria-current", "true")

    cards[2].get_by_role("button", name="Approve", exact=True).click()
    expect(cards[2]).to_have_count(0)
    # The card that was next is shown and focused; answered elsewhere, a row goes; a new request comes in.
    expect(cards[3]).to_be_focused()
    expect(cards[3].locator(".card-body")).to_be_visible()
    status, _ = api["ada"]("POST", f"/api/requests/{ids[5]}/claim")
    assert status == 200
    expect(cards[5].locator("[data-row-claim]")).to_have_text("claimed by ada")
    denial = {"requestId": ids[4], "approved": False, "reason": "no"}
    status, body = api["ada"]("POST", f"/api/runs/{runs[4]}/responses", denial)
    assert status in (200, 202), body
    expect(cards[4]).to_have_count(0)
    late = run(api["otto"], agent, SEND.replace("a@b.co", "late@b.co"), uuid4().hex)
    expect(page.locator(f"#request-{late['pendingRequests'][0]['requestId']} .card-row")).to_contain_text("late@b.co")
    expect(cards[3]).to_be_focused()

    # j moves the selection with the focus.
    page.keyboard.press("j")
    expect(cards[5]).to_be_focused()
    expect(cards[5].locator(".card-body")).to_be_visible()
    expect(cards[3].locator(".card-body")).to_be_hidden()


def test_a_card_swapped_for_itself_stays_beside_the_rows_with_what_it_says(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    """An answer the server refuses, or a claim, swaps the card for the server's: it stays shown, its error in sight
    (htmx settles the new card with the server's class, which had lost the selection's)."""
    agent = create_agent(api, tools=[{"name": "propose_plan"}])
    asked = [run(api["otto"], agent, 'call propose_plan {"steps": ["Draft", "Send"]}', uuid4().hex) for _ in "ab"]
    ids = [a["pendingRequests"][0]["requestId"] for a in asked]
    page = sign_in("otto")
    page.set_viewport_size(LAPTOP)
    open_agent(page, agent)
    card = page.locator(f"#request-{ids[1]}")
    card.locator(".card-row").click()
    expect(card.locator(".card-body")).to_be_visible()

    card.get_by_role("button", name="Send back to revise").click()
    expect(card.locator("[data-error-for=text]")).to_have_text("Say what to revise.")
    expect(card.locator(".card-body")).to_be_visible()
    expect(card.locator(".card-row")).to_have_attribute("aria-current", "true")

    card.get_by_role("button", name="Claim").click()
    expect(card.locator("[data-row-claim]")).to_contain_text("claimed by")
    expect(card.locator(".card-body")).to_be_visible()
    expect(page.locator(f"#request-{ids[0]} .card-body")).to_be_hidden()


def test_the_saved_views_pick_what_is_mine_claimed_routed_and_answered(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent, ids, _ = waiting(api, 3)
    page = sign_in("otto")
    page.set_viewport_size(LAPTOP)
    open_agent(page, agent)
    page.locator(f"#request-{ids[1]} .card-row").click()
    page.locator(f"#request-{ids[1]}").get_by_role("button", name="Claim").click()
    expect(page.locator(f"#request-{ids[1]} [data-row-claim]")).to_have_text("claimed by otto")

    page.get_by_role("navigation", name="Saved views").get_by_role("link", name="Claimed by me").click()
    expect(page).to_have_url(f"{page.url.split('?')[0]}?agent={agent}&view=claimed")
    expect(page.locator("#inbox-list")).to_have_attribute("data-synced", "true")
    expect(page.locator(".request-card")).to_have_count(1)
    expect(page.locator(f"#request-{ids[1]}")).to_be_visible()
    # Another operator's claim brings no request into "claimed by me".
    status, _ = api["ada"]("POST", f"/api/requests/{ids[2]}/claim")
    assert status == 200
    page.locator(f"#request-{ids[1]}").get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".request-card")).to_have_count(0)

    page.get_by_role("link", name="Recently answered by me").click()
    expect(page.locator(f"#request-{ids[1]}")).to_contain_text("answered")
    expect(page.locator(f"#request-{ids[1]}").get_by_role("link", name="Receipt")).to_be_visible()
    expect(page.locator(".request-card")).to_have_count(1)
