"""Every console page walked once per role (admin, operator, reader) and width (1366 and 390 px), checking on
each what it must hold: no serious or critical violation of axe-core (from the npm registry:
tests/browser/axe.py), nothing wider than a phone's screen at 390 px (tests/browser/test_layout.py has the
menu and login checks), and for the admin a cold load under 150 KB (tests/browser/test_weight.py has the
cache checks). A full inbox page (25 cards) is weighed on its own."""

import json
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page

from tests.browser.axe import violations
from tests.browser.conftest import PHONE, Server, load, overflow
from tests.browser.console_pages import ConsolePage, prepare
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

LOGINS = {"admin": "ada", "operator": "otto", "reader": "rita"}
BUDGET = 150_000  # bytes a page may take cold: HTML, CSS, JS, images, as sent over the wire


@pytest.fixture(scope="module")
def pages(server: Server, acme_team: dict[str, str]) -> list[ConsolePage]:
    return prepare(Api(server.url, acme_team["ada"]), Api(server.url, acme_team["otto"]), prefix="walk")


@pytest.mark.parametrize("width", [1366, 390])
@pytest.mark.parametrize("role", LOGINS)
def test_every_page_is_accessible_fits_and_stays_light(
    role: str, width: int, pages: list[ConsolePage], sign_in: Callable[[str], Page], axe_source: str
) -> None:
    """One walk per role and width checks each page for what it must hold: no serious or critical axe-core
    violation; at 390 px nothing wider than the screen; for the admin at 1366 px, under 150 KB cold."""
    page = sign_in(LOGINS[role])
    page.set_viewport_size({"width": width, "height": 900})
    weigh = role == "admin" and width == 1366
    if weigh:
        cold(page)
    failures: dict[str, dict[str, object]] = {}
    for console_page in [*pages, ConsolePage("login", "/login/")] if weigh else pages:
        status, loaded = load(page, console_page.path)
        kinds, weight = {request.resource_type for request, _ in loaded}, sum(size for _, size in loaded)
        found: dict[str, object] = {}
        if status not in (200, 403, 404):
            found["status"] = status
        if axe := violations(page, axe_source):
            found["axe"] = axe
        if width == PHONE["width"] and (wide := overflow(page))[0] > width:
            found["wider than the screen"] = wide
        if weigh and (weight >= BUDGET or not {"document", "stylesheet", "script"} <= kinds):
            found["cold weight"] = (weight, sorted(kinds))
        if found:
            failures[console_page.path] = found
    if width == PHONE["width"]:  # the folded menu, opened
        page.get_by_role("button", name="Menu").click()
        if axe := violations(page, axe_source):
            failures["(menu open)"] = {"axe": axe}
    assert failures == {}, f"for the {role} at {width} px: {failures}"


def cold(page: Page) -> None:
    """Every load of `page` from now on fetches everything again, as a first visit would."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})


def test_a_full_inbox_page_stays_light(
    server: Server, acme_team: dict[str, str], sign_in: Callable[[str], Page]
) -> None:
    """A page of 25 cards, each with what an operator reads (the user's message, the tool's description, the
    arguments) and its answer, claim and cancel forms: ~130 KB of HTML, under the budget only gzipped."""
    admin, name = Api(server.url, acme_team["ada"]), f"full-{uuid4().hex[:6]}"
    instructions = "You tell customers their orders shipped, once someone approves each mail."
    tools = [{"name": "send_email", "approval": "every_time"}]
    admin.ok("POST", "/api/agents", {"name": name, "instructions": instructions, "tools": tools})
    runs = []
    for i in range(26):
        mail = {
            "to": f"customer{i}@example.com",
            "subject": f"Your order #{1000 + i} has shipped",
            "body": "Hello,\n\nyour order is on its way. Tracking: XYZ123456789.\n\nRegards, Sales",
        }
        message = f"Tell customer {i} their order shipped.\ncall send_email {json.dumps(mail)}"
        run = admin.ok("POST", f"/api/agents/{name}/runs", {"message": message, "sessionId": uuid4().hex})
        assert run["status"] == "awaiting_approval", run
        runs.append(run["runId"])
    page = sign_in("ada")
    cold(page)
    status, loaded = load(page, f"/inbox/?agent={name}")
    assert status == 200
    assert page.locator("article.request-card").count() == 25
    document = next(request for request, _ in loaded if request.resource_type == "document")
    assert document.response().header_value("content-encoding") == "gzip"
    assert sum(size for _, size in loaded) < BUDGET
    for run_id in runs:  # the shared server's other tests read the oldest waiting requests (the dashboard)
        admin.ok("POST", f"/api/runs/{run_id}/cancel")


def test_it_shows_the_trial_message_box_first_on_a_phone(
    pages: list[ConsolePage], sign_in: Callable[[str], Page]
) -> None:
    page = sign_in("otto")
    page.set_viewport_size(PHONE)
    page.goto(next(p.path for p in pages if p.name == "trial"))
    message, settings = page.get_by_label("Message", exact=True), page.locator("#trial-settings")
    assert message.bounding_box()["y"] < settings.bounding_box()["y"]  # type: ignore[index]
    assert message.bounding_box()["y"] < PHONE["height"] * 2  # type: ignore[index]


def test_it_finds_no_serious_violation_on_the_login_page(page: Page, axe_source: str) -> None:
    page.goto("/login/")
    assert violations(page, axe_source) == []


def test_it_would_notice_a_violation(logged_in: Page, axe_source: str) -> None:
    """The check is not vacuous: an unlabelled input and grey-on-grey text are reported."""
    page = logged_in
    page.goto("/")
    page.evaluate(
        """document.querySelector("main").insertAdjacentHTML("beforeend",
        '<input type="file" id="unlabelled"><p class="muted"><code>low contrast</code></p>')"""
    )
    rules = {v["rule"] for v in violations(page, axe_source)}
    assert "label" in rules
