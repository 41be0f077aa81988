"""Day one in Chromium (issue 50, item 8): a newcomer's dashboard leads with its first steps, ticked from what the
tenant did, and the next step's button opens the trial page, whose examples show above the fold on a laptop
(1366x768) and on a phone (390x844); axe-core finds no serious violation on either page."""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Locator, Page, ViewportSize, expect

from tests.browser.axe import violations
from tests.browser.conftest import PHONE, Server, overflow
from tests.processes.cluster import Api, manage_all

pytestmark = pytest.mark.browser

LAPTOP: ViewportSize = {"width": 1366, "height": 768}

AGENT = {
    "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time", "approval": "never"}],
    "clientTools": [{"name": "get_user_location", "description": "Where the user is, asked of the browser."}],
}


@pytest.fixture
def newcomer(server: Server) -> str:
    """A tenant of its own (the shared server's others have done their steps) whose admin made an agent through
    the API with a token (that connects: step 4 done), and its operator, who did nothing yet."""
    tag = uuid4().hex[:6]
    tenant, admin, operator = f"new-{tag}", f"adam-{tag}", f"nina-{tag}"
    *_, token = manage_all(
        server.env,
        ["create_tenant", tenant],
        ["create_user", admin, "--tenant", tenant, "--role", "admin", "--password", server.password],
        ["create_user", operator, "--tenant", tenant, "--role", "operator", "--password", server.password],
        ["create_token", admin, "--tenant", tenant],
    )
    Api(server.url, token.strip()).ok("POST", "/api/agents", {"name": f"first-{tag}", **AGENT})
    return operator


def above_the_fold(page: Page, examples: Locator) -> None:
    """Every example button of the trial page lies whole within the viewport, without scrolling."""
    height = page.viewport_size["height"] if page.viewport_size else 0
    buttons = examples.get_by_role("button").all()
    assert len(buttons) == 5  # send_email; get_user_location; get_time, echo instructions, help
    for button in buttons:
        box = button.bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height, (box, height)


def test_the_dashboard_leads_to_the_trial_page_with_its_examples_above_the_fold(
    newcomer: str, sign_in: Callable[[str], Page], axe_source: str
) -> None:
    page = sign_in(newcomer)
    page.set_viewport_size(LAPTOP)
    steps = page.get_by_role("region", name="First steps")
    expect(steps).to_contain_text("1 of 4 done")
    expect(steps.locator("li.first-step.done")).to_have_count(1)
    expect(steps.locator("li.first-step.done")).to_contain_text("Connect an external agent")
    next_step = steps.locator("li.first-step.next")
    expect(next_step).to_contain_text("Try an agent")
    assert violations(page, axe_source) == []
    page.set_viewport_size(PHONE)
    assert overflow(page)[0] <= PHONE["width"], overflow(page)

    next_step.get_by_role("link", name="Try one in a trial run").click()
    page.wait_for_url("**/trial/")
    examples = page.get_by_role("region", name="Examples")
    expect(examples.get_by_role("heading", name="Client tool")).to_be_visible()
    above_the_fold(page, examples)
    page.set_viewport_size(LAPTOP)
    above_the_fold(page, examples)
    assert violations(page, axe_source) == []
