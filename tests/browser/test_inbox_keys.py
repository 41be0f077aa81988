"""The inbox's keys on every kind in a real browser: 1-9 pick a question's choice; a, d and e answer,
decline or edit questions, plans and forms; r is "don't ask again"; the Kind filter names every kind; and the
focus after an answer never lands on a card that arrived meanwhile, nor takes a stray second press."""

import re
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Locator, Page, expect

from agents.request_kinds import kind_choices
from tests.browser.test_inbox import SEND, api, continuation_of, create_agent, run  # noqa: F401 - `api` is a fixture
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

COLOUR = 'call ask_user {"question": "Which colour?", "choices": ["red", "blue"]}'
NAME = 'call ask_user {"question": "What is your name?"}'
PLAN = 'call propose_plan {"steps": ["Read the logs", "Restart"]}'
MEETING = 'call book_meeting {"topic": "Roadmap"}'


def open_filtered(page: Page, query: str) -> None:
    page.goto(f"/inbox/?{query}")
    expect(page.locator("#inbox-list")).to_have_attribute("data-synced", "true")


def settled(card: Locator) -> None:
    """The card has the focus, and the moment in which no key answers a card the focus moved to is over."""
    expect(card).to_be_focused()
    expect(card).not_to_have_class(re.compile(r"\bsettling\b"))


def test_the_keys_answer_questions_plans_and_forms(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent = create_agent(
        api, tools=[{"name": "ask_user"}, {"name": "propose_plan"}], mcpServers=[{"connection": "meetings"}]
    )
    asked = [run(api["otto"], agent, message, uuid4().hex) for message in (COLOUR, NAME, PLAN, PLAN, MEETING)]
    page = sign_in("otto")
    open_filtered(page, f"agent={agent}")
    ids = [a["pendingRequests"][0]["requestId"] for a in asked]
    colour, name, plan, revised, meeting = (page.locator(f"#request-{rid}") for rid in ids)
    expect(colour.get_by_role("button", name="blue", exact=True)).to_have_attribute("aria-keyshortcuts", "2")

    expect(colour).to_have_class(re.compile(r"\bselected\b"))  # the first card, marked before any key
    page.keyboard.press("2")
    expect(colour).to_have_count(0)
    assert continuation_of(api["otto"], asked[0])["output"] == "ask_user: blue"

    settled(name)
    page.keyboard.press("a")  # nothing typed yet: a goes to the answer's field first
    expect(name.get_by_label("Your answer")).to_be_focused()
    page.keyboard.type("Ada")
    page.keyboard.press("Enter")
    expect(name).to_have_count(0)
    assert continuation_of(api["otto"], asked[1])["output"] == "ask_user: Ada"

    settled(plan)
    page.keyboard.press("a")
    expect(plan).to_have_count(0)

    settled(revised)
    page.keyboard.press("d")
    expect(revised.get_by_label("What to revise")).to_be_focused()
    page.keyboard.type("Check the disk first")
    page.keyboard.press("Enter")
    expect(revised).to_have_count(0)
    assert continuation_of(api["otto"], asked[3])["output"] == "propose_plan: revise: Check the disk first"

    settled(meeting)
    page.keyboard.press("e")
    expect(meeting.get_by_label("Day")).to_be_focused()
    page.keyboard.type("Friday")
    page.keyboard.press("Escape")
    expect(meeting).to_be_focused()
    page.keyboard.press("a")
    expect(meeting).to_have_count(0)
    assert continuation_of(api["otto"], asked[4])["output"] == 'book_meeting: Booked "Roadmap" on Friday'

    page.keyboard.press("?")
    keys = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(keys).to_contain_text("pick a question's choice by its number")
    expect(keys).to_contain_text("don't ask again for this tool")


def test_r_remembers_the_approval_and_the_kind_filter_names_every_kind(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}, {"name": "ask_user"}])
    session = uuid4().hex
    approval = run(api["otto"], agent, SEND, session)
    question = run(api["otto"], agent, COLOUR, uuid4().hex)
    page = sign_in("otto")

    open_filtered(page, f"agent={agent}&kind=question")
    kind = page.get_by_label("Kind")
    expect(kind).to_have_value("question")
    expect(kind.locator("option")).to_have_text(["Any kind", *(label for _, label in kind_choices())])
    assert len(kind_choices()) == 6
    expect(page.locator(".request-card")).to_have_count(1)
    expect(page.locator(f"#request-{question['pendingRequests'][0]['requestId']}")).to_be_visible()

    open_filtered(page, f"agent={agent}&kind=approval")
    card = page.locator(f"#request-{approval['pendingRequests'][0]['requestId']}")
    page.keyboard.press("j")
    expect(card).to_be_focused()
    page.keyboard.press("r")
    expect(card.get_by_role("radio", name="this session")).to_be_checked()
    page.keyboard.press("r")
    expect(card.get_by_role("radio", name="always")).to_be_checked()
    # "always" asks first: its confirmation takes the focus, Enter confirms (tests/browser/test_remember_confirm.py).
    expect(card.get_by_role("button", name="Approve and remember always")).to_be_focused()
    page.keyboard.press("Enter")
    expect(card).to_have_count(0)
    continuation_of(api["otto"], approval)
    again = run(api["otto"], agent, SEND, session)
    assert (again["status"], again["pendingRequests"]) == ("completed", [])


