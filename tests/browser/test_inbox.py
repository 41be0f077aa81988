"""The inbox in real browsers: requests appear in every open inbox and disappear from all of them when one
operator answers, without a reload; "don't ask again"; batch answers; readers watch without buttons."""

import json
import re
import time
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import Server
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}
SEND = f"call send_email {json.dumps(EMAIL)}"


@pytest.fixture
def api(server: Server, acme_team: dict[str, str]) -> dict[str, Api]:
    return {name: Api(server.url, token) for name, token in acme_team.items()}


def create_agent(api: dict[str, Api], **fields: Any) -> str:
    name = f"mailer-{uuid4().hex[:6]}"
    status, body = api["ada"]("POST", "/api/agents", {"name": name, **fields})
    assert status == 201, body
    return name


def run(api: Api, agent: str, message: str, session: str) -> dict[str, Any]:
    status, result = api("POST", f"/api/agents/{agent}/runs", {"message": message, "sessionId": session})
    assert status == 200, result
    return result


def pending_total(api: dict[str, Api]) -> int:
    status, body = api["ada"]("GET", "/api/requests?limit=200")
    assert status == 200 and body["next"] is None, body
    return len(body["items"])


def continuation_of(api: Api, asked: dict[str, Any]) -> dict[str, Any]:
    """The run that carried the answers on, once it has finished (the card goes before it is done)."""
    deadline = time.monotonic() + 30
    while True:
        status, runs = api("GET", f"/api/runs?sessionId={asked['sessionId']}")
        assert status == 200, runs
        found = [r for r in runs["items"] if r["previousRunId"] == asked["runId"]]
        if found and found[0]["status"] not in ("queued", "running"):
            return found[0]
        assert time.monotonic() < deadline, f"no finished continuation of {asked['runId']}: {runs}"
        time.sleep(0.2)


def open_inbox(page: Page, agent: str | None = None) -> None:
    """Open the inbox (filtered to `agent`'s requests when given: a request opened before the page may be past its
    first page, the tenant being shared by a worker's tests) and wait until its websocket is up and the list
    re-synced after connecting."""
    page.goto(f"/inbox/?agent={agent}" if agent else "/inbox/")
    expect(page.locator("#inbox-list")).to_have_attribute("data-synced", "true")


def opened(card: Locator) -> Locator:
    """`card`, its body open: on a phone a card is a row until tapped (inbox.js), elsewhere it is shown as it is."""
    row = card.locator("[data-card-row]")
    if row.is_visible() and row.get_attribute("aria-expanded") != "true":
        row.click()
        expect(row).to_have_attribute("aria-expanded", "true")
    return card


def expect_count(page: Page, count: int) -> None:
    expect(page).to_have_title(f"({count}) Inbox · Airlock" if count else "Inbox · Airlock")
    expect(page.locator("#pending-count")).to_have_text(str(count))


def test_it_shows_a_request_live_everywhere_and_takes_it_away_when_an_operator_answers(
    api: dict[str, Api], sign_in: Callable[[str], Page]
) -> None:
    agent, session = create_agent(api, tools=[{"name": "send_email", "approval": "always"}]), uuid4().hex
    first, second, reader = sign_in("otto"), sign_in("ada"), sign_in("rita")
    for page in (first, second, reader):
        open_inbox(page)
    before = pending_total(api)

    asked = run(api["otto"], agent, SEND, session)

    assert asked["status"] == "awaiting_approval"
    rid = asked["pendingRequests"][0]["requestId"]
    for page in (first, second, reader):
        expect(page.locator(f"#request-{rid}")).to_contain_text(f"{agent} wants to call send_email")
        expect_count(page, before + 1)
    expect(first.locator(f"#request-{rid}").get_by_role("button", name="Approve", exact=True)).to_be_visible()
    expect(reader.locator(f"#request-{rid}")).to_contain_text("Waiting for an operator to answer.")
    expect(reader.locator(f"#request-{rid}").get_by_role("button")).to_have_count(0)
    first.screenshot(path="/tmp/airlock-inbox-operator.png", full_page=True)
    reader.screenshot(path="/tmp/airlock-inbox-reader.png", full_page=True)
    status, problem = api["rita"]("POST", f"/api/runs/{asked['runId']}/responses", {"requestId": rid, "approved": True})
    assert status == 403, problem

    card = first.locator(f"#request-{rid}")
    card.get_by_role("radio", name="always").check()  # "always" asks first (tests/browser/test_remember_confirm.py)
    card.get_by_role("button", name="Approve and remember always").click()

    for page in (first, second, reader):
        expect(page.locator(f"#request-{rid}")).to_have_count(0)
        expect_count(page, before)
    continuation = continuation_of(api["otto"], asked)
    assert (continuation["status"], continuation["output"]) == ("completed", "send_email: sent to a@b.co")

    # The remembered rule answers the next identical call: no card, the run completes at once.
    again = run(api["otto"], agent, SEND, session)
    assert (again["status"], again["pendingRequests"]) == ("completed", [])
    second.wait_for_timeout(500)  # time for a push that must not come
    for page in (first, second, reader):
        expect(page.locator(f'.request-card[data-agent="{agent}"]')).to_have_count(0)
        expect_count(page, before)


