"""The dashboard in Chromium with something to show (a waiting request, a decision, the chart drawn), for an
admin and a reader, wide and at 390 px: nothing scrolls sideways, the chart scales down, axe-core finds no
serious or critical violation."""

import json
from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.conftest import Server
from tests.processes.cluster import Api, manage_all

pytestmark = pytest.mark.browser

SEND = "call send_email " + json.dumps({"to": "a@b.co", "subject": "s", "body": "b"})


@pytest.fixture
def activity(server: Server) -> tuple[str, str, str]:
    """A tenant of its own (the shared server's other tenants' requests stay off its dashboard) with an admin and
    a reader, an agent with one request answered (a decision to chart) and one still waiting: the waiting one's
    id and the two usernames."""
    tag = uuid4().hex[:6]
    tenant, admin, reader = f"dash-{tag}", f"dana-{tag}", f"rhea-{tag}"
    *_, token = manage_all(
        server.env,
        ["create_tenant", tenant],
        ["create_user", admin, "--tenant", tenant, "--role", "admin", "--password", server.password],
        ["create_user", reader, "--tenant", tenant, "--role", "reader", "--password", server.password],
        ["create_token", admin, "--tenant", tenant],
    )
    dana = Api(server.url, token.strip())
    name = f"dash-{tag}"
    status, body = dana("POST", "/api/agents", {"name": name, "tools": [{"name": "send_email", "approval": "always"}]})
    assert status == 201, body
    ids = []
    for _ in range(2):
        status, asked = dana("POST", f"/api/agents/{name}/runs", {"message": SEND, "sessionId": uuid4().hex})
        assert status == 200 and asked["status"] == "awaiting_approval", asked
        ids.append((asked["runId"], asked["pendingRequests"][0]["requestId"]))
    (run_id, answered), (_, waiting) = ids
    status, body = dana("POST", f"/api/runs/{run_id}/responses", {"requestId": answered, "approved": True})
    assert status in (200, 202), body
    return waiting, admin, reader


def test_it_shows_the_dashboard_on_a_wide_and_a_narrow_screen(
    activity: tuple[str, str, str],
    sign_in: Callable[[str], Page],
    axe_source: str,
) -> None:
    waiting, *usernames = activity
    for username in usernames:
        page = sign_in(username)
        for width in (1366, 390):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto("/")
            expect(page.locator(f'a[href="/inbox/#request-{waiting}"]')).to_be_visible()
            chart = page.get_by_role("img", name="Requests opened per day and time to decision, last 14 days")
            expect(chart).to_be_visible()
            box = chart.bounding_box()
            assert box is not None and box["width"] <= width
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.get_by_text("The numbers", exact=True).click()
            expect(page.locator(".chart-numbers table")).to_be_visible()
            assert violations(page, axe_source) == [], (username, width)
    # The reader (the last one signed in) is told who answers, and offered no trial run.
    expect(page.get_by_text("You can follow these; operators answer them.")).to_be_visible()
    expect(page.get_by_role("link", name="Try one in a trial run")).to_have_count(0)
