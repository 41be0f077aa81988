"""External agents in a real browser (SPEC section 12): the form's runtime shows the declared tools instead of
the model's sections, the agent's page, and a request opened through the API arriving live in the inbox,
labelled "external · <agent>", answered from the keyboard, its decision read back through the API."""

import json
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_inbox import api  # noqa: F401 - `api` is a fixture
from tests.browser.test_triage import open_filtered
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

DEPLOY_SCHEMA = {
    "type": "object",
    "properties": {"service": {"type": "string"}, "version": {"type": "string"}, "env": {"type": "string"}},
    "required": ["service", "version", "env"],
}


def add_tool(page: Page, name: str, description: str, approval: str, parameters: str = "") -> None:
    rows = page.locator("#external_tools-rows > tr")
    before = rows.count()
    page.get_by_role("button", name="Add tool").click()
    expect(rows).to_have_count(before + 1)
    row = rows.nth(before)
    row.get_by_label("Tool name").fill(name)
    row.get_by_label("Description").fill(description)
    if parameters:
        row.get_by_label("Parameters (JSON Schema)").fill(parameters)
    row.get_by_label("Approval").select_option(label=approval)


def test_it_creates_an_external_agent_and_answers_its_request_from_the_inbox(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    name = f"deployer-{uuid4().hex[:6]}"
    admin = sign_in("ada")
    admin.goto("/agents/new/")
    expect(admin.get_by_role("heading", name="Model")).to_be_visible()
    expect(admin.get_by_role("heading", name="Declared tools")).to_be_hidden()

    admin.get_by_role("radio", name="External").check()
    expect(admin.get_by_role("heading", name="Declared tools")).to_be_visible()
    for hidden in ("Model", "Server tools", "Client tools", "MCP servers", "Parameters"):
        expect(admin.get_by_role("heading", name=hidden, exact=True)).to_be_hidden()
    expect(admin.get_by_label("Instructions", exact=True)).to_be_hidden()
    # Back to hosted: what was typed there is still there, and the declared tools hide.
    admin.get_by_role("radio", name="Hosted").check()
    admin.get_by_label("Instructions", exact=True).fill("Typed while hosted.")
    expect(admin.get_by_role("heading", name="Declared tools")).to_be_hidden()
    admin.get_by_role("radio", name="External").check()
    admin.get_by_label("Name", exact=True).fill(name)
    add_tool(admin, "deploy", "Deploy a service.", "Ask unless a rule answers", json.dumps(DEPLOY_SCHEMA))
    add_tool(admin, "status", "Read a service's status.", "Never ask")
    admin.screenshot(path="/tmp/airlock-new-external-agent.png", full_page=True)
    admin.get_by_role("button", name="Create agent").click()

    admin.wait_for_url(f"**/agents/{name}/")
    expect(admin.get_by_role("heading", level=1)).to_contain_text("external")
    tools = admin.locator("#declared-tools")
    expect(tools).to_contain_text("deploy")
    expect(tools).to_contain_text("Ask unless a rule answers")
    expect(tools).to_contain_text("Never ask")
    expect(admin.locator("#curl-example")).to_contain_text(f"/api/agents/{name}/requests")
    expect(admin.get_by_role("link", name="Try it")).to_have_count(0)
    admin.screenshot(path="/tmp/airlock-external-agent.png", full_page=True)

    operator = sign_in("otto")
    open_filtered(operator, name)
    arguments = {"service": "billing", "version": "2.4.1", "env": "production"}
    status, opened = api["ada"]("POST", f"/api/agents/{name}/requests", {"toolName": "deploy", "arguments": arguments})
    assert status == 201 and opened["status"] == "pending", opened
    card = operator.locator(f"#request-{opened['requestId']}")
    expect(card).to_contain_text(f"external · {name}")
    expect(card).to_contain_text("Deploy a service.")
    expect(card).to_contain_text("billing")
    operator.screenshot(path="/tmp/airlock-external-card.png", full_page=True)

    operator.keyboard.press("Tab")
    operator.keyboard.press("Enter")
    expect(card).to_be_focused()
    operator.keyboard.press("a")
    expect(card).to_have_count(0)

    status, decided = api["ada"]("GET", f"/api/requests/{opened['requestId']}?wait=10")
    assert status == 200 and decided["status"] == "answered", decided
    assert decided["decision"]["approved"] is True and decided["decision"]["answeredBy"] == "otto"
