"""The console at 390 px wide (a phone): the menu folds behind a button and opens, the login page fits. (Every
other page is checked for sideways scrolling by the walks of tests/browser/test_pages.py, which also check that
the trial page shows its message box before the settings.)"""

import json
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, overflow

pytestmark = pytest.mark.browser


def test_it_fits_the_login_page_into_390_px(page: Page) -> None:
    page.set_viewport_size(PHONE)
    page.goto("/login/")
    assert overflow(page)[0] <= PHONE["width"]


def test_it_folds_the_menu_behind_a_button_on_a_phone(sign_in: Callable[[str], Page]) -> None:
    page = sign_in("ada")
    menu, button = page.locator("#site-menu"), page.get_by_role("button", name="Menu")
    expect(button).to_be_hidden()
    expect(menu.get_by_role("link", name="Audit")).to_be_visible()

    page.set_viewport_size(PHONE)
    expect(button).to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "false")
    # The folded menu still shows how many requests wait.
    expect(button.locator(".badge")).to_have_text(page.locator("#pending-count").inner_text())
    expect(menu.get_by_role("link", name="Audit")).to_be_hidden()
    button.click()
    expect(button).to_have_attribute("aria-expanded", "true")
    menu.get_by_role("link", name="Audit").click()
    expect(page).to_have_url(f"{page.url.split('/audit')[0].rstrip('/')}/audit/")
    expect(page.locator("h1")).to_have_text("Audit")
    # Escape folds it again, focus back on the button.
    button.click()
    expect(menu.get_by_role("button", name="Log out")).to_be_visible()
    page.keyboard.press("Escape")
    expect(menu.get_by_role("button", name="Log out")).to_be_hidden()
    expect(button).to_be_focused()


def test_long_unbroken_words_do_not_widen_the_pages(logged_in: Page) -> None:
    """A 63-character agent name, a 1,990-character condition value, a message of one long word: each wraps in
    place, on a desktop and on a phone (they used to make the rules page 48,000 px wide and the inbox and the
    dashboard wider than the phone)."""
    page = logged_in
    name = "l" + uuid4().hex[:6] + "o" * 56
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
    headers = {"Content-Type": "application/json", "X-CSRFToken": csrf or ""}

    def post(path: str, body: dict[str, object]) -> dict[str, object]:
        response = page.request.post(path, data=json.dumps(body), headers=headers)
        assert response.ok, response.text()
        return response.json()

    post("/api/agents", {"name": name, "tools": [{"name": "send_email", "approval": "always"}]})
    value = "x" * 1990  # the longest a rule takes
    condition = {"argument": "to", "operator": "equals", "value": value}
    rule = post("/api/rules", {"agent": name, "toolName": "send_email", "conditions": [condition]})
    word = "w" * 400
    asked = post(
        f"/api/agents/{name}/runs",
        {
            # `to` is one address (send_email validates it); the long word rides in the subject and the body.
            "message": f"call send_email {json.dumps({'to': 'ada@x.co', 'subject': word, 'body': word})}\n{word}",
            "sessionId": uuid4().hex,
        },
    )
    assert asked["status"] == "awaiting_approval", asked
    try:
        for width, paths in [
            (1366, ["/rules/"]),
            (PHONE["width"], ["/rules/", "/inbox/", "/", f"/agents/{name}/", "/runs/", "/agents/", "/audit/"]),
        ]:
            page.set_viewport_size({"width": width, "height": 844})
            for path in paths:
                page.goto(path)
                scroll, culprits = overflow(page)
                assert scroll <= width, (path, width, scroll, culprits)
    finally:
        page.request.post(f"/api/runs/{asked['runId']}/cancel", headers=headers)
        page.request.delete(f"/api/rules/{rule['ruleId']}", headers=headers)


def test_the_agent_forms_row_tables_scroll_sideways_on_a_phone(sign_in: Callable[[str], Page]) -> None:
    """A section's rows wider than a phone (a parameter's default, description and Remove; a tool's approvers)
    scroll inside their table: they were cut off, out of reach."""
    page = sign_in("ada")
    page.set_viewport_size(PHONE)
    page.goto("/agents/new/")
    for section in ("Add culture", "Add server tool", "Add client tool", "Add parameter"):
        page.get_by_role("button", name=section).click()
    expect(page.locator("#parameters-rows tr")).to_have_count(1)
    tables = page.evaluate(
        """() => [...document.querySelectorAll("table.rows")].filter((t) => t.offsetParent !== null)
          .map((t) => [t.querySelector("tbody").id, t.scrollWidth > t.clientWidth, getComputedStyle(t).overflowX])"""
    )
    wide = {body: style for body, wider, style in tables if wider}
    assert "parameters-rows" in wide, tables
    assert set(wide.values()) <= {"auto", "scroll"}, wide
    remove = page.locator("#parameters-rows").get_by_role("button", name="Remove")
    remove.scroll_into_view_if_needed()
    box = remove.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"], box
