"""The MCP gateway (SPEC section 15) end to end: the `mcp` SDK's own client calls tools through a served console's
`/mcp/{agent}` over real HTTP, the gateway fronts real MCP servers (the built-in `meetings` and
`@modelcontextprotocol/server-everything` over stdio, tests/gateway/http_upstream.py over Streamable HTTP), and
people answer through the JSON API as the inbox would."""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from tests.gateway.conftest import Installation, mcp_client
from tests.gateway.http_upstream import SECRET

# One worker takes the whole module (`--dist loadgroup`): its served console and upstreams start once, not per worker.
pytestmark = [pytest.mark.processes, pytest.mark.xdist_group("gateway-mcp-client")]

BOOKING = {"city": "Oslo", "nights": 2}
# A single HTTP exchange, as a client would send it before it has a session.
ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "tests", "version": "1"}},
}


def text(result: CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


async def answer(installation: Installation, request: dict[str, Any], **response: Any) -> None:
    """otto answers `request` through the API, as its inbox card would."""
    outcome = await installation.api(
        installation.otto, "POST", f"/api/requests/{request['requestId']}/responses", response
    )
    assert outcome["status"] == "accepted", outcome


async def events(installation: Installation, run_id: str) -> list[dict[str, Any]]:
    return (await installation.api(installation.otto, "GET", f"/api/runs/{run_id}/events"))["items"]  # type: ignore[no-any-return]


async def test_it_passes_a_call_in_approval_never_through_at_once(installation):
    url = installation.gateway("direct", {"connection": "meetings", "approval": "never"})

    async with mcp_client(url, installation.ada.token) as client:
        started = time.monotonic()
        result = await asyncio.wait_for(client.call_tool("ping", {}), 20)

    assert (result.is_error, text(result)) == (False, "pong")
    assert time.monotonic() - started < 10
    assert not any(request["status"] == "pending" for request in await installation.requests("direct"))
    [recorded] = await installation.completed_calls("direct")
    assert recorded["success"] is True and "pong" in recorded["result"]["content"]


async def test_it_holds_a_call_until_someone_approves_and_tells_the_client_it_waits(installation):
    url = installation.gateway("approving", {"connection": "web"})
    notified: list[tuple[float, str | None]] = []
    told = asyncio.Event()

    async def waiting(progress: float, total: float | None, message: str | None) -> None:
        notified.append((progress, message))
        told.set()

    async with mcp_client(url, installation.ada.token) as client:
        call = asyncio.create_task(client.call_tool("book_room", BOOKING, progress_callback=waiting))
        request = await installation.pending("approving")
        assert (request["toolName"], request["arguments"], request["agent"]) == ("book_room", BOOKING, "approving")
        # The gateway tells a client that gave a progress token every 10 s that its call still waits.
        await asyncio.wait_for(told.wait(), 15)
        assert not call.done()
        await answer(installation, request, approved=True)
        result = await asyncio.wait_for(call, 20)

    assert (result.is_error, text(result)) == (False, "Booked Oslo for 2 nights")
    [(done, message)] = notified[:1]
    assert done == 10 and message is not None and f"#request-{request['requestId']}" in message, notified
    stored = await events(installation, request["runId"])
    [asked] = [e["data"] for e in stored if e["type"] == "permission.requested"]
    permission = asked["permissionRequest"]
    assert (permission["kind"], permission["serverName"], permission["toolName"]) == ("mcp", "web", "book_room")
    [completed] = [e["data"] for e in stored if e["type"] == "tool.execution_complete"]
    assert completed["success"] is True and "Booked Oslo for 2 nights" in completed["result"]["content"]


async def test_it_answers_a_denial_with_an_error_result_naming_who_denied_and_why(installation):
    url = installation.gateway("denying", {"connection": "web"})

    async with mcp_client(url, installation.ada.token) as client:
        call = asyncio.create_task(client.call_tool("book_room", BOOKING))
        request = await installation.pending("denying")
        await answer(installation, request, approved=False, reason="Oslo is over budget this quarter")
        result = await asyncio.wait_for(call, 20)

    assert result.is_error is True
    assert "otto" in text(result) and "Oslo is over budget this quarter" in text(result), text(result)
    assert "Booked" not in text(result)


async def test_it_calls_upstream_with_the_arguments_the_approver_edited(installation):
    url = installation.gateway("editing", {"connection": "web"})

    async with mcp_client(url, installation.ada.token) as client:
        call = asyncio.create_task(client.call_tool("book_room", BOOKING))
        request = await installation.pending("editing")
        await answer(installation, request, approved=True, overrideArguments={"city": "Bergen", "nights": 3})
        result = await asyncio.wait_for(call, 20)

    assert (result.is_error, text(result)) == (False, "Booked Bergen for 3 nights")


async def test_it_answers_an_expired_request_with_an_error_result_saying_so(installation):
    url = installation.gateway("hurried", {"connection": "web"}, requestDeadlineSeconds=1)

    async with mcp_client(url, installation.ada.token) as client:
        result = await asyncio.wait_for(client.call_tool("book_room", BOOKING), 20)

    assert result.is_error is True and "expired" in text(result), text(result)
    [request] = await installation.requests("hurried")
    assert request["status"] == "expired"


async def test_it_closes_the_request_cancelled_when_the_client_cancels_its_call(installation):
    url = installation.gateway("cancelling", {"connection": "web"})

    async with mcp_client(url, installation.ada.token, mode="legacy") as client:
        # Cancelling the task that awaits the call is how the SDK's client sends `notifications/cancelled`.
        call = asyncio.create_task(client.call_tool("book_room", BOOKING))
        request = await installation.pending("cancelling")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        path = f"/api/requests/{request['requestId']}"
        deadline = time.monotonic() + 10
        while (closed := await installation.api(installation.otto, "GET", path))["status"] == "pending":
            assert time.monotonic() < deadline, "the request stayed pending after the client cancelled its call"
            await asyncio.sleep(0.1)
        # The session goes on: the next call is asked about as usual.
        assert [t.name for t in (await client.list_tools()).tools] == ["book_room", "read_account", "explode"]

    assert closed["status"] == "cancelled", closed


async def test_it_lets_an_identical_call_through_at_once_after_an_answer_remembered_always(installation):
    url = installation.gateway("remembering", {"connection": "web"})

    async with mcp_client(url, installation.ada.token) as client:
        first = asyncio.create_task(client.call_tool("book_room", BOOKING))
        request = await installation.pending("remembering")
        await answer(installation, request, approved=True, remember="always")
        assert text(await asyncio.wait_for(first, 20)) == "Booked Oslo for 2 nights"

        # Nobody answers this one: only the remembered rule can let it through.
        again = await asyncio.wait_for(client.call_tool("book_room", BOOKING), 10)

    assert (again.is_error, text(again)) == (False, "Booked Oslo for 2 nights")
    first, second = sorted(await installation.requests("remembering"), key=lambda r: r["openedAt"])
    assert first["requestId"] == request["requestId"]
    assert (second["decision"]["via"], second["answer"]["ruleId"]) == ("rule", first["answer"]["rememberedRuleId"])


GUARD_MANIFEST = """\
agent_control_specification_version: "0.4.0-alpha.1"
metadata:
  name: "gateway-guard"
extends: []
policies:
  guard:
    type: rego
    query: data.airlock.guard.verdict
tools:
  book_room:
    type: Tool
    id: book_room
  read_account:
    type: Tool
    id: read_account
intervention_points:
  pre_tool_call:
    policy_target: "$.tool_call.args"
    policy_target_kind: tool_args
    tool_name_from: "$.tool_call.name"
    policy:
      id: guard
      query: data.airlock.guard.verdict
  post_tool_call:
    policy_target: "$.tool_result.value"
    policy_target_kind: tool_result
    tool_name_from: "$.tool_call.name"
    policy:
      id: guard
      query: data.airlock.guard.verdict
"""
# Denies bookings in Mordor before they are asked about; redacts API keys out of every text a tool answers.
GUARD_REGO = """package airlock.guard

import rego.v1

default verdict := {"decision": "allow"}

verdict := {
	"decision": "deny",
	"reason": "closed_city",
	"message": "Mordor is closed to bookings: pick another city.",
} if {
	input.intervention_point == "pre_tool_call"
	input.tool.name == "book_room"
	object.get(input.policy_target.value, "city", "") == "Mordor"
} else := {
	"decision": "transform",
	"reason": "key_redacted",
	"message": "An API key was redacted from the result.",
	"transform": {"path": "$target.content", "value": redacted},
} if {
	input.intervention_point == "post_tool_call"
	is_object(input.policy_target.value)
	is_array(input.policy_target.value.content)
}

redacted := [object.union(block, {"text": regex.replace(object.get(block, "text", ""), key, "[redacted]")}) |
	some block in input.policy_target.value.content
]

key := `sk-live-[0-9a-f]+`
"""
GUARD_HOOKS = {
    "declaration": "agent-hooks-declaration/1.0",
    "bindings": [
        {
            "id": "guard",
            "kind": "airlock.acs",
            "config": {"manifest": GUARD_MANIFEST, "modules": {"guard": {"guard.rego": GUARD_REGO}}},
        }
    ],
}


@pytest.fixture(scope="module")
def guarded(installation: Installation) -> str:
    """A gateway over `web` under GUARD_HOOKS (which list `book_room` and `read_account`, not `explode`); reading
    an account is asked about never."""
    server = {"connection": "web", "tools": {"read_account": {"approval": "never"}}}
    return installation.gateway("guarded", server, hooks=GUARD_HOOKS)


async def test_it_denies_a_call_its_policy_denies_at_pre_tool_call_without_asking_anyone(installation, guarded):
    async with mcp_client(guarded, installation.ada.token) as client:
        result = await asyncio.wait_for(client.call_tool("book_room", {"city": "Mordor", "nights": 1}), 20)

    assert result.is_error is True
    assert "guard" in text(result) and "Mordor is closed to bookings" in text(result), text(result)
    assert not any(r["status"] == "pending" for r in await installation.requests("guarded"))


async def test_it_redacts_a_result_its_policy_transforms_at_post_tool_call(installation, guarded):
    async with mcp_client(guarded, installation.ada.token) as client:
        result = await asyncio.wait_for(client.call_tool("read_account", {"account": "acme-7"}), 20)

    assert result.is_error is False
    assert text(result) == "Account acme-7: owner Ada, api key [redacted], plan team"
    assert SECRET not in result.model_dump_json()


async def test_it_leaves_out_of_tools_list_the_tools_its_policies_always_deny(installation, guarded):
    async with mcp_client(guarded, installation.ada.token) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        with pytest.raises(MCPError, match="Unknown tool: explode"):
            await client.call_tool("explode", {})

    assert listed == ["book_room", "read_account"]


async def test_it_answers_another_tenants_token_and_another_tokens_session_with_404(installation):
    url = installation.gateway("private", {"connection": "web"})
    ada, otto, gil = (
        {**ACCEPT, "Authorization": f"Bearer {who.token}"}
        for who in (installation.ada, installation.otto, installation.gil)
    )
    async with httpx2.AsyncClient(timeout=30) as http:
        outsider = await http.post(url, json=INITIALIZE, headers=gil)
        anonymous = await http.post(url, json=INITIALIZE, headers=ACCEPT)
        opened = await http.post(url, json=INITIALIZE, headers=ada)
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(url, json=initialized, headers={**ada, **session})).status_code == 202
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        own = await http.post(url, json=listing, headers={**ada, **session})
        borrowed = await http.post(url, json=listing, headers={**otto, **session})

    assert (outsider.status_code, outsider.headers["content-type"]) == (404, "application/problem+json")
    assert outsider.json()["status"] == 404 and "private" in outsider.json()["detail"]
    assert anonymous.status_code == 401
    assert (opened.status_code, own.status_code) == (200, 200)
    assert "book_room" in own.text
    assert borrowed.status_code == 404 and "book_room" not in borrowed.text


