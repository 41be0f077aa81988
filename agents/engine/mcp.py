"""MCP servers of a definition as pydantic-ai toolsets, with elicitation turned into "awaiting input".

A server may ask the user something in the middle of a tool call, in one of two ways: a classic
`elicitation/create` request (handshake-era protocol 2025-11-25) or an input-required result
(protocol 2026-07-28, which the FastMCP client answers through the same elicitation handler). Either
way the bridge's handler sees the question. When the call has no answer yet, the handler declines
for now and the bridge ends the call with `ApprovalRequired(metadata={"question": ...})`, so the run
ends awaiting input. The answer comes in the next turn as the call's approval metadata; the call is
then run again from its start and the handler gives the stored answer when the server asks again.

A server that uses the classic request cannot ask on a 2026-07-28 session ("no back-channel"); the
bridge then repeats the call on a handshake-era connection, and remembers to use one for that server.

Progress notifications of a call (the client sends a `progressToken` with every call, as the client has a
progress handler) become ephemeral `tool.execution_progress` events of the call being run, streamed to
whoever watches and never stored. MCP has no notification carrying a partial result, so no MCP call
reports `tool.execution_partial_result`.
"""

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from django.conf import settings
from fastmcp.client import Client as FastMCPClient
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, ElicitResult, TextContent
from pydantic_ai import ApprovalRequired, ModelRetry, RunContext, ToolFailed
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from agents.definitions import McpServer
from agents.engine.outcome import McpServerFailed
from agents.payloads import Payload, ToolExecutionProgress
from console.connections import ConnectionSpec

Emit = Callable[[Payload], Awaitable[None]]

NO_BACK_CHANNEL = "no back-channel"
CALL_TIMEOUT_SECONDS = 60.0
START_TIMEOUT_SECONDS = 15.0
PING_TIMEOUT_SECONDS = 5.0
PROJECT_DIR = str(settings.BASE_DIR)

TOOL_LIST_TTL_SECONDS = 300.0

# Servers (by their connection settings) seen to need the handshake-era protocol; kept per process.
_LEGACY_SERVERS: set[str] = set()
# Tool lists by server, so a turn that calls no MCP tool does not start the server at all.
_TOOL_LISTS: dict[str, tuple[float, dict[str, ToolsetTool[Any]]]] = {}


def _server_key(spec: ConnectionSpec) -> str:
    return repr((spec.command, spec.args, spec.env, spec.url))