def test_it_answers_a_runs_approvals_at_once_and_counts_down_their_deadline(
    api: dict[str, Api], sign_in: Callable[[str], Page]
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}], requestDeadlineSeconds=300)
    other = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    page = sign_in("otto")
    open_inbox(page)
    page.get_by_label("Agent", exact=True).select_option(agent)
    expect(page).to_have_url(re.compile(rf"/inbox/\?agent={agent}"))

    run(api["otto"], other, SEND, uuid4().hex)  # filtered out: never shown here
    asked = run(api["otto"], agent, f"{SEND}\n{SEND.replace('a@b.co', 'x@y.co')}", uuid4().hex)

    ids = [p["requestId"] for p in asked["pendingRequests"]]
    bar = page.locator(f'.batch-bar[data-batch-run="{asked["runId"]}"]')
    expect(bar).to_contain_text("This run asks 2 approvals")
    expect(page.locator(".request-card")).to_have_count(2)
    expect(page.locator(f"#request-{ids[0]} .countdown")).to_have_text(re.compile(r"^expires in 4:[45]\d$"))
    page.screenshot(path="/tmp/airlock-inbox-batch.png", full_page=True)

    # After a reconnect (console.js pushes a heartbeat) the list is fetched again and merged in: a missed
    # card comes back, a stale one goes, and what was typed into the others stays.
    card = page.locator(f"#request-{ids[0]}")
    card.get_by_label("Reason").fill("typed before the reconnect")
    page.evaluate(
        """([missed]) => {
            document.getElementById(`request-${missed}`).remove();
            document.getElementById("inbox-list").insertAdjacentHTML("afterbegin",
                '<article class="request-card" id="request-stale" data-kind="approval"></article>');
            document.getElementById("inbox-list").dataset.synced = "";
            document.dispatchEvent(new CustomEvent("airlock:push", {detail: {type: "heartbeat", pending: 1}}));
        }""",
        [ids[1]],
    )
    expect(page.locator("#inbox-list")).to_have_attribute("data-synced", "true")
    expect(page.locator(".request-card")).to_have_count(2)
    expect(page.locator("#request-stale")).to_have_count(0)
    expect(card.get_by_label("Reason")).to_have_value("typed before the reconnect")
    expect(bar).to_contain_text("This run asks 2 approvals")

    # Edited arguments are checked before anything is posted.
    card.get_by_text("Edit arguments before approving").click()
    card.get_by_role("textbox", name=re.compile(r"^Arguments")).fill('{"to": ')
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card.locator('[data-error-for="arguments"]')).to_contain_text("Not valid JSON")

    bar.get_by_label("Reason for denying all").fill("no mail today")
    bar.get_by_role("button", name="Deny all").click()

    expect(page.locator(".request-card")).to_have_count(0)
    expect(page.locator(".batch-bar")).to_have_count(0)
    expect(page.locator(".inbox-empty")).to_have_text("No open request matches these filters.")
    continuation = continuation_of(api["otto"], asked)
    assert continuation["output"] == "send_email denied: no mail today\nsend_email denied: no mail today"


