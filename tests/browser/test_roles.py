"""Screens by role in Chromium, on a server running with DEBUG=1: a reader is offered no Trial run and gets the
console's own 403 page saying why; an unknown address is the console's 404, not Django's list of URL patterns;
an operator is told why the Rules page has no Revoke."""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser


def test_it_offers_a_reader_no_trial_run_and_says_why_the_page_is_refused(
    acme_team: dict[str, str], sign_in: Callable[[str], Page]
) -> None:
    reader, operator = sign_in("rita"), sign_in("otto")
    expect(operator.locator(".nav").get_by_role("link", name="Trial run")).to_be_visible()
    expect(reader.locator(".nav").get_by_role("link", name="Inbox")).to_be_visible()
    expect(reader.get_by_role("link", name="Trial run")).to_have_count(0)

    response = reader.goto("/trial/")
    assert response is not None and response.status == 403
    expect(reader).to_have_title("Not allowed · Airlock")
    expect(reader.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(reader.locator("#error-reason")).to_have_text("This needs the operator role in the current tenant.")
    expect(reader.get_by_text("You are signed in as rita, reader in Acme.")).to_be_visible()
    # The page is styled: the console's stylesheet applies, and the navigation is there.
    assert reader.locator(".error-page").evaluate("(el) => getComputedStyle(el).borderTopStyle") == "solid"
    reader.get_by_role("link", name="Back to the dashboard").click()
    expect(reader).to_have_title("Dashboard · Airlock")


def test_it_answers_an_unknown_address_with_the_console_s_404_under_debug(logged_in: Page) -> None:
    page = logged_in
    response = page.goto("/agents/nobody-here/")
    assert response is not None and response.status == 404
    expect(page.locator("#error-reason")).to_have_text("No agent named 'nobody-here' in this tenant.")
    response = page.goto("/no/such/page/")
    assert response is not None and response.status == 404
    expect(page.locator("#error-reason")).to_have_text("There is no page at /no/such/page/.")
    assert "URLconf" not in page.content()


def test_it_tells_an_operator_why_there_is_no_revoke(
    server: Server, acme_team: dict[str, str], sign_in: Callable[[str], Page]
) -> None:
    admin = Api(server.url, acme_team["ada"])
    name = f"roles-{uuid4().hex[:6]}"
    admin.ok("POST", "/api/agents", {"name": name, "tools": [{"name": "send_email", "approval": "always"}]})
    admin.ok("POST", "/api/rules", {"agent": name, "toolName": "send_email"})
    for username, revoke, note in (("ada", 1, 0), ("otto", 0, 1)):
        page = sign_in(username)
        page.goto(f"/rules/?agent={name}")
        row = page.locator("table.rules tbody tr", has_text=name)
        expect(row).to_have_count(1)
        expect(row.get_by_role("button", name="Revoke")).to_have_count(revoke)
        expect(page.locator("#rules-role-note")).to_have_count(note)
    expect(page.locator("#rules-role-note")).to_contain_text("Only admins revoke rules or make them here")