async def test_it_answers_an_unknown_tool_with_the_protocols_error(installation):
    url = installation.gateway("unknowing", {"connection": "web"})

    async with mcp_client(url, installation.ada.token) as client:
        with pytest.raises(MCPError, match="Unknown tool: book_flight") as raised:
            await client.call_tool("book_flight", {})

    assert raised.value.error.code == -32602
    assert await installation.requests("unknowing") == []


async def test_it_refuses_arguments_that_fail_the_tools_schema_naming_the_field_and_opening_nothing(installation):
    url = installation.gateway("schematic", {"connection": "web"})

    async with mcp_client(url, installation.ada.token) as client:
        missing = await client.call_tool("book_room", {"city": "Oslo"})
        mistyped = await client.call_tool("book_room", {"city": "Oslo", "nights": "two"})

    assert missing.is_error is True and "nights: is required" in text(missing), text(missing)
    assert mistyped.is_error is True and "nights" in text(mistyped), text(mistyped)
    assert await installation.requests("schematic") == []


async def test_it_refuses_arguments_that_fail_the_schema_of_a_tool_asked_about_never_and_runs_nothing(installation):
    url = installation.gateway("unchecked", {"connection": "web", "approval": "never"})

    async with mcp_client(url, installation.ada.token) as client:
        missing = await client.call_tool("book_room", {"city": "Oslo"})
        # A call that fits: recorded, it shows that the refused one would have been recorded by now.
        fitting = await client.call_tool("book_room", BOOKING)

    assert missing.is_error is True and "nights: is required" in text(missing), text(missing)
    assert text(fitting) == "Booked Oslo for 2 nights"
    [recorded] = await installation.completed_calls("unchecked")
    assert "Booked Oslo for 2 nights" in recorded["result"]["content"]
    assert len((await installation.api(installation.otto, "GET", "/api/runs?agent=unchecked"))["items"]) == 1


