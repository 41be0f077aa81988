"""A real Airlock server (daphne on a free port, its own SQLite file in a temporary folder: a
tests/processes/cluster.py installation) and a headless Chromium page driving it through Playwright's sync API.

Browser tests talk to the server over HTTP only: they must not use pytest-django's `db` fixture, whose
test database the server process never sees.
"""

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Request, expect, sync_playwright

from tests.browser.axe import AxeUnavailable, fetch
from tests.processes.cluster import PASSWORD, manage, manage_all, new_cluster

# An assertion waits as long as an action (the contexts' default): on two cores shared by two test workers, a
# server, Chromium and a websocket's first sync can take longer than Playwright's 5 s.
expect.set_options(timeout=10_000)

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass(frozen=True)
class Server:
    url: str
    username: str
    password: str
    env: dict[str, str] = field(repr=False, default_factory=dict)

    def manage(self, *args: str) -> str:
        """Run a management command against the server's data folder; its stdout."""
        return manage(self.env, *args)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # The server uses its temporary SQLite file and in-memory channel layer, whatever the shell says.
    cluster = new_cluster(tmp_path_factory.mktemp("airlock-data"))
    cluster.manage("collectstatic", "--noinput")
    try:
        # `serve` as `make run` starts it: daphne plus the in-process queue worker.
        console = cluster.serve(WORKER_THREADS="4")
        yield Server(console.url, "ada", PASSWORD, cluster.env)
    finally:
        cluster.stop_all()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """A failed browser test shows the end of the server's log: what the server did is half the story."""
    report = yield
    server = getattr(item, "funcargs", {}).get("server")
    if report.failed and isinstance(server, Server):
        lines = (Path(server.env["AIRLOCK_DATA_DIR"]) / "daphne.log").read_text(errors="replace").splitlines()
        report.sections.append(("server log, last 60 lines", "\n".join(lines[-60:])))
    return report


@pytest.fixture
def browser() -> Iterator[Browser]:
    # One Playwright per test: its sync API cannot start while an asyncio loop runs in this thread, and
    # async tests elsewhere in the (randomly ordered) suite run loops between browser tests.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# Every page reports what the Content-Security-Policy blocked on it as a console error, which the context
# collects (Chromium's own "Refused to ..." messages are collected too).
REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  console.error(`CSP violation: ${event.effectiveDirective} blocked ${event.blockedURI || "inline code"}`
    + ` at ${event.sourceFile || event.documentURI}:${event.lineNumber} ${event.sample}`);
});
"""
_csp_violations: dict[BrowserContext, list[str]] = {}


def csp_violations(page: Page) -> list[str]:
    """What the Content-Security-Policy blocked in the pages of `page`'s context so far."""
    return _csp_violations[page.context]


def _new_context(browser: Browser, server: Server) -> BrowserContext:
    # Narrower than the dense inbox (1000 px and up: static/console/inbox.css), so a test sees every card's
    # buttons; tests/browser/test_dense_inbox.py sets its own widths.
    context = browser.new_context(base_url=server.url, viewport={"width": 960, "height": 900})
    context.set_default_timeout(10_000)
    violations = _csp_violations[context] = []
    context.add_init_script(REPORT_CSP_VIOLATIONS)

    def collect(message: ConsoleMessage) -> None:
        if message.type == "error" and any(word in message.text for word in ("CSP violation", "Security Policy")):
            violations.append(message.text)

    context.on("console", collect)
    return context


def _close(context: BrowserContext) -> None:
    """Close the context; every browser test fails when the policy blocked anything on its pages."""
    context.close()
    violations = _csp_violations.pop(context)
    assert violations == [], "the Content-Security-Policy blocked: " + "\n".join(violations)


def _log_in(page: Page, server: Server, username: str, password: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{server.url}/")


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[Page]:
    context = _new_context(browser, server)
    try:
        yield context.new_page()
    finally:
        _close(context)


@pytest.fixture
def logged_in(page: Page, server: Server) -> Page:
    _log_in(page, server, server.username, server.password)
    return page


@pytest.fixture
def sign_in(browser: Browser, server: Server) -> Iterator[Callable[[str], Page]]:
    """Log a user in (the server's password) in a browser context of its own: two users, two windows."""
    contexts: list[BrowserContext] = []

    def sign_in(username: str) -> Page:
        contexts.append(_new_context(browser, server))
        page = contexts[-1].new_page()
        _log_in(page, server, username, server.password)
        return page

    yield sign_in
    for context in contexts:
        _close(context)


@pytest.fixture(scope="session")
def axe_source() -> str:
    """axe-core's browser bundle (tests/browser/axe.py), for `tests.browser.axe.violations`."""
    try:
        return fetch().read_text()
    except AxeUnavailable as unavailable:
        if os.environ.get("CI"):
            pytest.fail(f"axe-core is needed under CI: {unavailable}")
        pytest.skip(f"axe-core could not be fetched (npm or its registry unreachable): {unavailable}")


PHONE = {"width": 390, "height": 844}


def overflow(page: Page) -> tuple[int, list[str]]:
    """The document's scroll width, and the elements sticking out of the viewport (to say what to fix)."""
    width = page.evaluate("document.documentElement.scrollWidth")
    culprits = page.evaluate(
        """() => [...document.querySelectorAll("body *")]
          .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 0.5)
          .filter((el) => !el.closest("[data-scrolls]") && getComputedStyle(el).position !== "absolute")
          .slice(0, 8).map((el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
            + (el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : ""))"""
    )
    return width, culprits


def load(page: Page, path: str) -> tuple[int | None, list[tuple[Request, int]]]:
    """Go to `path`: its status, and the page's requests (the websocket aside) with the bytes each took on the
    wire, headers included."""
    loaded: list[tuple[Request, int]] = []
    started: list[Request] = []

    def count(request: Request) -> None:
        sizes = request.sizes()
        loaded.append((request, sizes["responseBodySize"] + sizes["responseHeadersSize"]))

    def start(request: Request) -> None:
        started.append(request)

    page.on("request", start)
    page.on("requestfinished", count)
    try:
        response = page.goto(path)
        page.wait_for_load_state("networkidle")
        # The last requests' `requestfinished` may reach this process after the load state does (seen once on a
        # loaded machine: a page weighed without its scripts): wait for them a little.
        for _ in range(40):
            if len(loaded) >= len(started):
                break
            page.wait_for_timeout(50)
    finally:
        page.remove_listener("requestfinished", count)
        page.remove_listener("request", start)
    return response and response.status, loaded


@pytest.fixture(scope="session")
def acme_team(server: Server) -> dict[str, str]:
    """An operator "otto" and a reader "rita" next to the admin "ada" in tenant acme; each one's API token."""
    users = [
        ["create_user", name, "--tenant", "acme", "--role", role, "--password", server.password]
        for name, role in (("otto", "operator"), ("rita", "reader"))
    ]
    names = ("ada", "otto", "rita")
    tokens = manage_all(server.env, *users, *[["create_token", name, "--tenant", "acme"] for name in names])
    return {name: token.strip() for name, token in zip(names, tokens[len(users) :], strict=True)}
