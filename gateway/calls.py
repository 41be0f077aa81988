"""A gateway's `tools/call` (SPEC section 15): the call passes what a hosted agent's does (`pre_tool_call` policies,
remembered rules, the tool's approval mode, the inbox with its routing and requirements) as an external agent's
approval request (`approvals.actions.external.open_request`, with the upstream tool as the `AskedTool`), waits for
its decision holding a channel of the layer and no thread (`approvals.waiting`), then goes upstream with the
approved arguments, passes `post_tool_call`, and is recorded in the request's run (`settling.record_call`).

What the client reads is always a tool result: a denial, an expiry, a cancel or an upstream failure is one with
`isError` and the decision in words (the model reads why); only an unknown tool is a protocol error."""

import asyncio
import contextlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import mcp_types as types
from django.conf import settings
from django.utils import timezone
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from agents.definitions import McpServer
from agents.models import AgentVersion
from agents.policies.declarations import denied_tools
from approvals import waiting
from approvals.actions.external import AskedTool, RequestRefused, open_request
from approvals.actions.interceptions import PoliciesUnavailable, post_tool_call_check
from approvals.actions.passed_calls import PassedCall
from approvals.actions.settling import cancel_request, record_call
from approvals.external_wire import ARGUMENTS_LIMIT, OpenRequest, TooLarge, check_size, stored_request_id
from approvals.kinds.base import schema_problems
from approvals.models import PendingRequest, RequestStatus
from console.connections import ConnectionSpec
from console.json_bodies import unstorable_said
from console.models import Membership
from console.tenancy import AUTH_METHOD
from gateway.upstream import UpstreamFailed, upstream
from gateway.writes import RECORDER, on_thread

SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
logger = logging.getLogger(__name__)

# Where the ASGI scope of a POST holds the future its client's disconnect resolves (gateway.server).
DISCONNECTED = "airlock.disconnected"
# How often a waiting call tells a client that gave a progress token that it still waits.
PROGRESS_SECONDS = 10.0
# How often a waiting call reads its request again, in case a wake was lost.
REREAD_SECONDS = 60.0
# A result larger than this is recorded cut (the client gets it whole).
RECORDED_RESULT_LIMIT = ARGUMENTS_LIMIT


@dataclass(frozen=True)
class Gate:
    """Who calls through which gateway: the token's member (the requester), its tenant's gateway agent at its current
    version, the connections granted to the tenant, and the Airlock session the MCP session is."""

    membership: Membership
    token_id: Any
    version: AgentVersion
    connections: dict[str, ConnectionSpec]
    session_key: str

    @property
    def agent(self) -> str:
        return self.version.agent.name

    @property
    def tenant_id(self) -> Any:
        return self.membership.tenant_id