def test_it_answers_an_elicitation_from_its_generated_form(api: dict[str, Api], sign_in: Callable[[str], Page]) -> None:
    agent = create_agent(api, mcpServers=[{"connection": "meetings"}])
    page = sign_in("otto")
    open_inbox(page)

    asked = run(api["otto"], agent, 'call book_meeting {"topic": "Roadmap"}', uuid4().hex)

    assert asked["status"] == "awaiting_input", asked
    card = page.locator(f"#request-{asked['pendingRequests'][0]['requestId']}")
    expect(card).to_contain_text("Which day should I book?")
    card.get_by_role("button", name="Accept").click()
    expect(card.locator('[data-error-for="day"]')).to_have_text("This field is required.")
    page.screenshot(path="/tmp/airlock-inbox-input.png", full_page=True)
    card.get_by_label("Day").fill("Friday")
    card.get_by_role("button", name="Accept").click()

    expect(card).to_have_count(0)
    assert continuation_of(api["otto"], asked)["output"] == 'book_meeting: Booked "Roadmap" on Friday'


# Watches the real Notification API: each notification shown is recorded, and the page can be made hidden.
WATCH_NOTIFICATIONS = """
(() => {
  Object.defineProperty(document, "hidden", { configurable: true, get: () => window.__hidden === true });
  const Real = window.Notification;
  window.__notes = [];
  class Watched extends Real {
    constructor(title, options) {
      super(title, options);
      window.__notes.push({ title, body: options.body, tag: options.tag });
    }
  }
  Object.defineProperty(Watched, "permission", { get: () => Real.permission });
  Watched.requestPermission = (...args) => Real.requestPermission(...args);
  window.Notification = Watched;
})();
"""


def test_it_notifies_a_hidden_inbox_of_a_new_request_and_a_visible_one_not(
    api: dict[str, Api], sign_in: Callable[[str], Page], server: Server
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    page = sign_in("otto")
    page.context.grant_permissions(["notifications"], origin=server.url)
    page.context.add_init_script(WATCH_NOTIFICATIONS)
    open_inbox(page)
    expect(page.get_by_role("button", name="Enable notifications")).to_be_hidden()  # already granted

    page.evaluate("window.__hidden = true")
    hidden = run(api["otto"], agent, SEND, uuid4().hex)
    expect(page.locator(f"#request-{hidden['pendingRequests'][0]['requestId']}")).to_be_visible()
    page.wait_for_function("window.__notes.length === 1")
    [note] = page.evaluate("window.__notes")
    assert note == {
        "title": "An agent is waiting for an answer",
        "body": f"{agent}: send_email",
        "tag": "airlock-inbox",
    }

    page.evaluate("window.__hidden = false")
    shown = run(api["otto"], agent, SEND, uuid4().hex)
    expect(page.locator(f"#request-{shown['pendingRequests'][0]['requestId']}")).to_be_visible()
    assert page.evaluate("window.__notes.length") == 1


def test_an_operator_cancels_a_waiting_run_from_its_page_and_every_inbox_lets_its_card_go(
    api: dict[str, Api], sign_in: Callable[[str], Page]
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    watcher, page = sign_in("ada"), sign_in("otto")
    open_inbox(watcher)
    asked = run(api["otto"], agent, SEND, uuid4().hex)
    card = watcher.locator(f"#request-{asked['pendingRequests'][0]['requestId']}")
    expect(card).to_be_visible()

    page.goto(f"/runs/{asked['runId']}/")
    questions: list[str] = []
    page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Cancel run").click()
    expect(page.get_by_role("button", name="Cancel run")).to_be_visible()  # dismissed: nothing happened
    assert questions and "open requests close" in questions[0]
    expect(card).to_be_visible()

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator(".messages")).to_contain_text("Cancelled the run")
    expect(page.locator("h1 .pill")).to_have_text("cancelled")
    expect(card).to_have_count(0)


def test_an_operator_cancels_a_run_from_its_inbox_card(api: dict[str, Api], sign_in: Callable[[str], Page]) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    watcher, page = sign_in("ada"), sign_in("otto")
    open_inbox(watcher)
    open_inbox(page)
    asked = run(api["otto"], agent, SEND, uuid4().hex)
    rid = asked["pendingRequests"][0]["requestId"]
    card, watched = page.locator(f"#request-{rid}"), watcher.locator(f"#request-{rid}")
    expect(card).to_be_visible()

    page.once("dialog", lambda dialog: dialog.dismiss())
    card.get_by_role("button", name="Cancel the run").click()
    expect(watched).to_be_visible()

    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Cancel the run").click()
    expect(card).to_have_count(0)
    expect(watched).to_have_count(0)
    status, ended = api["otto"]("GET", f"/api/runs/{asked['runId']}")
    assert (status, ended["status"]) == (200, "cancelled")
