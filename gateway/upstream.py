"""The MCP servers a gateway fronts (SPEC section 15): one client per tenant and installation connection in each
console process, opened on first use, shared by the tenant's gateway sessions and opened again after it fails.
A tenant's calls never reach another tenant's client: a server that keeps state keeps it per tenant.

A client lives in a task of its own: the `mcp` SDK's clients hold anyio cancel scopes, which the task that entered
them must exit, and calls come from the tasks of many MCP sessions."""

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import mcp_types as types
from django.conf import settings
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from console.connections import ConnectionSpec

logger = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 300.0
# How long a server's tool list is kept before it is asked again.
TOOL_LIST_TTL_SECONDS = 60.0
# The most pages of one list read from a server.
MOST_PAGES = 20


class UpstreamFailed(Exception):
    """The server could not be started or reached, or failed while answering."""


def _client(spec: ConnectionSpec) -> Client:
    if spec.url:
        return Client(spec.url, read_timeout_seconds=CALL_TIMEOUT_SECONDS, cache=None)
    env = {name: os.environ[name] for name in spec.env if name in os.environ}
    env.setdefault("PATH", os.environ.get("PATH", ""))
    parameters = StdioServerParameters(command=spec.command, args=list(spec.args), env=env, cwd=str(settings.BASE_DIR))
    return Client(parameters, read_timeout_seconds=CALL_TIMEOUT_SECONDS, cache=None)


class Upstream:
    """One MCP server as one tenant reaches it through its gateways."""

    def __init__(self, spec: ConnectionSpec) -> None:
        self.spec = spec
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()
        self._tools: tuple[float, list[types.Tool]] | None = None

    async def client(self) -> Client:
        if self._client is not None and self._holder is not None and not self._holder.done():
            return self._client
        async with self._opening:
            if self._client is not None and self._holder is not None and not self._holder.done():
                return self._client
            ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            self._holder = asyncio.get_running_loop().create_task(self._hold(ready), name=f"mcp-{self.spec.name}")
            try:
                self._client = await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT_SECONDS)
            except TimeoutError:
                self._holder.cancel()
                raise UpstreamFailed(f"The MCP server {self.spec.name!r} did not start in time.") from None
            except Exception as error:
                raise UpstreamFailed(f"The MCP server {self.spec.name!r} could not be started: {error}") from error
            return self._client

    async def _hold(self, ready: asyncio.Future[Client]) -> None:
        """Enter the client, hand it over, and keep it until it is closed (cancelled) or fails."""
        try:
            async with _client(self.spec) as client:
                ready.set_result(client)
                await asyncio.Event().wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error if isinstance(error, Exception) else UpstreamFailed("closed"))
            if not isinstance(error, asyncio.CancelledError):
                logger.warning("The MCP server %s closed: %s", self.spec.name, error)
        finally:
            self._client = None
            self._tools = None

    async def _ask[T](self, ask: Callable[[Client], Awaitable[T]]) -> T:
        """`ask` of the server's client; a failed connection is dropped, to be opened again on the next call."""
        client = await self.client()
        try:
            return await ask(client)
        except (OSError, EOFError, ConnectionError, asyncio.IncompleteReadError) as error:
            await self.close()
            raise UpstreamFailed(f"The MCP server {self.spec.name!r} failed: {error}") from error

    async def tools(self) -> list[types.Tool]:
        kept = self._tools
        if kept is not None and time.monotonic() - kept[0] < TOOL_LIST_TTL_SECONDS:
            return kept[1]
        listed: list[types.Tool] = await self._pages(lambda client, cursor: client.list_tools(cursor=cursor), "tools")
        self._tools = (time.monotonic(), listed)
        return listed

    async def _pages(self, ask: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
        """Every item of a paginated list (up to MOST_PAGES pages)."""
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(MOST_PAGES):
            page = await self._ask(partial(ask, cursor=cursor))
            items += getattr(page, field)
            cursor = page.next_cursor
            if not cursor:
                break
        return items

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await self._ask(lambda client: client.call_tool(name, arguments))

    async def list_resources(self) -> list[types.Resource]:
        return await self._pages(lambda client, cursor: client.list_resources(cursor=cursor), "resources")

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        return await self._pages(
            lambda client, cursor: client.list_resource_templates(cursor=cursor), "resource_templates"
        )

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        return await self._ask(lambda client: client.read_resource(uri))

    async def list_prompts(self) -> list[types.Prompt]:
        return await self._pages(lambda client, cursor: client.list_prompts(cursor=cursor), "prompts")

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        return await self._ask(lambda client: client.get_prompt(name, arguments))

    @property
    def capabilities(self) -> types.ServerCapabilities | None:
        return self._client.server_capabilities if self._client is not None else None

    async def close(self) -> None:
        holder, self._holder, self._client = self._holder, None, None
        if holder is not None and not holder.done():
            holder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await holder


# The clients of this process, by tenant and connection settings.
_UPSTREAMS: dict[tuple[str, ConnectionSpec], Upstream] = {}


def upstream(tenant_id: Any, spec: ConnectionSpec) -> Upstream:
    """The tenant's client of the server `spec` in this process (made on first use; settings changed: another)."""
    key = (str(tenant_id), spec)
    found = _UPSTREAMS.get(key)
    if found is None:
        found = _UPSTREAMS[key] = Upstream(spec)
    return found
