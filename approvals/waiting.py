"""Waiting for a request's decision (SPEC section 12, `GET /api/requests/{id}?wait=N`) at the cost of a socket, not
a thread: a waiter is a channel of the channel layer in the group of its request, and every closing of a request
(an answer stored, a rule's or policy's decision, an expiry, a cancel: `approvals.push.notify_requests_closed`)
sends to that group. With the Redis layer, an answer given on one console process wakes a waiter on another.

`console.asgi.ConsoleASGIHandler` holds the long poll: it subscribes, answers the request through Django once
(which says whether to wait), waits here with no thread and no database connection, then answers with the
request's JSON the wake carried, or when its time is up the JSON `Rereads` read for it with every other poll
whose time was up then (a request too large for either: through Django again).
"""

import asyncio
import contextlib
import itertools
import json
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections

from approvals.external_wire import SHOWN, request_wire, with_receipt_ids
from approvals.models import PendingRequest
from console.loops import run_here

# The header the request route sets when the caller asked to wait and the request is not decided yet; the ASGI
# handler takes it off (a client never sees it).
WAIT_HEADER = "x-airlock-wait"
# The longest a long poll holds, in seconds.
MAX_WAIT = 60

Woken = Literal["decided", "timeout", "gone"]


def group(request_id: str) -> str:
    return f"request.{request_id}"


# A woken waiter is answered with the request's JSON the wake carries, up to this size; a larger one, or a wake
# without it, is answered by the view again.
BODY_LIMIT = 256 * 1024


def bodies(request_ids: Iterable[str]) -> dict[str, str]:
    """The JSON of each of `request_ids` as `GET /api/requests/{id}` answers it, in one query (none for an id of no
    request, or JSON over BODY_LIMIT)."""
    found = with_receipt_ids(PendingRequest.objects.select_related(*SHOWN).filter(id__in=list(request_ids)))
    rendered = ((str(pending.id), json.dumps(request_wire(pending), cls=DjangoJSONEncoder)) for pending in found)
    return {rid: body for rid, body in rendered if len(body) <= BODY_LIMIT}


