"""`/mcp/{agent}`: a gateway agent as an MCP server over Streamable HTTP (SPEC section 15), served by the `mcp`
SDK's server side in the console's process (`console.asgi` hands it every path under `/mcp/`).

Each request is authenticated here first (an Airlock API token, `Authorization: Bearer`, of an operator or more),
its agent looked up in the token's tenant (another tenant's, or an agent that is no gateway: 404) and the
`Gate` it calls through put on the request's scope. An MCP session belongs to the token that opened it (the SDK's
session owners); it is an Airlock session (`mcp-<session id>`), a 2026-07-28 request without one a session of
its own call. Each gateway agent has its `Server` (named `airlock/<agent>`) and session manager, started on first
use and kept for the process's life."""

import asyncio
import contextvars
import dataclasses
import hashlib
import re
import time
import uuid
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from agents.models import Agent, AgentVersion
from agents.prepare import granted_connections
from console.models import ApiToken, Membership
from console.problems import ApiError, problem
from gateway import calls
from gateway.calls import Gate
from gateway.upstream import UpstreamFailed, upstream

PATH = re.compile(r"^/mcp/([a-z0-9][a-z0-9_-]{0,62})/?$")
# The largest MCP message a client may send (a call's arguments are held to their own, smaller limit).
MAX_MESSAGE_BYTES = 1024 * 1024
SESSION_HEADER = b"mcp-session-id"

# The gate of the request being served, for handlers that run in its task (2026-07-28's single exchanges).
_GATE: contextvars.ContextVar[Gate | None] = contextvars.ContextVar("airlock_gate", default=None)


def _gate_of(ctx: ServerRequestContext[Any, Any]) -> Gate:
    scope = getattr(ctx.request, "scope", None)
    gate = scope.get("airlock.gate") if isinstance(scope, dict) else None
    gate = gate or _GATE.get()
    if gate is None:  # every request passes `GatewayApp` first
        raise MCPError(types.INTERNAL_ERROR, "The request reached the gateway unauthenticated.")
    return gate


async def _servers(gate: Gate) -> list[tuple[Any, Any]]:
    definition = gate.version.definition
    return [(server, gate.connections[server.connection]) for server in definition.mcp_servers]


async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
    """The upstream servers' tools under the gateway's names, less those its policies always deny."""
    gate = _gate_of(ctx)
    definition = gate.version.definition
    offered: list[types.Tool] = []
    for server, spec in await _servers(gate):
        try:
            tools = await upstream(gate.tenant_id, spec).tools()
        except UpstreamFailed as error:
            raise MCPError(types.INTERNAL_ERROR, str(error)) from None
        offered += [tool.model_copy(update={"name": definition.exposed_name(server, tool.name)}) for tool in tools]
    hidden = calls.always_denied(gate.version, [tool.name for tool in offered])
    return types.ListToolsResult(tools=[tool for tool in offered if tool.name not in hidden])


async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
    return await calls.call(_gate_of(ctx), ctx, params.name, dict(params.arguments or {}))


