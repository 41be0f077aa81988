"""Forks in a real browser (issue 14): a run asks a question with choices, an operator answers it from the
inbox, the trial page shows the continuation; then the operator forks the session from that first turn on
the trial page and answers differently (the choice's button of the inbox's widget). Each session keeps its own
answer, and both run pages show the branch.
"""

import re
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

COLOR = 'call ask_user {"question": "Which colour?", "choices": ["red", "blue"]}'


@pytest.fixture
def api(server: Server, acme_team: dict[str, str]) -> dict[str, Api]:
    return {name: Api(server.url, token) for name, token in acme_team.items()}


def until_shown(page: Page, text: str) -> None:
    """The trial page is not live yet: reload it until a turn a worker ran shows `text`."""
    for _ in range(50):
        if page.locator(".turn", has_text=text).count():
            return
        page.wait_for_timeout(200)
        page.reload()
    expect(page.locator(".turn", has_text=text)).to_have_count(1)


def test_an_operator_forks_a_session_at_its_first_turn_and_answers_its_question_differently(
    api: dict[str, Api], sign_in: Callable[[str], Page]
) -> None:
    agent = f"asker-{uuid4().hex[:6]}"
    status, body = api["ada"]("POST", "/api/agents", {"name": agent, "tools": [{"name": "ask_user"}]})
    assert status == 201, body
    page = sign_in("otto")

    # The run asks; the operator answers "red" from the inbox.
    page.goto(f"/trial/?agent={agent}")
    page.get_by_label("Message").fill(COLOR)
    page.locator("#send").click()
    expect(page.locator(".request-widget")).to_contain_text("Which colour?")
    session = page.locator("#session-key").inner_text()
    asked = page.locator(".turn").first.get_attribute("data-run")
    page.goto(f"/inbox/?agent={agent}")  # the shared tenant may hold more than a page of older requests
    card = page.locator(f'.request-card[data-agent="{agent}"]')
    expect(card).to_contain_text("Which colour?")
    card.get_by_role("button", name="red", exact=True).click()
    expect(card).to_have_count(0)

    page.goto(f"/trial/?agent={agent}&session={session}")
    until_shown(page, "ask_user: red")
    # An earlier turn offers its fork on a page drawn once a later turn ended (a page opened while the
    # continuation ran shows it streaming in and leaves the first turn as it was drawn): reload until then.
    for _ in range(50):
        if page.locator(f"#turn-{asked}").get_by_text("Answer differently (fork)").count():
            break
        page.wait_for_timeout(200)
        page.reload()
    expect(page.locator(".turn")).to_have_count(2)
    expect(page.locator(".answers:not([data-fork]) .request-widget")).to_have_count(0)

    # Back to the first turn: answer "blue" instead, in a fork of the session (its choice button forks).
    first = page.locator(f"#turn-{asked}")
    first.get_by_text("Answer differently (fork)").click()
    forking = first.locator("[data-fork]")
    expect(forking).to_contain_text("Which colour?")
    page.screenshot(path="/tmp/airlock-fork-form.png", full_page=True)
    forking.get_by_role("button", name="blue", exact=True).click()
    page.wait_for_url(re.compile(r"/trial/\?.*session=(?!" + re.escape(session) + ")"))
    [fork] = re.findall(r"session=([^&]+)", page.url)
    until_shown(page, "ask_user: blue")
    expect(page.locator(".forked-from")).to_contain_text(f"Forked from session {session} at turn 1")
    expect(page.locator(".turn")).to_have_count(1)
    expect(page.locator(".turn").first).to_contain_text("Answered ask_user: “blue”")
    expect(page.get_by_text("ask_user: red")).to_have_count(0)
    page.screenshot(path="/tmp/airlock-fork-trial.png", full_page=True)

    # The original is untouched, and the way back leads to it.
    page.locator(".forked-from").get_by_role("link", name=session).click()
    expect(page.locator(".turn")).to_have_count(2)
    expect(page.locator(".turn").last).to_contain_text("ask_user: red")
    expect(page.get_by_text("ask_user: blue")).to_have_count(0)

    # Both run pages show the branch: the original's first turn leads to the fork, the fork's back to that turn.
    page.goto(f"/runs/{asked}/")
    turns = page.locator(".session-runs > li.session-turn")  # between them, the gap the answer took
    expect(turns).to_have_count(2)
    expect(turns.first).to_contain_text(f"branch: session {fork}")
    page.screenshot(path="/tmp/airlock-fork-original-run.png", full_page=True)
    turns.first.get_by_role("link", name=f"session {fork}").click()
    expect(page.locator(".forked-from")).to_contain_text(f"Forked from session {session} at turn 1")
    expect(page.locator(".session-runs > li.session-turn")).to_have_count(1)
    expect(page.locator(".session-runs > li.current")).to_contain_text("this run")
    page.screenshot(path="/tmp/airlock-fork-run.png", full_page=True)
    page.locator(".forked-from").get_by_role("link", name="turn 1").click()
    expect(page).to_have_url(re.compile(f"/runs/{asked}/$"))


