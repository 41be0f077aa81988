"""The agent pages in a real browser: htmx rows, saving versions, comparing them."""

import re
from urllib.parse import parse_qs, urlsplit
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def add_row(page: Page, section: str, button: str) -> str:
    """Click a section's add button and return the CSS id prefix of the row htmx appended."""
    rows = page.locator(f"#{section}-rows > tr")
    before = rows.count()
    page.get_by_role("button", name=button).click()
    expect(rows).to_have_count(before + 1)
    return "#" + rows.nth(before).get_attribute("id")


def fill_parameter(page: Page, row: str, name: str, kind: str, default: str) -> None:
    page.locator(f"{row} input[name$='-name']").fill(name)
    page.locator(f"{row} select[name$='-kind']").select_option(kind)
    page.locator(f"{row} input[name$='-default']").fill(default)


def test_it_creates_edits_and_compares_an_agent(logged_in: Page) -> None:
    page, name = logged_in, f"bot-{uuid4().hex[:6]}"
    page.goto("/agents/")
    page.get_by_role("link", name="New agent").click()

    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Display name").fill("Browser Bot")
    page.get_by_label("Instructions", exact=True).fill("Help {{team}} with at most {{limit}} tickets.")
    fill_parameter(page, add_row(page, "parameters", "Add parameter"), "team", "text", "ops")
    second = add_row(page, "parameters", "Add parameter")
    fill_parameter(page, second, "limit", "number", "5")
    page.locator(f"{second} input[name$='-required']").check()
    page.screenshot(path="/tmp/airlock-new-agent.png", full_page=True)
    page.get_by_role("button", name="Create agent").click()

    expect(page.get_by_text("Created agent")).to_be_visible()
    expect(page.locator("table.compact code", has_text="limit")).to_be_visible()

    page.get_by_role("link", name="Edit").click()
    page.get_by_label("Instructions", exact=True).fill("Help {{team}} politely, at most {{limit}} tickets.")
    page.get_by_label("Note").fill("politer")
    page.screenshot(path="/tmp/airlock-edit-form.png", full_page=True)
    page.get_by_role("button", name="Save as version 2").click()
    expect(page.get_by_text("Saved version 2.")).to_be_visible()

    page.get_by_role("link", name="Versions").click()
    expect(page.get_by_role("link", name="Version 2")).to_be_visible()
    expect(page.get_by_role("cell", name="politer")).to_be_visible()
    page.get_by_role("button", name="Compare").click()

    page.wait_for_url(re.compile(rf"/agents/{name}/diff/\?"))
    assert parse_qs(urlsplit(page.url).query) == {"a": ["1"], "b": ["2"]}
    changed = page.locator("tr.changed")
    expect(changed).to_have_count(1)
    expect(changed.locator("th")).to_have_text("Instructions")
    expect(changed).to_contain_text("Help {{team}} with at most {{limit}} tickets.")
    expect(changed).to_contain_text("Help {{team}} politely, at most {{limit}} tickets.")
    page.screenshot(path="/tmp/airlock-diff.png", full_page=True)


def test_it_removes_rows_and_shows_errors_beside_fields(logged_in: Page) -> None:
    page = logged_in
    page.goto("/agents/new/")
    page.get_by_label("Name", exact=True).fill(f"bad-{uuid4().hex[:6]}")
    first = add_row(page, "parameters", "Add parameter")
    fill_parameter(page, first, "dropped", "text", "")
    second = add_row(page, "parameters", "Add parameter")
    fill_parameter(page, second, "limit", "number", "lots")
    page.locator(f"{first} button", has_text="Remove").click()
    expect(page.locator("#parameters-rows > tr")).to_have_count(1)
    tool = add_row(page, "client_tools", "Add client tool")
    page.locator(f"{tool} input[name$='-name']").fill("pick")
    page.locator(f"{tool} textarea[name$='-parameters']").fill('{"type": "object", "properties": 5}')

    page.get_by_role("button", name="Create agent").click()

    expect(page.get_by_role("alert")).to_contain_text("Nothing was saved.")
    expect(page.locator("#parameters-rows > tr")).to_have_count(1)
    expect(page.locator("#parameters-rows input[name$='-name']")).to_have_value("limit")
    expect(page.locator("#parameters-rows .field-error")).to_have_text("“lots” is not a number.")
    expect(page.locator("#client_tools-rows .field-error")).to_contain_text("Not a valid JSON Schema")
    page.screenshot(path="/tmp/airlock-errors.png", full_page=True)