def unknown_tool(name: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")


def error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def fronted_tool(gate: Gate, exposed: str) -> tuple[McpServer, types.Tool]:
    """The server and upstream tool the gateway's tool `exposed` stands for; MCPError for one it does not offer
    (no such tool, or one its policies always deny: `tools/list` leaves those out)."""
    definition = gate.version.definition
    fronted = definition.fronting(exposed)
    if fronted is None:
        raise unknown_tool(exposed)
    server, name = fronted
    spec = gate.connections.get(server.connection)
    if spec is None:
        raise unknown_tool(exposed)
    tools = await upstream(gate.tenant_id, spec).tools()
    tool = next((t for t in tools if t.name == name), None)
    if tool is None or exposed in always_denied(gate.version, [exposed]):
        raise unknown_tool(exposed)
    return server, tool


def always_denied(version: AgentVersion, names: list[str]) -> set[str]:
    """Of the gateway's tools `names`, those its policies deny whatever the call (an `airlock.acs` manifest that
    governs tool calls and does not list them)."""
    hooks = version.definition.hooks
    return denied_tools(hooks, names) if hooks is not None else set()


async def call(gate: Gate, ctx: ServerRequestContext[Any, Any], exposed: str, arguments: dict[str, Any]) -> Any:
    try:
        server, tool = await fronted_tool(gate, exposed)
    except UpstreamFailed as error:  # its server cannot say what the tool is: nothing is asked or run
        return error_result(f"{error} Nothing was asked or run.")
    try:
        check_size(arguments, "arguments", ARGUMENTS_LIMIT)
    except TooLarge as over:
        return error_result(f"Refused: the call's arguments are too large: {over.message}. Nothing was asked or run.")
    if wrong := unstorable_said(arguments, ("arguments",)):
        return error_result(f"Refused: {wrong}. Nothing was asked or run.")
    asked = _asked(gate, server, tool, exposed)
    if asked.approval == "never" and gate.version.definition.hooks is None:
        return await _pass_through(gate, tool, asked, arguments)
    key = uuid.uuid4()
    request_id = stored_request_id(gate.tenant_id, key)
    body = OpenRequest.model_validate(
        {
            "requestId": str(key),
            "sessionId": gate.session_key,
            "kind": "approval",
            "toolName": exposed,
            "toolCallId": f"mcp_{key.hex}",
            "arguments": arguments,
        }
    )
    AUTH_METHOD.set(f"token:{gate.token_id}")
    async with waiting.subscribed(str(request_id)) as woken:
        try:
            opened = await on_thread(open_request, gate.membership, gate.membership.user, gate.agent, body, asked)
        except RequestRefused as refused:
            return error_result(_refused_words(refused))
        pending = opened.request
        if pending.answer is None and pending.status == RequestStatus.PENDING:
            pending = await _wait(gate, ctx, pending, woken)
    answer = pending.answer or {}
    if not answer.get("approved"):
        return error_result(decision_words(pending))
    return await _run_upstream(gate, server, tool, pending)


async def _pass_through(
    gate: Gate, tool: types.Tool, asked: AskedTool, arguments: dict[str, Any]
) -> types.CallToolResult:
    """A tool in approval mode `never` under no policies: nobody is asked, and nothing decides (as in a hosted
    turn: no request, no receipt). Its arguments must fit its schema; it goes upstream at once, and its run is
    recorded after the client has its result (`RECORDER`)."""
    problems = schema_problems(asked.parameters, arguments, root="arguments")
    if problems:
        return error_result(
            f"Refused: the arguments do not fit the parameters of {asked.name}: {problems}. Nothing was run."
        )
    call_id = f"mcp_{uuid.uuid4().hex}"
    spec = gate.connections[asked.permission["serverName"]]
    try:
        with RECORDER.passing():
            result = await upstream(gate.tenant_id, spec).call(tool.name, arguments)
    except (UpstreamFailed, MCPError, TimeoutError) as error:
        words = str(error) or type(error).__name__
        _record_later(gate, (asked.name, call_id, arguments), (False, None, words))
        return error_result(f"The tool {asked.name} failed upstream: {words}")
    value = _shown(result)
    recorded = value if len(json.dumps(value)) <= RECORDED_RESULT_LIMIT.size else "(too large to keep)"
    outcome = (not result.is_error, recorded, _text(result) if result.is_error else None)
    _record_later(gate, (asked.name, call_id, arguments), outcome)
    return types.CallToolResult.model_validate(value)


def _record_later(gate: Gate, call: tuple[str, str, dict[str, Any]], outcome: tuple[bool, Any, str | None]) -> None:
    RECORDER.add(PassedCall(gate.membership, gate.version, gate.session_key, call, outcome, timezone.now()))


def _shown(result: types.CallToolResult) -> dict[str, Any]:
    """An upstream result as the client gets it (and policies see it): without the upstream server's name, the
    gateway being the client's server (`airlock/<agent>`)."""
    value = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    value.get("_meta", {}).pop(SERVER_INFO_META, None)
    if value.get("_meta") == {}:
        del value["_meta"]
    return value


def _asked(gate: Gate, server: McpServer, tool: types.Tool, exposed: str) -> AskedTool:
    annotations = tool.annotations
    permission = {
        "kind": "mcp",
        "serverName": server.connection,
        "toolName": tool.name,
        "toolTitle": tool.title or (annotations.title if annotations and annotations.title else None) or tool.name,
        "readOnly": bool(annotations and annotations.read_only_hint),
    }
    description = tool.description or ""
    state = {"gateway": {"server": server.connection, "tool": tool.name, "description": description[:2000]}}
    schema = dict(tool.input_schema)
    return AskedTool(exposed, description, schema, server.approval_of(tool.name), permission, state)


def _refused_words(refused: RequestRefused) -> str:
    if refused.errors:
        problems = "; ".join(
            message if message.startswith(f"{field}:") else f"{field}: {message}"
            for field, message in refused.errors.items()
        )
        return f"Refused: {refused.detail} {problems}. Nothing was asked or run."
    return f"Refused: {refused.detail} Nothing was asked or run."


async def _wait(gate: Gate, ctx: ServerRequestContext[Any, Any], pending: PendingRequest, woken: Any) -> PendingRequest:
    """Wait for the request's decision: a progress notification every PROGRESS_SECONDS (when the client gave a
    token), one URL-mode elicitation pointing at the card (when the client takes them); the client's cancel closes
    the request `cancelled`."""
    browser = _ask_in_browser(gate, ctx, pending)
    scope = getattr(ctx.request, "scope", None)
    disconnected = scope.get(DISCONNECTED) if isinstance(scope, dict) else None
    ticks = 0
    try:
        while True:
            # Shielded: a wait that times out cancels what it waited on, and the disconnect is the request's.
            gone = asyncio.shield(disconnected) if disconnected is not None else asyncio.Future()
            wake = await woken(PROGRESS_SECONDS, gone)
            if wake.outcome == "decided":
                break
            if wake.outcome == "gone":
                # A handshake-era client went away: its call is not the SDK's to cancel (the session outlives the
                # request's stream), so it is cancelled here.
                await on_thread(_cancel, gate, pending)
                break
            ticks += 1
            if ticks * PROGRESS_SECONDS % REREAD_SECONDS == 0:
                read = await on_thread(_read, pending.pk)
                if read.answer is not None or read.status != RequestStatus.PENDING:
                    return read
            with contextlib.suppress(Exception):
                await ctx.session.report_progress(
                    ticks * PROGRESS_SECONDS, None, f"Waiting for a decision in Airlock: {card_url(gate, pending)}"
                )
    except BaseException:
        with anyio.CancelScope(shield=True):
            await on_thread(_cancel, gate, pending)
        raise
    finally:
        if browser is not None:
            browser.cancel()
    return await on_thread(_read, pending.pk)


def _read(pk: Any) -> PendingRequest:
    return PendingRequest.objects.select_related("run", "answered_by", "closed_by").get(pk=pk)


def _cancel(gate: Gate, pending: PendingRequest) -> None:
    """The client gave up on its call (`notifications/cancelled`, or its stream closed): the request closes
    `cancelled`, unless it was decided meanwhile."""
    with contextlib.suppress(RequestRefused):
        cancel_request(gate.membership, gate.membership.user, _read(pending.pk))


def card_url(gate: Gate, pending: PendingRequest) -> str:
    return f"{settings.CONSOLE_URL}/inbox/?agent={quote(gate.agent)}#request-{pending.id}"


def _ask_in_browser(
    gate: Gate, ctx: ServerRequestContext[Any, Any], pending: PendingRequest
) -> "asyncio.Future[Any] | None":
    """One URL-mode `elicitation/create` pointing at the request's card, when the client declared it takes them and
    can be asked (a handshake-era session); its answer changes nothing (the decision is the inbox's)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None or getattr(elicitation, "url", None) is None or not ctx.session.can_send_request:
        return None
    asked = ctx.session.elicit_url(
        "Approve in Airlock", card_url(gate, pending), str(pending.id), related_request_id=ctx.request_id
    )
    return asyncio.ensure_future(_quietly(asked))


async def _quietly(asked: Any) -> None:
    with contextlib.suppress(Exception):
        await asked


def decision_words(pending: PendingRequest) -> str:
    """Why an approval did not go through, as the model reads it: who decided what, and their reason."""
    answer = pending.answer or {}
    if pending.answer is not None:
        reason = answer.get("reason")
        if answer.get("deniedBy") == "policy":
            who = f"the policy {answer.get('binding')}" if answer.get("binding") else "a policy"
        elif pending.answered_by is not None:
            who = pending.answered_by.username
        else:
            who = "Airlock"
        said = f" Their reason: {reason}" if reason else ""
        return f"Denied by {who} in Airlock: the call was not run.{said}"
    if pending.status == RequestStatus.EXPIRED:
        return "Not approved: the request expired in Airlock before anyone decided. The call was not run."
    if pending.status == RequestStatus.CANCELLED:
        who = f" by {pending.closed_by.username}" if pending.closed_by is not None else ""
        return f"Not approved: the request was cancelled{who} in Airlock. The call was not run."
    return f"Not approved: the request was closed ({pending.status}) in Airlock. The call was not run."


async def _run_upstream(
    gate: Gate, server: McpServer, tool: types.Tool, pending: PendingRequest
) -> types.CallToolResult:
    """The approved call upstream, with the approved (edited) arguments; its result through `post_tool_call`;
    recorded in the request's run."""
    answer = pending.answer or {}
    override = answer.get("overrideArguments")
    arguments = override if override is not None else pending.arguments
    spec = gate.connections[server.connection]
    try:
        result = await upstream(gate.tenant_id, spec).call(tool.name, arguments)
    except (UpstreamFailed, MCPError, TimeoutError) as error:
        words = str(error) or type(error).__name__
        await on_thread(record_call, pending, False, None, words)
        return error_result(f"The tool {pending.tool_name} failed upstream: {words}")
    value = _shown(result)
    call = (pending.tool_name, pending.call_id, arguments)
    try:
        check = await post_tool_call_check(
            gate.version, gate.connections, pending.run_id, gate.session_key, call, value, is_error=result.is_error
        )
    except PoliciesUnavailable as error:
        await on_thread(record_call, pending, False, None, str(error))
        return error_result(f"Withheld: {error}")
    if check.denied is not None:
        words = f"Denied by policy: {check.denied}"
        await on_thread(record_call, pending, False, None, words, check.events)
        return error_result(f"{words}. The tool ran; its result is withheld.")
    try:
        shown = types.CallToolResult.model_validate(check.value)
    except ValueError:
        words = "a policy changed the result into something that is not a tool result"
        await on_thread(record_call, pending, False, None, words, check.events)
        return error_result(f"Withheld: {words}.")
    recorded = check.value if len(json.dumps(check.value)) <= RECORDED_RESULT_LIMIT.size else "(too large to keep)"
    reported = _text(shown) if shown.is_error else None
    await on_thread(record_call, pending, not shown.is_error, recorded, reported, check.events)
    return shown


def _text(result: types.CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return " ".join(texts)[:2000] or "the tool reported an error"