def test_an_answer_continues_on_the_version_the_agent_was_edited_to_while_the_run_waited(
    api: dict[str, Api], sign_in: Callable[[str], Page]
) -> None:
    agent = f"asker-{uuid4().hex[:6]}"
    definition = {"name": agent, "instructions": "Version one.", "tools": [{"name": "ask_user"}]}
    status, body = api["ada"]("POST", "/api/agents", definition)
    assert status == 201, body
    page = sign_in("otto")
    page.goto(f"/trial/?agent={agent}")
    page.get_by_label("Message").fill(COLOR)
    page.locator("#send").click()
    expect(page.locator(".request-widget")).to_contain_text("Which colour?")
    expect(page.get_by_label("Continue on")).to_have_count(0)

    status, body = api["ada"]("PUT", f"/api/agents/{agent}", {**definition, "instructions": "Version two."})
    assert status == 200, body
    page.reload()
    widget = page.locator(".request-widget")
    expect(widget.get_by_label("Continue on")).to_have_value("1")
    widget.get_by_label("Continue on").select_option(label="v2 (current)")
    page.screenshot(path="/tmp/airlock-continue-on.png", full_page=True)
    widget.get_by_role("button", name="red", exact=True).click()
    expect(page.locator(".turn").last).to_contain_text("ask_user: red", timeout=15000)

    # The continuation ran on v2, and so does the session's next turn.
    expect(page.locator("#version-select")).to_have_value("2")
    page.get_by_label("Message").fill("echo instructions")
    page.locator("#send").click()
    expect(page.locator(".turn").last).to_contain_text("Version two.")
    page.locator(".turn").nth(1).get_by_role("link", name="run details").click()
    expect(page.locator(".facts")).to_contain_text("version 2")


def test_a_fork_answers_every_request_open_at_its_turn(api: dict[str, Api], sign_in: Callable[[str], Page]) -> None:
    agent, session = f"asker-{uuid4().hex[:6]}", uuid4().hex
    status, body = api["ada"]("POST", "/api/agents", {"name": agent, "tools": [{"name": "ask_user"}]})
    assert status == 201, body
    name = 'call ask_user {"question": "What is your name?"}'
    status, asked = api["otto"](
        "POST", f"/api/agents/{agent}/runs", {"message": f"{COLOR}\n{name}", "sessionId": session}
    )
    assert status == 200 and len(asked["pendingRequests"]) == 2, asked
    for pending, text in zip(asked["pendingRequests"], ("red", "Ada"), strict=True):
        status, outcome = api["otto"](
            "POST", f"/api/runs/{asked['runId']}/responses", {"requestId": pending["requestId"], "text": text}
        )
        assert outcome["status"] == "accepted", outcome
    page = sign_in("otto")
    page.goto(f"/trial/?agent={agent}&session={session}")
    until_shown(page, "ask_user: Ada")

    # The first answer forks; the fork's copy of the other request waits on the fork's page.
    first = page.locator(f"#turn-{asked['runId']}")
    first.get_by_text("Answer differently (fork)").click()
    forking = first.locator("[data-fork]")
    expect(forking).to_contain_text("The other requests open there wait in the new session.")
    forking.get_by_role("button", name="blue", exact=True).click()
    page.wait_for_url(re.compile(r"/trial/\?.*session=(?!" + re.escape(session) + ")"))
    waiting = page.locator("#fork-waiting .request-widget")
    expect(waiting).to_have_count(1)
    expect(waiting).to_contain_text("What is your name?")
    waiting.get_by_label("Your answer").fill("Grace")
    waiting.get_by_role("button", name="Send answer").click()
    until_shown(page, "ask_user: Grace")
    expect(page.locator(".turn").last).to_contain_text("ask_user: blue")
    page.reload()
    expect(page.locator("#fork-waiting")).to_have_count(0)