async def test_it_refuses_arguments_over_their_limit_naming_it(installation):
    url = installation.gateway("bulky", {"connection": "web"})

    async with mcp_client(url, installation.ada.token) as client:
        result = await client.call_tool("book_room", {"city": "O" * 300_000, "nights": 1})

    assert result.is_error is True and "over the limit of 262144 bytes" in text(result), text(result)
    assert await installation.requests("bulky") == []


async def test_it_refuses_arguments_no_database_stores_naming_the_field_and_opening_nothing(installation):
    url = installation.gateway("unstorable", {"connection": "web"})

    async with mcp_client(url, installation.ada.token) as client:
        # Bounded: a call let through would wait for a person (SQLite stores the NUL).
        nul = await asyncio.wait_for(client.call_tool("book_room", {"city": "Os\x00lo", "nights": 2}), 30)
    # A number JSON has not: the MCP SDK's parser reads `1e999` as an infinity (its own client never sends one).
    ada = {**ACCEPT, "Authorization": f"Bearer {installation.ada.token}", "Content-Type": "application/json"}
    call = '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "book_room", "arguments": '
    async with httpx2.AsyncClient(timeout=30) as http:
        opened = await http.post(url, json=INITIALIZE, headers=ada)
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(url, json=initialized, headers={**ada, **session})).status_code == 202
        endless = await http.post(url, content=call + '{"city": "Oslo", "nights": 1e999}}}', headers={**ada, **session})
        # An integer past the largest JSON number, which Python reads exactly and no receipt digests.
        huge = call.replace('"id": 2', '"id": 3') + '{"city": "Oslo", "nights": 1' + "0" * 400 + "}}}"
        too_large = await http.post(url, content=huge, headers={**ada, **session})

    assert (
        nul.is_error is True
        and text(nul) == "Refused: arguments.city contains a NUL character. Nothing was asked or run."
    )
    assert endless.status_code == 200 and "arguments.nights is not a finite number" in endless.text, endless.text
    assert '"isError":true' in endless.text.replace(" ", "")
    assert "arguments.nights is a number too large for JSON" in too_large.text, too_large.text
    assert '"isError":true' in too_large.text.replace(" ", "")
    assert await installation.requests("unstorable") == []


