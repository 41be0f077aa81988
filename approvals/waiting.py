"""Waiting for a request's decision (SPEC section 12, `GET /api/requests/{id}?wait=N`) at the cost of a socket, not
a thread: a waiter is a channel of the channel layer in the group of its request, and every closing of a request
(an answer stored, a rule's or policy's decision, an expiry, a cancel: `approvals.push.notify_requests_closed`)
sends to that group. With the Redis layer, an answer given on one console process wakes a waiter on another.

`console.asgi.ConsoleASGIHandler` holds the long poll: it subscribes, answers the request through Django once
(which says whether to wait), waits here with no thread and no database connection, then answers it again.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Literal

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

# The header the request route sets when the caller asked to wait and the request is not decided yet; the ASGI
# handler takes it off (a client never sees it).
WAIT_HEADER = "x-airlock-wait"
# The longest a long poll holds, in seconds.
MAX_WAIT = 60

Woken = Literal["decided", "timeout", "gone"]


def group(request_id: str) -> str:
    return f"request.{request_id}"


def wake(request_ids: Iterable[str]) -> None:
    """Wake the waiters of `request_ids` (from synchronous code, once the change is committed)."""
    layer = get_channel_layer()
    ids = list(request_ids)
    if layer is None or not ids:
        return

    async def send_all() -> None:
        await asyncio.gather(*(layer.group_send(group(rid), {"type": "request.decided"}) for rid in ids))

    async_to_sync(send_all)()


@contextlib.asynccontextmanager
async def subscribed(request_id: str) -> AsyncIterator[Callable[[float, Awaitable[object]], Awaitable[Woken]]]:
    """Listen for the decision of `request_id` from here on (before reading it: an answer given in between is not
    missed). Gives `woken(seconds, gone)`: "decided" when woken within `seconds`, "timeout" when they passed,
    "gone" when `gone` (the client's disconnect) came first."""
    layer = get_channel_layer()
    name = group(request_id)
    channel = await layer.new_channel("wait.") if layer is not None else None
    if layer is not None and channel is not None:
        await layer.group_add(name, channel)

    async def woken(seconds: float, gone: Awaitable[object]) -> Woken:
        if layer is None or channel is None:
            await asyncio.sleep(seconds)
            return "timeout"
        message = asyncio.ensure_future(layer.receive(channel))
        left = asyncio.ensure_future(gone)
        try:
            done, _ = await asyncio.wait({message, left}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            message.cancel()
            left.cancel()
        if message in done:
            return "decided"
        return "gone" if left in done else "timeout"

    try:
        yield woken
    finally:
        if layer is not None and channel is not None:
            await layer.group_discard(name, channel)
