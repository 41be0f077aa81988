"""Receipts in a real browser (SPEC section 13): a reader filters the receipts, opens one whole, downloads the
JSONL export, and gets there from a run's page."""

from collections.abc import Callable
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_inbox import api  # noqa: F401 - `api` is a fixture
from tests.browser.test_previews import DEPLOY
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser


def test_a_reader_filters_opens_and_exports_receipts(
    api: dict[str, Api],  # noqa: F811
    sign_in: Callable[[str], Page],
) -> None:
    name = f"deployer-{uuid4().hex[:6]}"
    status, body = api["ada"]("POST", "/api/agents", {"name": name, "runtime": "external", "tools": [DEPLOY]})
    assert status == 201, body
    decided = {}
    for service, approved in (("billing", True), ("api", False)):
        status, opened = api["ada"](
            "POST", f"/api/agents/{name}/requests", {"toolName": "deploy", "arguments": {"service": service}}
        )
        assert status == 201, opened
        status, answered = api["otto"]("POST", f"/api/requests/{opened['requestId']}/responses", {"approved": approved})
        assert answered["status"] == "accepted", answered
        decided[service] = opened

    page = sign_in("rita")
    page.goto("/receipts/")
    page.get_by_label("Agent").select_option(name)
    page.get_by_label("Result").select_option("denied-interactively-by-user")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.receipts tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("otto")
    expect(rows.first).to_contain_text("token:")

    with page.expect_download() as downloading:
        page.get_by_role("link", name="JSONL").click()
    exported = downloading.value.path().read_text()
    assert '"receiptsOf"' in exported.splitlines()[0] and "denied-interactively-by-user" in exported

    rows.first.get_by_role("link").first.click()
    expect(page.get_by_role("heading", name="Receipt #")).to_be_visible()
    expect(page.locator("table.receipt-fields")).to_contain_text(decided["api"]["requestId"])
    page.screenshot(path="/tmp/airlock-receipt.png", full_page=True)

    page.goto(f"/runs/{decided['billing']['runId']}/")
    page.get_by_role("link", name="receipt", exact=True).click()
    expect(page.locator("table.receipt-fields")).to_contain_text(decided["billing"]["requestId"])
    expect(page.locator("table.receipt-fields")).to_contain_text("approved")
