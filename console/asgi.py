import asyncio
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.asgi import get_asgi_application
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
# Django must be set up before anything imports models (the routing does).
get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from approvals import waiting  # noqa: E402
from approvals.routing import websocket_urlpatterns  # noqa: E402
from console import metrics  # noqa: E402
from console.api import problem  # noqa: E402
from console.origins import ConsoleOriginValidator  # noqa: E402
from console.telemetry import CallerTrace, configure  # noqa: E402
from gateway.server import GatewayApp  # noqa: E402
from protocols.a2a_app import PREFIX as A2A_PREFIX  # noqa: E402
from protocols.a2a_app import A2AApp  # noqa: E402

IDLE_REQUEST_THREADS = 32
# The threads every long poll's reads share, however many polls there are: a read waits its turn for one.
LONG_POLL_THREADS = 2
# What a poll past LONG_POLLS_PER_PROCESS is told: a held poll ends within MAX_WAIT seconds, most much sooner.
LONG_POLL_RETRY_AFTER_SECONDS = 5
# `GET /api/requests/{id}?wait=N` (SPEC section 12): held by `ConsoleASGIHandler._long_poll`.
LONG_POLL = re.compile(r"^/api/requests/([0-9a-fA-F-]{32,36})$")
# MCP gateways (SPEC section 15): the `mcp` SDK's server serves them, not Django (gateway/server.py).
GATEWAY_PREFIX = "/mcp/"
# A `wait` of the query, however written: how long to hold is the view's reading of it (its `WAIT_HEADER`), so that
# a `wait` given twice or with a space is held as the view read it. A query whose every `wait` is 0 is no poll.
WAIT = re.compile(rb"(?:^|&)wait=[^&]*")
HOLDS = re.compile(rb"(?:^|&)wait=(?!0*(?:&|$))")


class Executors:
    """Single-thread executors lent to requests, one request at a time each, and given back once everything the
    request queued on it has run. `most`: how many there may be (a borrower past it waits for one given back);
    None: one more whenever none is idle, of which `kept` stay once idle."""

    def __init__(self, name: str, most: int | None = None, kept: int = 0) -> None:
        self.name, self.most, self.kept = name, most, kept if most is None else most
        self.made = 0
        self.idle: deque[ThreadPoolExecutor] = deque()
        self.waiting: deque[asyncio.Future[ThreadPoolExecutor]] = deque()
        # Given back from the executor's own thread.
        self.lock = threading.Lock()

    async def borrow(self) -> ThreadPoolExecutor:
        with self.lock:
            if self.idle:
                return self.idle.pop()
            if self.most is None or self.made < self.most:
                self.made += 1
                return ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
            turn: asyncio.Future[ThreadPoolExecutor] = asyncio.get_running_loop().create_future()
            self.waiting.append(turn)
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed over just as the borrower was cancelled
                self.give_back(turn.result())
            raise

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        """Hand `executor` to the borrower waiting longest, else keep it idle (or let it go); from any thread."""
        with self.lock:
            while self.waiting:
                turn = self.waiting.popleft()
                loop = turn.get_loop()
                if not turn.done() and not loop.is_closed():
                    loop.call_soon_threadsafe(self._hand, turn, executor)
                    return
            if len(self.idle) < self.kept:
                self.idle.append(executor)
                return
            self.made -= 1
        executor.shutdown(wait=False)

    def _hand(self, turn: asyncio.Future[ThreadPoolExecutor], executor: ThreadPoolExecutor) -> None:
        if turn.done():  # its borrower was cancelled meanwhile
            self.give_back(executor)
        else:
            turn.set_result(executor)


