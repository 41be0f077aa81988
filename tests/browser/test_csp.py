"""The console under its Content-Security-Policy in Chromium: every page loads with nothing blocked, the
behaviours that moved out of inline handlers still work, and the websocket connects. (The conftest fails
any browser test on whose pages the policy blocked something; the last test shows it notices.)"""

import json
import re
from typing import Any
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import csp_violations

pytestmark = pytest.mark.browser

SEND = 'call send_email {"to": "ops@example.com", "subject": "Hi", "body": "Hello"}'


def api(page: Page, method: str, path: str, body: Any = None) -> Any:
    """The JSON API with the browser's own session (and its CSRF token)."""
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content") or ""
    response = page.request.fetch(
        path,
        method=method,
        data=json.dumps(body) if body is not None else None,
        headers={"Content-Type": "application/json", "X-CSRFToken": csrf},
    )
    assert response.ok, response.text()
    return response.json()


def waiting_agent(page: Page) -> tuple[str, str]:
    """A new agent with a run waiting for an approval: (agent name, run id)."""
    name = f"csp-{uuid4().hex[:6]}"
    api(page, "POST", "/api/agents", {"name": name, "tools": [{"name": "send_email", "approval": "always"}]})
    asked = api(page, "POST", f"/api/agents/{name}/runs", {"message": SEND, "sessionId": uuid4().hex})
    assert asked["status"] == "awaiting_approval", asked
    return name, asked["runId"]


def test_it_serves_every_console_page_with_nothing_blocked(logged_in: Page) -> None:
    page = logged_in
    name, run_id = waiting_agent(page)
    pages = [
        "/",
        "/agents/",
        "/agents/new/",
        f"/agents/{name}/",
        f"/agents/{name}/edit/",
        f"/agents/{name}/versions/",
        f"/agents/{name}/versions/1/",
        f"/agents/{name}/diff/?a=1&b=1",
        f"/trial/?agent={name}",
        "/inbox/",
        "/rules/",
        "/runs/",
        f"/runs/{run_id}/",
        "/audit/",
        "/tokens/",
        "/api/docs",
    ]
    for path in pages:
        response = page.goto(path)
        assert response is not None and response.ok, path
        policy = response.headers["content-security-policy"]
        assert "unsafe" not in policy and "script-src 'self'" in policy, (path, policy)
        page.wait_for_load_state("networkidle")
        assert csp_violations(page) == [], path
    # The API's documentation (Swagger UI, from the console's static files) renders under the policy too.
    expect(page.locator(".swagger-ui .info .title")).to_be_visible()
    page.goto(f"/inbox/?agent={name}")  # earlier tests may leave more than a page of requests in the tenant
    # htmx runs without eval and adds no <style> of its own.
    assert page.evaluate("[htmx.config.allowEval, htmx.config.includeIndicatorStyles]") == [False, False]
    # The websocket connects under connect-src 'self': the inbox re-syncs once it is open.
    expect(page.locator("#inbox-list")).to_have_attribute("data-synced", "true")
    expect(page.locator(f'.request-card[data-agent="{name}"]')).to_have_count(1)


def test_it_keeps_the_behaviours_that_left_the_markup_working(logged_in: Page) -> None:
    page = logged_in
    name, _ = waiting_agent(page)

    # "New rule" opens its form; a condition row comes in through htmx and its Remove button takes it out.
    page.goto("/rules/")
    page.get_by_role("link", name="New rule").click()
    new_rule = page.locator("#new-rule")  # each rule's row has an Edit form of its own
    expect(new_rule).to_have_attribute("open", "")
    new_rule.get_by_label("Conditions", exact=True).check()
    rows = page.locator("#condition-rows tr")
    before = rows.count()
    page.get_by_role("button", name="Add condition").click()
    expect(rows).to_have_count(before + 1)
    rows.last.get_by_role("button", name="Remove").click()
    expect(rows).to_have_count(before)
    new_rule.get_by_label("Any arguments").check()
    page.locator("#id_agent").select_option(name)
    page.locator("#id_tool_name").fill("send_email")
    page.get_by_role("button", name="Create rule").click()
    row = page.locator("table.rules tr", has_text=name)
    expect(row).to_have_count(1)

    # Revoking asks first: dismissed, the rule stays; accepted, it goes.
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator("table.rules tr", has_text=name)).to_have_count(1)
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator("table.rules tr", has_text=name)).to_have_count(0)

    # A picker filters as soon as it changes.
    page.goto("/runs/")
    page.get_by_label("Agent", exact=True).select_option(name)
    expect(page).to_have_url(re.compile(rf"agent={name}"))

    # Another agent on the trial page starts at its current version.
    page.goto("/trial/")
    page.locator("#agent-select").select_option(name)
    expect(page).to_have_url(re.compile(rf"/trial/\?agent={name}$"))

    # Deleting an agent asks first.
    page.goto(f"/agents/{name}/")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Delete").click()
    expect(page).to_have_url(re.compile(rf"/agents/{name}/$"))
    expect(page.locator(".subtitle code")).to_have_text(name)


def test_it_notices_what_the_policy_blocks(logged_in: Page) -> None:
    """Inline code that slipped into a page is blocked, and reported (so the fixtures can fail the test)."""
    page = logged_in
    page.goto("/")
    page.evaluate(
        """document.body.insertAdjacentHTML("beforeend",
        '<p style="color: red">styled</p><img src="/static/console/favicon.svg" onload="window.ran = true">')"""
    )
    blocked = csp_violations(page)
    for _ in range(100):  # (wait_for_function would need eval, which the policy blocks)
        if any("script-src-attr" in text for text in blocked):
            break
        page.wait_for_timeout(50)
    assert page.evaluate("window.ran") is None
    blocked = list(blocked)
    assert any("style-src-attr" in text for text in blocked), blocked
    assert any("script-src-attr" in text for text in blocked), blocked
    csp_violations(page).clear()
