"""An MCP gateway made in the agent form in a real browser, at desktop width (SPEC section 15): the Gateway runtime
shows its servers instead of the other runtimes' sections, a tool is set apart under its server, the saved gateway is
what the API shows; then an MCP client's call of it waits in the inbox on a card naming the server and the tool
apart, and the approval from that card lets the call through to the server."""

import asyncio
import threading
from typing import Any
from uuid import uuid4

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Locator, Page, ViewportSize, expect

from tests.browser.conftest import Server
from tests.browser.test_inbox import api, opened  # noqa: F401 - `api` is a fixture
from tests.browser.test_triage import open_filtered
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser

DESKTOP: ViewportSize = {"width": 1280, "height": 900}


def set_tool_apart(server_row: Locator, name: str, approval: str) -> Locator:
    """Add a tool row under `server_row` for the tool `name` with its own approval; the row."""
    tools = server_row.locator("table.gateway-tools > tbody > tr")
    before = tools.count()
    server_row.get_by_role("button", name="Set a tool apart").click()
    expect(tools).to_have_count(before + 1)
    row = tools.nth(before)
    row.get_by_label("MCP tool").fill(name)
    row.get_by_label("Tool approval").select_option(label=approval)
    return row


def call_in_background(url: str, token: str, tool: str) -> tuple[threading.Thread, list[Any]]:
    """The `mcp` SDK's client calling `tool` of the gateway at `url` on a thread of its own (the call waits for the
    inbox); what it got lands in the list."""
    got: list[Any] = []

    async def call() -> Any:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
        ):
            return await client.call_tool(tool, {})

    def run() -> None:
        got.append(asyncio.run(call()))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def test_it_makes_a_gateway_in_the_form_and_approves_its_call_in_the_inbox(
    sign_in: Any,
    server: Server,
    api: dict[str, Api],  # noqa: F811
) -> None:
    name = f"gateway-{uuid4().hex[:6]}"
    admin: Page = sign_in("ada")
    admin.set_viewport_size(DESKTOP)
    admin.goto("/agents/new/")
    expect(admin.get_by_role("heading", name="MCP servers behind the gateway")).to_be_hidden()

    admin.get_by_role("radio", name="Gateway").check()
    expect(admin.get_by_role("heading", name="MCP servers behind the gateway")).to_be_visible()
    for hidden in ("Model", "Server tools", "MCP servers", "Parameters", "Declared tools"):
        expect(admin.get_by_role("heading", name=hidden, exact=True)).to_be_hidden()
    admin.get_by_label("Name", exact=True).fill(name)
    servers = admin.locator("#gateway_servers-rows > tr")
    admin.get_by_role("button", name="Add server", exact=True).click()
    expect(servers).to_have_count(1)
    meetings = servers.first
    meetings.get_by_label("MCP server").select_option("meetings")
    expect(meetings.get_by_label("Approval", exact=True)).to_have_value("always")
    # book_meeting asks every time and ends unanswered after 10 minutes; ping is left to its server (it asks).
    booking = set_tool_apart(meetings, "book_meeting", "Ask every time")
    booking.get_by_label("Tool escalation").fill("10m deny")
    admin.screenshot(path="/tmp/airlock-new-gateway.png", full_page=True)
    admin.get_by_role("button", name="Create agent").click()

    admin.wait_for_url(f"**/agents/{name}/")
    expect(admin.get_by_role("heading", level=1)).to_contain_text("gateway")
    servers_shown = admin.locator("#gateway-servers")
    expect(servers_shown).to_contain_text("Server meetings")
    expect(servers_shown.get_by_role("row", name="book_meeting")).to_contain_text("Ask every time")
    expect(servers_shown.get_by_role("row", name="book_meeting")).to_contain_text("escalates after 10m deny")
    # The endpoint is the installation's CONSOLE_URL's (the test server leaves it at its default).
    endpoint = admin.locator("#mcp-endpoint").inner_text()
    assert endpoint.endswith(f"/mcp/{name}"), endpoint
    expect(admin.locator("#claude-mcp-add")).to_have_text(
        f'claude mcp add --transport http {name} {endpoint} --header "Authorization: Bearer $AIRLOCK_TOKEN"'
    )
    expect(admin.get_by_role("link", name="Try it")).to_have_count(0)
    admin.screenshot(path="/tmp/airlock-gateway.png", full_page=True)
    status, wire = api["ada"]("GET", f"/api/agents/{name}")
    assert status == 200 and wire["runtime"] == "gateway", wire
    assert wire["mcpServers"] == [
        {
            "connection": "meetings",
            "approval": "always",
            "toolPrefix": None,
            "tools": {"book_meeting": {"approval": "every_time", "escalation": [{"after": "10m", "then": "deny"}]}},
        }
    ]

    # An MCP client calls ping: the call waits on a card naming the server and the tool apart.
    operator = sign_in("otto")
    operator.set_viewport_size(DESKTOP)
    open_filtered(operator, name)
    thread, got = call_in_background(f"{server.url}/mcp/{name}", api["ada"].token, "ping")
    card = operator.locator(f'.request-card[data-agent="{name}"]')
    expect(card).to_have_count(1, timeout=30_000)
    opened(card)
    expect(card).to_contain_text(f"gateway · {name} wants to call ping")
    expect(card.locator("[data-gateway]")).to_have_text("MCP server meetings · tool ping")
    expect(card.locator(".tool-description")).to_contain_text("Check that the demo server answers.")
    operator.screenshot(path="/tmp/airlock-gateway-card.png", full_page=True)
    card.get_by_role("button", name="Approve", exact=True).click()

    thread.join(60)
    assert not thread.is_alive() and got, "the gateway's call did not return"
    assert not got[0].is_error and got[0].content[0].text == "pong", got[0]

    # Opened again, the form holds the gateway as saved: saving it unchanged saves nothing.
    admin.goto(f"/agents/{name}/edit/")
    expect(admin.get_by_role("radio", name="Gateway")).to_be_checked()
    kept = admin.locator("#gateway_servers-rows > tr").first.locator("table.gateway-tools > tbody > tr")
    expect(kept).to_have_count(1)
    expect(kept.get_by_label("MCP tool")).to_have_value("book_meeting")
    expect(kept.get_by_label("Tool escalation")).to_have_value("10m deny")
    admin.get_by_role("button", name="Save as version 2").click()
    expect(admin.get_by_text("Nothing changed, so no new version was saved.")).to_be_visible()