async def list_resources(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourcesResult:
    found: list[types.Resource] = []
    for _, spec in await _servers(_gate_of(ctx)):
        found += await _passed(upstream(_gate_of(ctx).tenant_id, spec).list_resources(), [])
    return types.ListResourcesResult(resources=found)


async def list_resource_templates(
    ctx: ServerRequestContext[Any, Any], params: Any
) -> types.ListResourceTemplatesResult:
    found: list[types.ResourceTemplate] = []
    for _, spec in await _servers(_gate_of(ctx)):
        found += await _passed(upstream(_gate_of(ctx).tenant_id, spec).list_resource_templates(), [])
    return types.ListResourceTemplatesResult(resource_templates=found)


async def read_resource(
    ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    """The first fronted server that has the resource answers it."""
    last: MCPError | None = None
    for _, spec in await _servers(_gate_of(ctx)):
        try:
            return await upstream(_gate_of(ctx).tenant_id, spec).read_resource(str(params.uri))
        except MCPError as error:
            last = error
        except UpstreamFailed as error:
            last = MCPError(types.INTERNAL_ERROR, str(error))
    raise last or MCPError(types.INVALID_PARAMS, f"Unknown resource: {params.uri}")


async def list_prompts(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListPromptsResult:
    gate = _gate_of(ctx)
    definition = gate.version.definition
    found: list[types.Prompt] = []
    for server, spec in await _servers(gate):
        prompts: list[types.Prompt] = await _passed(upstream(gate.tenant_id, spec).list_prompts(), [])
        found += [p.model_copy(update={"name": definition.exposed_name(server, p.name)}) for p in prompts]
    return types.ListPromptsResult(prompts=found)


async def get_prompt(ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> Any:
    gate = _gate_of(ctx)
    fronted = gate.version.definition.fronting(params.name)
    if fronted is None:
        raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
    server, name = fronted
    try:
        return await upstream(gate.tenant_id, gate.connections[server.connection]).get_prompt(name, params.arguments)
    except UpstreamFailed as error:
        raise MCPError(types.INTERNAL_ERROR, str(error)) from None


async def _passed[T](asked: Any, empty: T) -> T:
    """What a fronted server lists, or `empty` when it has no such list (it declares no resources or prompts)."""
    try:
        return await asked  # type: ignore[no-any-return]
    except MCPError:
        return empty
    except UpstreamFailed as error:
        raise MCPError(types.INTERNAL_ERROR, str(error)) from None


def _server(agent: str) -> Server[Any]:
    return Server(
        f"airlock/{agent}",
        version="1",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


class Managers:
    """A session manager per gateway agent of a tenant, each run by a task of its own from its first request."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, str], StreamableHTTPSessionManager] = {}
        self.holders: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.started: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def of(self, tenant_id: Any, agent: str) -> StreamableHTTPSessionManager:
        """The agent's running manager; a request that comes while it starts waits for it (the SDK refuses a
        request before its manager runs)."""
        key = (str(tenant_id), agent)
        found = self.running.get(key)
        if found is None or self.holders[key].done():
            found = self.running[key] = StreamableHTTPSessionManager(
                _server(agent), max_request_body_size=MAX_MESSAGE_BYTES
            )
            started = self.started[key] = asyncio.get_running_loop().create_future()
            self.holders[key] = asyncio.get_running_loop().create_task(self._run(found, started))
        await asyncio.shield(self.started[key])
        return found

    @staticmethod
    async def _run(manager: StreamableHTTPSessionManager, started: "asyncio.Future[None]") -> None:
        try:
            async with manager.run():
                started.set_result(None)
                await asyncio.Event().wait()
        except BaseException as error:
            if not started.done():
                started.set_exception(error if isinstance(error, Exception) else RuntimeError("stopped"))
            raise


MANAGERS = Managers()


# How long a token's gate to an agent is kept in this process before it is read again: a revoked token, a new
# version of the agent or a connection no longer granted applies to calls within this many seconds.
GATE_SECONDS = 5.0
# The most gates kept (all are forgotten past it).
MOST_GATES = 10_000
_GATES: dict[tuple[str, str], tuple[float, Gate]] = {}


async def gate_for(header: str | None, agent: str, session_id: str | None) -> Gate:
    """The gate a request calls through (`_authenticated`), read again every GATE_SECONDS: every message of an MCP
    session passes here, and reading the token, agent, version and grants each time was most of a call's cost."""
    key = (hashlib.sha256((header or "").encode()).hexdigest(), agent)
    now = time.monotonic()
    kept = _GATES.get(key)
    if kept is not None and now - kept[0] < GATE_SECONDS:
        gate = kept[1]
    else:
        gate = await sync_to_async(_authenticated, thread_sensitive=False)(header, agent)
        if len(_GATES) >= MOST_GATES:
            _GATES.clear()
        _GATES[key] = (now, gate)
    return dataclasses.replace(gate, session_key=f"mcp-{session_id}" if session_id else f"mcp-call-{uuid.uuid4()}")


def _authenticated(header: str | None, agent: str) -> Gate:
    """The gate a request calls through (ApiError: 401 without a valid token, 403 under an operator, 404 for no
    gateway of that name in the token's tenant)."""
    try:
        api_token = ApiToken.bearer(header)
        membership: Membership = api_token.membership
        if not membership.allows("operator"):
            raise ApiError(403, "forbidden", "Calling tools through a gateway takes an operator's token or more.")
        found = Agent.objects.live().filter(tenant=membership.tenant, name=agent).first()
        version = (
            AgentVersion.objects.select_related("agent", "agent__tenant")
            .filter(agent=found, number=found.current_version)
            .first()
            if found is not None
            else None
        )
        if version is None or not version.definition.gateway:
            raise ApiError(404, "not_found", f"No MCP gateway named {agent!r} in this tenant.")
        connections = dict(granted_connections(membership.tenant, version))
        return Gate(membership, api_token.pk, version, connections, "")
    finally:
        close_old_connections()


class GatewayApp:
    """The ASGI application of `/mcp/…`."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        match = PATH.match(scope["path"])
        if match is None:
            await _problem(send, ApiError(404, "not_found", "An MCP gateway is served at /mcp/{agent}."))
            return
        headers = dict(scope.get("headers") or [])
        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        session = headers.get(SESSION_HEADER, b"").decode("latin-1") or None
        try:
            gate = await gate_for(authorization, match.group(1), session)
        except ApiError as refusal:
            await _problem(send, refusal)
            return
        if scope["method"] == "POST":
            body = await _body(receive)
            if body is None:
                limit = f"over the limit of {MAX_MESSAGE_BYTES} bytes"
                await _problem(send, ApiError(413, "content_too_large", f"The MCP message is {limit}."))
                return
            disconnected: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            watcher = asyncio.ensure_future(_watch(receive, disconnected))
            receive = _replay(body, disconnected)
            scope = {**scope, calls.DISCONNECTED: disconnected}
        else:
            watcher = None
        owner = AccessToken(token="", client_id=f"airlock-token:{gate.token_id}", scopes=[])
        scope = {**scope, "user": AuthenticatedUser(owner), "airlock.gate": gate}
        manager = await MANAGERS.of(gate.tenant_id, gate.agent)
        token = _GATE.set(gate)
        try:
            await manager.handle_request(scope, receive, send)
        finally:
            _GATE.reset(token)
            if watcher is not None:
                watcher.cancel()


async def _body(receive: Any) -> bytes | None:
    """The request's whole body, or None once it is over MAX_MESSAGE_BYTES (nothing more is read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_MESSAGE_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _watch(receive: Any, disconnected: "asyncio.Future[dict[str, Any]]") -> None:
    """Resolve `disconnected` when the client goes away (the one message left to receive once the body is read): a
    handshake-era call waiting for a decision is cancelled then (gateway.calls)."""
    message = await receive()
    if not disconnected.done():
        disconnected.set_result(message)


def _replay(body: bytes, disconnected: "asyncio.Future[dict[str, Any]]") -> Any:
    """A `receive` that gives `body` once, then the client's disconnect when it comes."""
    given = False

    async def replayed() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await asyncio.shield(disconnected)

    return replayed


async def _problem(send: Any, refusal: ApiError) -> None:
    """The refusal as the API's problem+json (console.problems.problem)."""
    response = problem(refusal.status, refusal.code, refusal.detail)
    body = response.content
    headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]
    if refusal.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="airlock"'))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