def test_an_operator_forks_a_session_from_a_turn_that_asked_nothing_on_the_run_page(
    api: dict[str, Api], sign_in: Callable[[str], Page]
) -> None:
    agent, session = f"clock-{uuid4().hex[:6]}", uuid4().hex
    status, body = api["ada"]("POST", "/api/agents", {"name": agent, "tools": [{"name": "get_time"}]})
    assert status == 201, body
    ran = []
    for n in (1, 2, 3):
        message = {"message": f"call get_time\nturn {n}", "sessionId": session}
        status, result = api["otto"]("POST", f"/api/agents/{agent}/runs", message)
        assert status == 200 and result["status"] == "completed", result
        ran.append(result["runId"])
    page = sign_in("otto")

    # On the latest turn's page, every earlier turn offers "Fork from here"; the operator forks at turn 1.
    page.goto(f"/runs/{ran[2]}/")
    turns = page.locator(".session-runs > li.session-turn")
    expect(turns).to_have_count(3)
    expect(page.locator("form.fork-turn")).to_have_count(2)  # in turns 1 and 2, folded
    turns.first.locator("summary").click()
    page.screenshot(path="/tmp/airlock-fork-from-here.png", full_page=True)
    turns.first.get_by_role("button", name="Fork from here").click()
    page.wait_for_url(re.compile(r"/trial/\?.*session=(?!" + re.escape(session) + ")"))
    [fork] = re.findall(r"session=([^&]+)", page.url)
    expect(page.locator(".forked-from")).to_contain_text(f"Forked from session {session} at turn 1")
    expect(page.locator(".turn")).to_have_count(0)

    # The next message goes on from turn 1: one tool call in its history, so the model numbers this one call_2.
    page.get_by_label("Message").fill("call get_time\nin the fork")
    page.locator("#send").click()
    expect(page.locator(".turn").last).to_contain_text("get_time: ", timeout=15000)
    page.screenshot(path="/tmp/airlock-fork-from-here-trial.png", full_page=True)
    page.locator(".turn").last.get_by_role("link", name="run details").click()
    expect(page.locator(".forked-from")).to_contain_text(f"Forked from session {session} at turn 1")
    expect(page.locator(".session-runs > li.current")).to_contain_text("call call_2")
    expect(page.locator("form.fork-turn")).to_have_count(0)  # its only turn is its latest

    # The original keeps its three turns, and its first shows the branch.
    page.goto(f"/runs/{ran[2]}/")
    expect(turns).to_have_count(3)
    expect(turns.first).to_contain_text(f"branch: session {fork}")
    expect(page.get_by_text("in the fork")).to_have_count(0)

    # The original's trial page offers the same beside its earlier turns: forking at turn 2 goes on there.
    page.goto(f"/trial/?agent={agent}&session={session}")
    expect(page.locator(".turn")).to_have_count(3)
    expect(page.get_by_role("button", name="Fork from here")).to_have_count(2)
    page.locator(f"#turn-{ran[1]}").get_by_role("button", name="Fork from here").click()
    page.wait_for_url(re.compile(r"/trial/\?.*session=(?!" + re.escape(session) + "|" + re.escape(fork) + ")"))
    expect(page.locator(".forked-from")).to_contain_text(f"Forked from session {session} at turn 2")
