"""Policies checked at save, in a real browser (issue 50, item 3): a second rule conflicting with the starter's is
refused beside its module, at the line the gutter marks, with the point and the reason; what was typed stays."""

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.test_policy_editor import new_agent_with_the_starter

pytestmark = pytest.mark.browser

CONFLICTING = """
pre_tool_call_verdict := {"decision": "deny", "reason": "no_mail", "message": "No mail today."} if {
	input.tool.name == "send_email"
}
"""


def test_a_conflicting_second_rule_is_refused_beside_its_module_at_its_line(logged_in: Page, axe_source: str) -> None:
    page = logged_in
    new_agent_with_the_starter(page)
    module = page.get_by_label("Rego module mail.rego")
    typed = module.input_value() + CONFLICTING
    module.fill(typed)
    second = typed.split("\n").index(CONFLICTING.split("\n")[1]) + 1

    page.get_by_role("button", name="Create agent").click()

    expect(page.get_by_text("Nothing was saved.")).to_be_visible()
    error = page.locator(".policy-module .field-error").first
    expect(error).to_contain_text(
        f"At pre_tool_call, for a sample input, line {second}: two rules give pre_tool_call_verdict"
    )
    expect(error).to_contain_text("(runtime_error:policy_invocation_failed)")
    expect(page.locator(".policy-module .gutter span.error")).to_have_text(str(second))
    expect(page.get_by_label("Rego module mail.rego")).to_have_value(typed)
    expect(page.get_by_label("Rego module mail.rego")).to_have_attribute("aria-invalid", "true")
    page.locator("#policies").screenshot(path="/tmp/airlock-policy-save-refused.png")
    serious = [v for v in violations(page, axe_source) if v["impact"] in ("serious", "critical")]
    assert serious == [], serious
