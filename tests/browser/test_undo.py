"""Undo in the inbox (issue 31): an answer, one or a bulk one, is held for its window with a notice and its
Undo; undone, nothing ran and the request is pending again, and the audit says so; not undone, it applies
when the window closes. A server of its own, whose window is 3 s (the shared one answers at once)."""

import time
from collections.abc import Callable, Iterator
from typing import Any
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.conftest import PHONE, Server, overflow
from tests.browser.test_inbox import SEND, continuation_of, create_agent, open_inbox, opened, run
from tests.browser.test_trial import SEND as TRIAL_SEND
from tests.browser.test_trial import create_agent as create_trial_agent
from tests.browser.test_trial import send
from tests.processes.cluster import PASSWORD, Api, manage_all, new_cluster

pytestmark = pytest.mark.browser

WINDOW = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    cluster = new_cluster(tmp_path_factory.mktemp("airlock-undo"), ANSWER_UNDO_SECONDS=str(WINDOW))
    cluster.manage("collectstatic", "--noinput")
    try:
        console = cluster.serve(WORKER_THREADS="2")
        yield Server(console.url, "ada", PASSWORD, cluster.env)
    finally:
        cluster.stop_all()


@pytest.fixture(scope="module")
def api(server: Server) -> dict[str, Api]:
    made = ["create_user", "otto", "--tenant", "acme", "--role", "operator", "--password", server.password]
    tokens = manage_all(server.env, made, *[["create_token", name, "--tenant", "acme"] for name in ("ada", "otto")])
    return {name: Api(server.url, token.strip()) for name, token in zip(("ada", "otto"), tokens[1:], strict=True)}


def still_pending(api: dict[str, Api], asked: dict[str, Any]) -> None:
    """The request is open, and no run carried an answer on (the tool did not run)."""
    rid = asked["pendingRequests"][0]["requestId"]
    status, body = api["ada"]("GET", "/api/requests?status=pending&limit=200")
    assert status == 200 and rid in [item["requestId"] for item in body["items"]], body
    status, runs = api["ada"]("GET", f"/api/runs?sessionId={asked['sessionId']}")
    assert [r for r in runs["items"] if r["previousRunId"] == asked["runId"]] == []


def test_it_undoes_a_single_and_a_bulk_answer(api: dict[str, Api], sign_in: Callable[[str], Page]) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    page, other = sign_in("otto"), sign_in("ada")
    for each in (page, other):
        open_inbox(each)
    single = run(api["otto"], agent, SEND, uuid4().hex)
    rid = single["pendingRequests"][0]["requestId"]
    card = page.locator(f"#request-{rid}")

    card.get_by_role("button", name="Approve", exact=True).click()

    notice = page.locator(".undo-notice")
    expect(notice).to_contain_text("Approved send_email · Undo")
    expect(card).to_have_count(0)
    expect(other.locator(f"#request-{rid}")).to_have_count(0)  # held: out of every inbox, as if answered
    notice.get_by_role("button", name="Undo: Approved send_email").click()
    expect(notice).to_contain_text("Undone: send_email is pending again.")
    for each in (page, other):
        expect(each.locator(f"#request-{rid}")).to_be_visible()
    time.sleep(WINDOW + 1)
    still_pending(api, single)

    bulk = [run(api["otto"], agent, SEND, uuid4().hex) for _ in range(2)]
    for asked in bulk:
        page.locator(f"#request-{asked['pendingRequests'][0]['requestId']}").get_by_role(
            "checkbox", name="Select"
        ).check()
    page.locator("#selection").get_by_role("button", name="Approve selected").click()
    expect(page.locator(".undo-notice", has_text="Approved 2 requests")).to_contain_text("Approved 2 requests · Undo")
    bulk_notice = page.locator(f"#{page.locator('.undo-notice', has_text='Approved 2 requests').get_attribute('id')}")
    bulk_notice.get_by_role("button", name="Undo: Approved 2 requests").click()
    expect(bulk_notice).to_contain_text("Undone: 2 requests are pending again.")
    time.sleep(WINDOW + 1)
    for asked in bulk:
        expect(page.locator(f"#request-{asked['pendingRequests'][0]['requestId']}")).to_be_visible()
        still_pending(api, asked)

    other.goto(f"/audit/?decision=undone&agent={agent}")
    lines = other.locator("main").get_by_text("undone before it applied; nothing ran")
    expect(lines).to_have_count(3)


def test_an_answer_not_undone_applies_when_its_window_closes(
    api: dict[str, Api], sign_in: Callable[[str], Page], axe_source: str
) -> None:
    agent = create_agent(api, tools=[{"name": "send_email", "approval": "always"}])
    page = sign_in("otto")
    page.set_viewport_size(PHONE)
    open_inbox(page)
    asked = run(api["otto"], agent, SEND, uuid4().hex)
    started = time.monotonic()

    card = page.locator(f"#request-{asked['pendingRequests'][0]['requestId']}")
    expect(card).to_be_visible()
    opened(card).get_by_role("button", name="Approve", exact=True).click()

    notice = page.locator(".undo-notice")
    expect(notice).to_contain_text("Approved send_email · Undo")
    assert violations(page, axe_source) == []
    assert overflow(page)[0] <= PHONE["width"]
    expect(notice).to_have_text("Approved send_email. Dismiss")
    continuation = continuation_of(api["otto"], asked)
    assert continuation["output"] == "send_email: sent to a@b.co"
    assert time.monotonic() - started >= WINDOW - 0.5
    status, runs = api["otto"]("GET", f"/api/runs/{continuation['runId']}")
    assert status == 200, runs


def test_the_trial_page_undoes_its_answer_and_shows_the_form_again(sign_in: Callable[[str], Page]) -> None:
    page, name = sign_in("ada"), f"mailer-{uuid4().hex[:6]}"
    create_trial_agent(page, name)
    page.goto(f"/trial/?agent={name}")
    send(page, TRIAL_SEND)
    page.locator(".request-widget").get_by_role("button", name="Approve", exact=True).click()

    notice = page.locator(".undo-notice")
    expect(notice).to_contain_text("Approved send_email · Undo")
    notice.get_by_role("button", name="Undo: Approved send_email").click()

    widget = page.locator(".request-widget")
    expect(widget.get_by_role("button", name="Approve", exact=True)).to_be_visible()  # the page, again
    time.sleep(WINDOW + 1)
    expect(page.locator(".turn").last).not_to_contain_text("send_email: sent to")
    widget.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".turn").last).to_contain_text("send_email: sent to ops@example.com", timeout=15000)