def messages(request_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The wake of each of `request_ids`: its request's JSON (`bodies`), so a woken waiter costs no second
    request."""
    ids = list(request_ids)
    found = bodies(ids)
    return {rid: {"type": "request.decided", **({"body": found[rid]} if rid in found else {})} for rid in ids}


def wake(request_ids: Iterable[str]) -> None:
    """Wake the waiters of `request_ids` (from synchronous code, once the change is committed). Only requests some
    waiter listens for are read and sent: most closings have none, and reading a request for its wake is most of
    what an answer's push costs."""
    layer = get_channel_layer()
    by_group = {group(rid): rid for rid in request_ids}
    listened = [by_group[name] for name in listened_groups(list(by_group))]
    if layer is None or not listened:
        return
    sends = messages(listened)

    async def send_all() -> None:
        # One after another: gathering them would open a connection of the layer per group at once.
        for rid, message in sends.items():
            await layer.group_send(group(rid), message)

    run_here(send_all())


def listened_groups(names: list[str]) -> list[str]:
    """Of the channel layer's groups `names`, those a channel of any process is in now (none without a layer): a
    send to any other reaches nobody, so what it would carry need not be read or rendered. A channel that joins
    just after is in the place of one that joined just after the send: it reads what it shows itself."""
    layer = get_channel_layer()
    if layer is None or not names:
        return []
    groups = getattr(layer, "groups", None)
    if isinstance(groups, dict):  # the in-memory layer: this process's channels, no need to ask
        return [name for name in names if groups.get(name)]
    return list(run_here(_listened(layer, names)))


async def _listened(layer: Any, names: list[str]) -> list[str]:
    """Of `names`, the groups a channel of any process is in (the Redis layer keeps each group a sorted set; one
    that lost its last channel is empty, and one whose channels expired at worst costs a send nobody reads)."""
    return [name for name in names if await layer.connection(layer.consistent_hash(name)).zcard(layer._group_key(name))]


@dataclass(frozen=True)
class Wake:
    """How a wait ended: decided ("decided", with the request's JSON when the wake carried it), "timeout" when
    the seconds passed, "gone" when the client left first."""

    outcome: Woken
    body: bytes | None = None


@contextlib.asynccontextmanager
async def subscribed(request_id: str) -> AsyncIterator[Callable[[float, Awaitable[object]], Awaitable[Wake]]]:
    """Listen for the decision of `request_id` from here on (before reading it: an answer given in between is not
    missed). Gives `woken(seconds, gone)`, the `Wake` of whichever came first: the decision, `seconds` passing,
    or `gone` (the client's disconnect)."""
    layer = get_channel_layer()
    name = group(request_id)
    channel = await layer.new_channel("wait.") if layer is not None else None
    if layer is not None and channel is not None:
        async with _gate():
            await layer.group_add(name, channel)

    # One receive for as long as the subscription lasts: a waiter that waits again (the gateway's calls, in rounds
    # between progress notifications) must not cancel it between rounds, as channels_redis loses a message taken
    # for a receive cancelled at that moment (and, when the cancelled receive was the one reading for the process,
    # the messages it took for every other waiter: bench/gateway_waiting.py saw 3 to 8 of 200 calls not woken).
    receiving: asyncio.Future[dict[str, Any]] | None = None

    async def woken(seconds: float, gone: Awaitable[object]) -> Wake:
        nonlocal receiving
        if layer is None or channel is None:
            await asyncio.sleep(seconds)
            return Wake("timeout")
        if receiving is None:
            receiving = asyncio.ensure_future(layer.receive(channel))
        left = asyncio.ensure_future(gone)
        try:
            done, _ = await asyncio.wait({receiving, left}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if receiving in done:
            body = receiving.result().get("body")
            receiving = None
            return Wake("decided", body.encode() if isinstance(body, str) else None)
        return Wake("gone" if left in done else "timeout")

    try:
        yield woken
    finally:
        if receiving is not None:
            receiving.cancel()
        if layer is not None and channel is not None:
            # Not gated: the poll has answered, and waiting in line to leave held its response back (1,000 polls
            # woken at once: p50 1.1x the bare group_send's, 1.6x gated).
            await layer.group_discard(name, channel)


# Joins of the layer's groups that run at once on an event loop: on Redis each takes a connection of the layer's
# pool, and a thousand polls arriving together opened a thousand.
LAYER_CALLS = 8
_GATES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = weakref.WeakKeyDictionary()


def _gate() -> asyncio.Semaphore:
    """LAYER_CALLS's semaphore of the running event loop (one of each loop: a semaphore binds to the loop it first
    waits on, and tests run one loop after another)."""
    loop = asyncio.get_running_loop()
    gate = _GATES.get(loop)
    if gate is None:
        gate = _GATES[loop] = asyncio.Semaphore(LAYER_CALLS)
    return gate


# The most requests one read of `Rereads` asks for.
REREAD_BATCH = 500


def read_bodies(request_ids: list[str]) -> dict[str, str]:
    """`bodies`, the connection then given back where none is kept (PostgreSQL's pool)."""
    try:
        return bodies(request_ids)
    finally:
        close_old_connections()


class Rereads:
    """The JSON of the requests whose waiters' time is up, read together: whatever is asked while one read runs
    goes in the next (up to REREAD_BATCH a query), so a thousand polls that end at once cost a few queries on one
    thread, not a thousand passes through Django. `run(read)` runs `read` on a thread and gives its result."""

    def __init__(self, run: Callable[[Callable[[], dict[str, str]]], Awaitable[dict[str, str]]]) -> None:
        self.run = run
        self.asked: dict[str, list[asyncio.Future[bytes | None]]] = {}
        self.reading: asyncio.Task[None] | None = None

    async def body(self, request_id: str) -> bytes | None:
        """The JSON of `request_id` now (None for no such request, or one larger than BODY_LIMIT)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bytes | None] = loop.create_future()
        self.asked.setdefault(request_id, []).append(answer)
        if self.reading is None or self.reading.done() or self.reading.get_loop() is not loop:
            self.reading = loop.create_task(self._read_all())
        return await answer

    async def _read_all(self) -> None:
        while self.asked:
            ids = list(itertools.islice(self.asked, REREAD_BATCH))
            answers = {rid: self.asked.pop(rid) for rid in ids}
            try:
                found: dict[str, str] | BaseException = await self.run(partial(read_bodies, ids))
            except Exception as error:
                found = error
            for rid, futures in answers.items():
                # One whose poll was cancelled (its client left), or of another event loop (a test's, closed).
                for answer in (f for f in futures if not f.done() and not f.get_loop().is_closed()):
                    if isinstance(found, BaseException):
                        answer.set_exception(found)
                    else:
                        body = found.get(rid)
                        answer.set_result(body.encode() if body is not None else None)
