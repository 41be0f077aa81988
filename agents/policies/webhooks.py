"""The `airlock.webhook` kind: a signed POST of the context to a policy webhook connection, its answer the verdict."""

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx2

from console.connections import ConnectionSpec


def webhook_config(config: Mapping[str, Any]) -> tuple[str, float]:
    connection, timeout_ms = config.get("connection"), config.get("timeoutMs", 2000)
    if not isinstance(connection, str) or not connection:
        raise ValueError("config.connection must name a policy webhook connection")
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 1 <= timeout_ms <= 30_000:
        raise ValueError("config.timeoutMs must be a whole number of milliseconds from 1 to 30000")
    extra = set(config) - {"connection", "timeoutMs"}
    if extra:
        raise ValueError(f"config has unknown fields: {', '.join(sorted(extra))}")
    return connection, timeout_ms / 1000


# A verdict is a few hundred bytes; a receiver's answer over this is refused, read no further (issue 26: a 200 MB
# `reason` took the process from 0.4 to 2.8 GB, and its run's outcome could not be stored).
VERDICT_LIMIT = 64 * 1024


class VerdictTooLarge(Exception):
    """A webhook's answer over VERDICT_LIMIT bytes. The emitter makes any exception of an interceptor a
    fail-closed deny, `host_error:interceptor_failed` with the exception's name as its message: the standard's
    reserved reasons (agent-hooks section 11) have none for this, and an interceptor cannot add one."""


async def _verdict_body(response: httpx2.Response) -> bytes:
    """The body of `response`, as sent (never decompressed: a small compressed body can inflate to gigabytes),
    or VerdictTooLarge as soon as it is known to be over VERDICT_LIMIT."""
    if int(response.headers.get("Content-Length") or 0) > VERDICT_LIMIT:
        raise VerdictTooLarge
    parts, size = [], 0
    async for part in response.aiter_raw():
        size += len(part)
        if size > VERDICT_LIMIT:
            raise VerdictTooLarge
        parts.append(part)
    return b"".join(parts)


class WebhookBinding:
    """An `airlock.webhook` binding: POSTs the context to the connection's URL, signed with its secret, and
    reads the verdict; a timeout, a non-2xx answer, an answer over VERDICT_LIMIT bytes or a body that is not a
    verdict fails closed."""

    def __init__(self, spec: ConnectionSpec, timeout: float, name: str) -> None:
        self.spec, self.timeout, self.name = spec, timeout, name

    async def intercept(self, context: dict[str, Any]) -> Any:
        body = json.dumps(context, separators=(",", ":")).encode()
        # The body is read raw (_verdict_body): a compressed one would not be JSON.
        headers = {**self.spec.webhook_headers(body), "Accept-Encoding": "identity"}
        # Leaving the blocks unread closes the connection: the rest of an oversized answer is never read.
        async with (
            asyncio.timeout(self.timeout),
            httpx2.AsyncClient() as client,
            client.stream("POST", self.spec.url, content=body, headers=headers) as response,
        ):
            response.raise_for_status()
            answer = await _verdict_body(response)
        return json.loads(answer)


def webhook_binding(connections: Mapping[str, ConnectionSpec] | None) -> Callable[[Mapping[str, Any], Any], Any]:
    """The `airlock.webhook` kind for a turn with these `connections`; None checks the config's shape only (on
    save the connection is checked with the definition's other connections, as a grant can change)."""

    def build(config: Mapping[str, Any], binding: Any) -> Any:
        name, timeout = webhook_config(config)
        spec = connections.get(name) if connections is not None else ConnectionSpec(name, "webhook")
        if spec is None or spec.kind != "webhook":
            raise ValueError(f"no policy webhook connection named {name!r} is granted to this tenant")
        return WebhookBinding(spec, timeout, binding.id)

    return build