class _Held:
    """An async context manager entered and exited by a task of its own.

    MCP clients hold anyio cancel scopes, which must be exited by the task that entered them; tool
    calls run in tasks of their own, so the connection lives in a task that outlasts them.
    """

    def __init__(self, manager: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        self._manager = manager
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.value: Any = None

    async def open(self) -> Any:
        if self._task is None:
            self._task = asyncio.create_task(self._hold())
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not self._ready.is_set():
            ready.cancel()
            self._task.result()  # raises the reason it could not open
        return self.value

    async def _hold(self) -> None:
        async with self._manager() as value:
            self.value = value
            self._ready.set()
            await self._closing.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._closing.set()
            await asyncio.gather(self._task, return_exceptions=True)


@dataclass
class _CallProgress:
    """The progress notifications of one tool call, reported as ephemeral `tool.execution_progress` events.

    The MCP client runs each progress callback in a task of its own, so one may still be under way, or not
    yet begun, when the call's result arrives: `settle` waits for those under way and drops later ones,
    so that no progress of a call is reported after its `tool.execution_complete`."""

    call_id: str
    emit: Emit | None
    settled: bool = False
    _under_way: set["asyncio.Task[Any]"] = field(default_factory=set)

    async def report(self, progress: float, total: float | None, message: str | None) -> None:
        task = asyncio.current_task()
        if self.settled or self.emit is None or task is None:
            return
        self._under_way.add(task)
        try:
            said = message or _fraction(progress, total)
            await self.emit(ToolExecutionProgress(toolCallId=self.call_id, progressMessage=said))
        finally:
            self._under_way.discard(task)

    async def settle(self) -> None:
        self.settled = True
        if self._under_way:
            await asyncio.wait(set(self._under_way), timeout=PING_TIMEOUT_SECONDS)


def _fraction(progress: float, total: float | None) -> str:
    """A progress notification without a message, as `progress/total` (`3/5`), or `progress` alone."""
    return f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"


@dataclass
class McpBridge:
    server: McpServer
    connection: ConnectionSpec
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _slot: dict[str, Any] | None = None
    _connection: _Held | None = None
    _legacy: _Held | None = None

    @property
    def key(self) -> str:
        return _server_key(self.connection)

    def toolset(self) -> AbstractToolset[Any]:
        mode = "legacy" if self.key in _LEGACY_SERVERS else "auto"
        mcp = MCPToolset(
            self._client(mode), id=f"mcp-{self.server.name}", process_tool_call=self._call, tool_error_behavior="failed"
        )
        self._connection = _Held(lambda: _entered(mcp))
        toolset: AbstractToolset[Any] = _LazyMcpToolset(mcp, bridge=self)
        if self.server.tool_prefix:
            toolset = toolset.prefixed(self.server.tool_prefix)
        return toolset

    async def connect(self) -> None:
        """Start (spawn or connect to) the server, once per turn."""
        assert self._connection is not None
        try:
            await self._connection.open()
        except Exception as error:
            detail = str(error) or type(error).__name__
            if self.connection.command and _unnamed_missing_file(error):
                detail += f": {self.connection.command!r}"  # what was not found (uvloop's error does not say)
            raise McpServerFailed(f"The MCP server {self.server.name!r} could not be started: {detail}") from error

    def _client(self, mode: str) -> FastMCPClient[Any]:
        spec = self.connection
        if spec.url:
            transport: Any = StreamableHttpTransport(spec.url)
        else:
            env = {name: os.environ[name] for name in spec.env if name in os.environ}
            env.setdefault("PATH", os.environ.get("PATH", ""))
            transport = StdioTransport(spec.command, list(spec.args), env=env, cwd=PROJECT_DIR, keep_alive=False)
        return FastMCPClient(
            transport,
            elicitation_handler=self._on_elicit,
            progress_handler=self._on_progress,
            mode=mode,  # type: ignore[arg-type]
            timeout=CALL_TIMEOUT_SECONDS,
            init_timeout=START_TIMEOUT_SECONDS,
        )

    async def _on_elicit(self, message: str, response_type: Any, params: Any, context: Any) -> ElicitResult:
        slot = self._slot
        if slot is None:
            return ElicitResult(action="cancel")
        answer = slot.get("answer")
        if answer is not None:
            return ElicitResult(action=answer["action"], content=answer.get("content"))
        slot["question"] = {"message": message, "schema": getattr(params, "requested_schema", None) or {}}
        return ElicitResult(action="decline")

    async def _on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        slot = self._slot
        if slot is not None:
            await slot["progress"].report(progress, total, message)

    async def _call(self, ctx: RunContext[Any], call_tool: Any, name: str, args: dict[str, Any]) -> Any:
        metadata = (ctx.tool_call_metadata or {}) if ctx.tool_call_approved else {}
        answer = metadata.get("input_answer")
        progress = _CallProgress(ctx.tool_call_id or "", getattr(ctx.deps, "emit", None))
        # One call at a time per server: the elicitation and progress handlers must know whose call they see.
        async with self._lock:
            self._slot = {"answer": answer, "progress": progress}
            try:
                result = await self._call_once(call_tool, name, args)
            finally:
                slot, self._slot = self._slot, None
                await progress.settle()
        if slot.get("question") is not None and answer is None:
            raise ApprovalRequired(metadata={"question": slot["question"]})
        return result

    async def _call_once(self, call_tool: Any, name: str, args: dict[str, Any]) -> Any:
        if self._legacy is None:
            try:
                return await call_tool(name, args)
            except (ModelRetry, ToolFailed) as error:
                if await self._connection_lost(error):
                    raise McpServerFailed(
                        f"The MCP server {self.server.name!r} stopped answering during the call to {name!r}: {error}"
                    ) from error
                if NO_BACK_CHANNEL not in str(error):
                    raise
            _LEGACY_SERVERS.add(self.key)
            client = self._client("legacy")
            self._legacy = _Held(lambda: client)
        legacy: FastMCPClient[Any] = await self._legacy.open()
        result = await legacy.call_tool(name, args, raise_on_error=False)
        text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
        if result.is_error:
            raise ToolFailed(text or "the MCP tool failed")
        return result.structured_content if result.structured_content is not None and not text else text

    async def _connection_lost(self, error: BaseException) -> bool:
        """Whether a failed call failed because the server went away (it died or closed its end).

        pydantic-ai hands a lost connection to the model as a tool error; it must end the turn instead.
        """
        if not _closed_connection_error(error):
            return False
        # A live server may use the same JSON-RPC code for an error of its own: ask it whether it is there.
        assert self._connection is not None
        try:
            with anyio.fail_after(PING_TIMEOUT_SECONDS):
                await self._connection.value.client.ping()
        except Exception:
            return True
        return False

    async def close(self) -> None:
        for held in (self._legacy, self._connection):
            if held is not None:
                await held.close()


def _closed_connection_error(error: BaseException | None) -> bool:
    """Whether the error, or an error that caused it, is the MCP client's "connection closed"."""
    while error is not None:
        if isinstance(error, BaseExceptionGroup):
            return any(_closed_connection_error(inner) for inner in error.exceptions)
        if isinstance(error, MCPError) and error.code == CONNECTION_CLOSED:
            return True
        error = error.__cause__
    return False


def _unnamed_missing_file(error: BaseException | None) -> bool:
    """Whether the error, or an error that caused it, is a FileNotFoundError that does not name the file."""
    while error is not None:
        if isinstance(error, FileNotFoundError):
            return error.filename is None
        error = error.__cause__ or error.__context__
    return False


@asynccontextmanager
async def _entered(toolset: MCPToolset[Any]) -> AsyncIterator[MCPToolset[Any]]:
    async with toolset:
        yield toolset


@dataclass
class _LazyMcpToolset(WrapperToolset[Any]):
    """Serves the server's tool list from a cache and starts the server only when a tool is called."""

    bridge: McpBridge | None = None

    async def __aenter__(self) -> "_LazyMcpToolset":
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        return None

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        return self

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        return self

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        assert self.bridge is not None
        cached = _TOOL_LISTS.get(self.bridge.key)
        if cached is None or time.monotonic() - cached[0] > TOOL_LIST_TTL_SECONDS:
            await self.bridge.connect()
            cached = (time.monotonic(), await self.wrapped.get_tools(ctx))
            _TOOL_LISTS[self.bridge.key] = cached
        return {name: replace(tool, toolset=self) for name, tool in cached[1].items()}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        assert self.bridge is not None
        await self.bridge.connect()
        live = await self.wrapped.get_tools(ctx)
        if name not in live:
            raise ToolFailed(f"the MCP server no longer offers {name!r}")
        return await self.wrapped.call_tool(name, tool_args, ctx, live[name])