def test_the_focus_never_lands_on_a_card_that_arrived_meanwhile_nor_takes_a_stray_press(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    first, second = (run(api["otto"], agent, SEND, uuid4().hex) for _ in range(2))
    page = sign_in("otto")
    open_filtered(page, f"agent={agent}")
    cards = [page.locator(f"#request-{a['pendingRequests'][0]['requestId']}") for a in (first, second)]

    expect(cards[0]).to_have_class(re.compile(r"\bselected\b"))
    page.keyboard.press("a")
    expect(cards[0]).to_have_count(0)
    expect(cards[1]).to_be_focused()
    page.keyboard.press("a")  # a second press at once: the card the focus moved to is not answered unread
    page.wait_for_timeout(800)
    expect(cards[1]).to_have_count(1)

    late = run(api["otto"], agent, SEND, uuid4().hex)
    arrived = page.locator(f"#request-{late['pendingRequests'][0]['requestId']}")
    expect(arrived).to_be_visible()
    page.keyboard.press("a")  # the card that had the focus before the new one came
    expect(cards[1]).to_have_count(0)
    expect(arrived).not_to_be_focused()
    page.keyboard.press("a")
    page.wait_for_timeout(500)
    expect(arrived).to_have_count(1)
    api["otto"]("POST", f"/api/runs/{late['runId']}/cancel")


def test_the_first_j_moves_off_the_selected_card_and_a_answers_the_one_it_moved_to(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    asked = [run(api["otto"], agent, SEND, uuid4().hex) for _ in range(3)]
    page = sign_in("otto")
    page.set_viewport_size({"width": 800, "height": 900})  # the cards as they are, no rows beside them
    open_filtered(page, f"agent={agent}")
    first, second, third = (page.locator(f"#request-{a['pendingRequests'][0]['requestId']}") for a in asked)

    # The selection is marked before any key acts: the first card, set apart from the others.
    expect(first).to_have_class(re.compile(r"\bselected\b"))
    marks = [card.evaluate("(card) => getComputedStyle(card).boxShadow") for card in (first, second)]
    assert marks[0] != marks[1] and marks[1] == "none", marks

    page.keyboard.press("j")
    expect(second).to_be_focused()
    expect(second).to_have_class(re.compile(r"\bselected\b"))
    expect(first).not_to_have_class(re.compile(r"\bselected\b"))
    page.keyboard.press("a")
    expect(second).to_have_count(0)
    assert continuation_of(api["otto"], asked[1])["output"] == "send_email: sent to a@b.co"
    expect(first).to_have_count(1)
    expect(third).to_have_count(1)
    for left in asked[0], asked[2]:
        api["otto"]("POST", f"/api/runs/{left['runId']}/cancel")
