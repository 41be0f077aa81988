"""The console's honest states in a real browser: with the server stopped the page says it is reconnecting and
its answer and claim buttons are off, until the server is back (on the same port, with the same data folder,
so the kept secret key keeps the session); an htmx click of a session that has ended says "You were signed
out" and offers to sign in, instead of swapping the login page into the inbox.

This module runs a server of its own (it is stopped and started again), as `server` for the fixtures of
tests/browser/conftest.py."""

from collections.abc import Iterator
from uuid import uuid4

import pytest
from playwright.sync_api import Page, Request, expect

from tests.browser.axe import violations
from tests.browser.conftest import PHONE, Server, overflow
from tests.browser.test_inbox import SEND, open_inbox, opened, run
from tests.processes.cluster import PASSWORD, Api, Cluster, free_port, new_cluster, wait_for

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = new_cluster(tmp_path_factory.mktemp("airlock-states"))
    cluster.manage("collectstatic", "--noinput")
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.fixture(scope="module")
def server(cluster: Cluster) -> Server:
    console = cluster.serve(port=free_port(), WORKER_THREADS="2")
    return Server(console.url, "ada", PASSWORD, cluster.env)


@pytest.fixture(scope="module")
def ada(server: Server) -> Api:
    return Api(server.url, server.manage("create_token", "ada", "--tenant", "acme").strip())


def waiting_request(ada: Api) -> str:
    """A new agent's send_email waiting for approval: its request id."""
    agent = f"mailer-{uuid4().hex[:6]}"
    ada.ok("POST", "/api/agents", {"name": agent, "tools": [{"name": "send_email", "approval": "always"}]})
    return str(run(ada, agent, SEND, uuid4().hex)["pendingRequests"][0]["requestId"])