async def test_it_refuses_an_oversized_message_with_413_naming_the_limit(installation):
    url = installation.gateway("oversized", {"connection": "web"})
    padded = {**INITIALIZE, "params": {**INITIALIZE["params"], "padding": "x" * (1024 * 1024)}}  # type: ignore[dict-item]
    body = json.dumps(padded).encode()

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the gateway counts what it reads
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    headers = {**ACCEPT, "Authorization": f"Bearer {installation.ada.token}", "Content-Type": "application/json"}
    async with httpx2.AsyncClient(timeout=30) as http:
        declared = await http.post(url, content=body, headers=headers)
        streamed = await http.post(url, content=chunked(), headers=headers)

    for refused in (declared, streamed):
        assert (refused.status_code, refused.headers["content-type"]) == (413, "application/problem+json")
        assert refused.json()["code"] == "content_too_large"
        assert "over the limit of 1048576 bytes" in refused.json()["detail"], refused.json()
    assert await installation.requests("oversized") == []


async def test_it_records_an_upstream_failure_as_an_error_result_and_a_failed_call(installation):
    url = installation.gateway("failing", {"connection": "web", "approval": "never"})

    async with mcp_client(url, installation.ada.token) as client:
        result = await client.call_tool("explode", {})

    assert result.is_error is True and "explode" in text(result), text(result)
    [recorded] = await installation.completed_calls("failing")
    assert recorded["success"] is False


@pytest.mark.usefixtures("everything_server")
async def test_it_names_the_tools_of_several_servers_after_their_connections(installation):
    url = installation.gateway(
        "several",
        {"connection": "meetings", "approval": "never"},
        {"connection": "web"},
        {"connection": "everything", "approval": "never"},
    )

    async with mcp_client(url, installation.ada.token) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        pong = await client.call_tool("meetings__ping", {})
        echoed = await client.call_tool("everything__echo", {"message": "through the gateway"})

    assert {"meetings__ping", "meetings__book_meeting", "web__book_room", "web__explode", "everything__echo"} <= set(
        listed
    )
    assert all("__" in name for name in listed)
    assert text(pong) == "pong"
    assert "through the gateway" in text(echoed) and echoed.is_error is False


@pytest.fixture(scope="module")
def listed(installation: Installation) -> str:
    return installation.gateway("listed", {"connection": "web"})


@pytest.mark.parametrize(
    ("mode", "versions"), [("legacy", HANDSHAKE_PROTOCOL_VERSIONS), ("auto", MODERN_PROTOCOL_VERSIONS)]
)
async def test_it_lists_the_upstream_tools_in_both_protocol_eras(installation, listed, mode, versions):
    async with mcp_client(listed, installation.ada.token, mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        version = client.protocol_version
        server = client.server_info

    assert version in versions
    assert server is not None and server.name == "airlock/listed"
    assert list(tools) == ["book_room", "read_account", "explode"]
    assert tools["book_room"].input_schema["required"] == ["city", "nights"]