class ConsoleASGIHandler(ASGIHandler):
    """Django's ASGI handler, with each request's synchronous work on one thread, entered once, and that
    thread kept for later requests.

    Django's own handler runs the middleware chain in async mode: every middleware that is not async (ours,
    WhiteNoise) is entered through a thread hop, and every MiddlewareMixin one runs its request and response
    hooks through a hop each, before the view gets one more. Here the chain and the view are the synchronous
    ones WSGI runs, entered once through `sync_to_async`.

    Django also starts a thread per request (and another to join it). Everything a thread holds went with
    it: its database connection (opened again, with SQLite's pragmas, on every request, the old one left
    for the collector) and the event loop a run turns on (console.loops.run_here). Here a request borrows an
    idle single-thread executor and gives it back once everything it queued has run, so a request whose client
    went away while its view still runs does not hold up the next one.

    Long polls (`_long_poll`) read on LONG_POLL_THREADS executors of their own, so a thousand of them arriving
    or ending at once cost no more threads than a few, and the rest of the console keeps its own.
    """

    def __init__(self) -> None:
        super().__init__()
        self.requests = Executors("request", kept=IDLE_REQUEST_THREADS)
        self.poll_reads = Executors("long-poll", most=LONG_POLL_THREADS)
        self.rereads = waiting.Rereads(self._read_for_polls)
        self.polls = 0
        self.gateway = GatewayApp()
        # A2A (SPEC section 16): the a2a-sdk's routes serve hosted agents' tasks and cards (protocols/a2a_app.py).
        self.a2a = A2AApp()

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain: Any = self._middleware_chain  # type: ignore[has-type]
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        with CallerTrace(scope):  # a caller's W3C traceparent, while tracing (SPEC section 18)
            await self._route(scope, receive, send)

    async def _route(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"].startswith(GATEWAY_PREFIX):
            await self.gateway(scope, receive, send)
            return
        if scope["path"].startswith(A2A_PREFIX):
            await self.a2a(scope, receive, send)
            return
        poll = LONG_POLL.match(scope["path"]) if scope["method"] == "GET" else None
        if poll and HOLDS.search(scope.get("query_string", b"")):
            await self._long_poll(scope, receive, send, poll.group(1))
        else:
            await self._serve(scope, receive, send, self.requests)

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any, executors: Executors) -> None:
        executor = await executors.borrow()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            executor.submit(lambda: None).add_done_callback(lambda _: executors.give_back(executor))

    async def _read_for_polls[T](self, read: Callable[[], T]) -> T:
        executor = await self.poll_reads.borrow()
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, read)
        finally:
            self.poll_reads.give_back(executor)

    async def _long_poll(self, scope: dict[str, Any], receive: Any, send: Any, request_id: str) -> None:
        """Hold the poll, unless this process holds LONG_POLLS_PER_PROCESS already: then 429 `too_many_long_polls`
        (a poll costs a socket and a channel of the layer for as long as it lasts, the process's memory)."""
        if self.polls >= settings.LONG_POLLS_PER_PROCESS:
            detail = (
                f"This console process holds {settings.LONG_POLLS_PER_PROCESS} long polls already, the most it "
                f"may; try again in {LONG_POLL_RETRY_AFTER_SECONDS} seconds, or read without wait."
            )
            refused = problem(429, "too_many_long_polls", detail)
            refused["Retry-After"] = str(LONG_POLL_RETRY_AFTER_SECONDS)
            refused["Content-Length"] = str(len(refused.content))
            await self.send_response(refused, send)
            return
        self.polls += 1
        try:
            with metrics.long_poll():
                await self._hold(scope, receive, send, request_id, time.monotonic())
        finally:
            self.polls -= 1

    async def _hold(self, scope: dict[str, Any], receive: Any, send: Any, request_id: str, arrived: float) -> None:
        """A request's JSON once it is decided or the seconds its view read from `wait` passed since it `arrived`
        (time.monotonic()): Django answers once, on a thread of the long polls' (a turn waited for one included);
        while that answer says to wait (`WAIT_HEADER`), nothing but a channel of the layer is held until the
        decision's wake, the deadline, or the client's disconnect; then the request's JSON the wake carried goes
        out, or at the deadline the JSON read with the other polls' that ended then (`waiting.Rereads`). Only
        a request whose JSON is larger than a wake carries is answered by Django again."""
        async with waiting.subscribed(request_id) as woken:
            first: list[dict[str, Any]] = []

            async def keep(message: dict[str, Any]) -> None:
                first.append(message)

            await self._serve(scope, receive, keep, self.poll_reads)
            start = first[0] if first else {}
            headers = start.get("headers", [])
            told = waiting.WAIT_HEADER.encode()
            seconds = next((int(value) for name, value in headers if name.lower() == told), 0)
            left = arrived + seconds - time.monotonic()
            if not seconds or left <= 0:
                # Decided already, refused, or its time went waiting for a thread: this answer is the poll's.
                kept = [(name, value) for name, value in headers if name.lower() != told]
                for message in first:
                    await send({**message, "headers": kept} if message is start else message)
                return
            wake = await woken(left, receive())
            if wake.outcome == "gone":
                return
            body = wake.body if wake.outcome == "decided" else await self.rereads.body(request_id)
            if body is not None:
                # The request's JSON as the view answers it, with the first answer's status and headers; sent
                # before the channel leaves its group (a thousand polls ending at once queue to leave).
                dropped = {told, b"content-length", b"content-encoding"}
                kept = [(name, value) for name, value in headers if name.lower() not in dropped]
                length = (b"content-length", str(len(body)).encode())
                await send({**start, "headers": [*kept, length]})
                await send({"type": "http.response.body", "body": body})
                return
        asked = False

        async def again() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return await receive()

        query = WAIT.sub(b"", scope.get("query_string", b"")).strip(b"&")
        await self._serve({**scope, "query_string": query}, again, send, self.poll_reads)


configure()  # traces, when the OTEL_* variables ask for them (SPEC section 18)
application = ProtocolTypeRouter(
    {
        "http": ConsoleASGIHandler(),
        "websocket": ConsoleOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