def port_of(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def test_it_says_it_is_reconnecting_and_holds_the_answers_until_the_server_is_back(
    logged_in: Page, cluster: Cluster, server: Server, ada: Api, axe_source: str
) -> None:
    page = logged_in
    rid = waiting_request(ada)
    open_inbox(page)
    card = page.locator(f"#request-{rid}")
    approve, claim = card.get_by_role("button", name="Approve", exact=True), card.get_by_role("button", name="Claim")
    notice = page.locator(".connection-notice")
    expect(approve).to_be_enabled()
    expect(notice).to_be_hidden()

    [running] = [process for process in cluster.processes if process.popen.poll() is None]
    cluster.stop(running)

    expect(notice).to_have_text("Reconnecting… Answers wait until the console is back.")
    expect(notice).to_have_attribute("role", "status")
    expect(page.locator("body")).to_have_attribute("data-connection", "lost")
    expect(approve).to_be_disabled()
    expect(claim).to_be_disabled()
    assert violations(page, axe_source) == []
    # Neither a key of the inbox nor Enter in the card's form sends anything while the socket is down.
    sent: list[Request] = []
    page.on("request", lambda request: sent.append(request) if request.method == "POST" else None)
    card.focus()
    page.keyboard.press("a")
    card.locator("form[data-answer-form]").evaluate("(form) => form.requestSubmit()")
    page.wait_for_timeout(300)
    assert sent == []

    cluster.serve(port=port_of(server), WORKER_THREADS="2")  # where it was, its data folder and database

    # Back: the same session (the development secret key is kept in the data folder), the buttons on again.
    # The socket tries again after 1, 2, 4 … up to 30 s: the next try after the start may be that far off.
    expect(notice).to_be_hidden(timeout=45_000)
    expect(page.locator("body")).not_to_have_attribute("data-connection", "lost")
    expect(page.locator("#inbox-list")).to_have_attribute("data-synced", "true")
    expect(approve).to_be_enabled()
    approve.click()
    expect(card).to_have_count(0)
    wait_for(lambda: ada("GET", f"/api/requests/{rid}")[1]["status"] == "answered", "the answer to be carried on")


def test_a_signed_out_click_says_so_and_offers_to_sign_in(logged_in: Page, server: Server, ada: Api) -> None:
    page = logged_in
    page.set_viewport_size(PHONE)
    rid = waiting_request(ada)
    open_inbox(page)
    card = opened(page.locator(f"#request-{rid}"))
    # The session ends (signed out elsewhere, expired): the browser keeps the page and its CSRF cookie.
    page.context.clear_cookies(name="sessionid")

    card.get_by_role("button", name="Claim").click()

    notice = page.locator(".connection-notice")
    expect(notice).to_have_text("You were signed out · Sign in")
    expect(page.locator("body")).to_have_attribute("data-connection", "signed-out")
    expect(page.locator("#inbox-list input[type=password]")).to_have_count(0)  # no login page in the list
    expect(card).to_be_visible()
    expect(card.get_by_role("button", name="Approve", exact=True)).to_be_disabled()
    assert overflow(page)[0] <= PHONE["width"]
    status, body = ada("GET", f"/api/requests/{rid}")
    assert (status, body["claimedBy"]) == (200, None), body  # the click changed nothing

    notice.get_by_role("link", name="Sign in").click()
    page.get_by_label("Username").fill(server.username)
    page.get_by_label("Password").fill(server.password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{server.url}/inbox/")
    expect(page.locator(f"#request-{rid}")).to_be_visible()


def test_a_click_on_a_page_opened_before_the_last_sign_in_says_so(logged_in: Page, server: Server, ada: Api) -> None:
    """Signing out and in again in another tab renews the security token: the old tab's Deny and Claim were a 403
    that htmx does not show, so they did nothing without a word (found in Chromium)."""
    page = logged_in
    rid = waiting_request(ada)
    open_inbox(page)
    card = opened(page.locator(f"#request-{rid}"))
    card.locator("input[name=reason]").fill("not this one")
    other = page.context.new_page()
    other.goto(f"{server.url}/")
    other.locator("form[action='/logout/'] button").click()
    other.get_by_label("Username").fill(server.username)
    other.get_by_label("Password").fill(server.password)
    other.get_by_role("button", name="Log in").click()
    other.wait_for_url(f"{server.url}/")
    other.close()

    card.get_by_role("button", name="Deny").click()

    notice = page.locator(".connection-notice")
    expect(notice).to_have_text("This page was opened before you last signed in: nothing it sent was done · Reload")
    expect(page.locator("body")).to_have_attribute("data-connection", "stale")
    expect(card.get_by_role("button", name="Claim")).to_be_disabled()
    expect(card.locator("input[name=reason]")).to_have_value("not this one")
    # The socket speaking (a new request's count) does not clear it, as it clears "signed out": only a reload
    # renews the token.
    count = page.locator("#pending-count").inner_text()
    waiting_request(ada)
    expect(page.locator("#pending-count")).not_to_have_text(count)
    expect(page.locator("body")).to_have_attribute("data-connection", "stale")
    status, body = ada("GET", f"/api/requests/{rid}")
    assert (status, body["status"]) == (200, "pending"), body  # the click changed nothing

    notice.get_by_role("link", name="Reload").click()
    expect(page.locator("body")).not_to_have_attribute("data-connection", "stale")
    opened(page.locator(f"#request-{rid}")).get_by_role("button", name="Claim").click()
    wait_for(lambda: ada("GET", f"/api/requests/{rid}")[1]["claimedBy"], "the claim after the reload")


def test_the_dashboard_s_waiting_list_is_live_and_agrees_with_its_count(logged_in: Page, ada: Api) -> None:
    page = logged_in
    page.goto("/")
    waiting = page.locator("#dash-waiting")
    expect(waiting).to_be_visible()
    before = int(waiting.locator(".badge").inner_text())

    rid = waiting_request(ada)

    expect(waiting.locator(f'a[href="/inbox/#request-{rid}"]')).to_be_visible()
    expect(waiting.locator(".badge")).to_have_text(str(before + 1))
    ada.ok("POST", f"/api/requests/{rid}/responses", {"approved": True})
    expect(waiting.locator(f'a[href="/inbox/#request-{rid}"]')).to_have_count(0)
    expect(waiting.locator(".badge")).to_have_text(str(before))
    assert waiting.locator(".waiting-item").count() == min(before, 6)
