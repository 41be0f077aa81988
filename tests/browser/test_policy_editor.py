"""The policy editor in a real browser: the starter policy in fields, a broken Rego module refused at its line
(the line named under the module, the gutter's line marked), the fixed one saved; at phone width too."""

import re
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.conftest import PHONE, overflow

pytestmark = pytest.mark.browser

BROKEN = "default verdict := {"
FIXED = 'default verdict := {"decision": "allow"}'


def new_agent_with_the_starter(page: Page) -> str:
    """A new agent's form with a client tool `pick_file` and the starter policy, which names it."""
    name = f"guard-{uuid4().hex[:6]}"
    page.goto("/agents/new/")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_role("button", name="Add client tool").click()
    page.locator("#client_tools-rows input[name$='-name']").fill("pick_file")
    page.get_by_role("button", name="Use the starter policy").click()
    expect(page.get_by_text("The starter policy is in the fields")).to_be_visible()
    expect(page.locator("textarea[name$='-manifest']")).to_have_value(re.compile(r"\n    id: pick_file\n"))
    return name


def test_a_broken_rego_module_is_refused_at_its_line_and_the_fixed_one_saves(logged_in: Page) -> None:
    page = logged_in
    name = new_agent_with_the_starter(page)
    module = page.get_by_label("Rego module mail.rego")
    expect(module).to_be_visible()
    gutter = page.locator(".policy-module .gutter").first
    expect(gutter.locator("span").first).to_have_text("1")
    source = module.input_value()
    assert FIXED in source
    module.fill(source.replace(FIXED, BROKEN, 1))
    # The gutter follows what is typed: one number a line.
    expect(gutter.locator("span")).to_have_count(len(source.split("\n")))

    page.get_by_role("button", name="Create agent").click()

    expect(page.get_by_text("Nothing was saved.")).to_be_visible()
    error = page.locator(".policy-module .field-error").first
    expect(error).to_contain_text("Rego module mail.rego, line ")
    expect(page.locator("#id_hooks-field")).not_to_contain_text("declaration_error")
    line = error.inner_text().split("line ", 1)[1].split(":", 1)[0]
    marked = page.locator(".policy-module .gutter span.error")
    expect(marked).to_have_count(1)
    expect(marked).to_have_text(line)
    assert int(line) >= source.split("\n").index(FIXED) + 1
    expect(page.get_by_label("Rego module mail.rego")).to_have_attribute("aria-invalid", "true")
    page.locator("#policies").screenshot(path="/tmp/airlock-policy-editor-error.png")

    fixed = page.get_by_label("Rego module mail.rego")
    fixed.fill(fixed.input_value().replace(BROKEN, FIXED, 1))
    page.get_by_role("button", name="Create agent").click()

    expect(page.get_by_text(f"Created agent “{name}”")).to_be_visible()
    expect(page.get_by_text("mail-guard").first).to_be_visible()


def test_bindings_and_modules_are_added_and_removed(logged_in: Page) -> None:
    page = logged_in
    new_agent_with_the_starter(page)
    bindings = page.locator(".policy-binding")
    expect(bindings).to_have_count(1)

    page.get_by_role("button", name="Add binding").click()
    expect(bindings).to_have_count(2)
    added = bindings.nth(1)
    expect(added.locator(".gutter").first).to_be_visible()  # drawn on what htmx swapped in
    added.get_by_role("button", name="Add Rego module").click()
    expect(added.locator(".policy-module")).to_have_count(2)
    added.locator(".policy-module").nth(1).get_by_role("button", name="Remove module").click()
    expect(added.locator(".policy-module")).to_have_count(1)
    # A webhook binding shows its own fields, not a manifest.
    added.get_by_label("Kind").select_option("airlock.webhook")
    expect(added.get_by_label("Webhook connection")).to_be_visible()
    expect(added.locator("textarea[name$='-manifest']")).to_be_hidden()
    added.get_by_role("button", name="Remove binding").click()
    expect(bindings).to_have_count(1)


def test_the_editor_fits_a_phone_and_passes_axe(logged_in: Page, axe_source: str) -> None:
    page = logged_in
    page.set_viewport_size(PHONE)
    new_agent_with_the_starter(page)

    width, culprits = overflow(page)
    assert width <= PHONE["width"], culprits
    serious = [v for v in violations(page, axe_source) if v["impact"] in ("serious", "critical")]
    assert serious == [], serious
