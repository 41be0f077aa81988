"""Previews in a real browser (SPEC section 13): the rules page's "New rule" form shows what the rule would have
done to the agent's last closed approvals before it is saved, and saves nothing."""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_inbox import api  # noqa: F401 - `api` is a fixture
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

DEPLOY = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]},
}


def test_the_rule_form_previews_the_rule_before_it_is_saved(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    name = f"deployer-{uuid4().hex[:6]}"
    status, body = api["ada"]("POST", "/api/agents", {"name": name, "runtime": "external", "tools": [DEPLOY]})
    assert status == 201, body
    for service, approved in (("billing", True), ("api", False), ("billing", True)):
        status, opened = api["ada"](
            "POST", f"/api/agents/{name}/requests", {"toolName": "deploy", "arguments": {"service": service}}
        )
        assert status == 201, opened
        status, answered = api["ada"]("POST", f"/api/requests/{opened['requestId']}/responses", {"approved": approved})
        assert answered["status"] == "accepted", answered

    page = sign_in("ada")
    page.goto("/rules/")
    page.get_by_role("link", name="New rule").click()
    page.get_by_label("Agent", exact=True).last.select_option(name)
    page.get_by_label("Tool", exact=True).last.fill("deploy")
    page.get_by_role("button", name="Preview").click()

    preview = page.locator("#rule-preview")
    expect(preview).to_contain_text("Would have approved 3 of the last 3; a person denied 1 of those.")
    expect(preview).to_contain_text("denied-interactively-by-user")
    page.screenshot(path="/tmp/airlock-rule-preview.png", full_page=True)
    status, rules = api["ada"]("GET", f"/api/rules?agent={name}")
    assert status == 200 and rules["items"] == []
