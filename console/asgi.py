import os
import re
from collections import deque
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

from approvals import waiting  # noqa: E402
from approvals.routing import websocket_urlpatterns  # noqa: E402
from console.origins import ConsoleOriginValidator  # noqa: E402

IDLE_REQUEST_THREADS = 32
# `GET /api/requests/{id}?wait=N` (SPEC section 12): held by `ConsoleASGIHandler._long_poll`.
LONG_POLL = re.compile(r"^/api/requests/([0-9a-fA-F-]{32,36})$")
WAIT = re.compile(rb"(?:^|&)wait=([0-9]{1,2})(?:&|$)")


class ConsoleASGIHandler(ASGIHandler):
    """Django's ASGI handler, with each request's synchronous work on one thread, entered once, and that
    thread kept for later requests.

    Django's own handler runs the middleware chain in async mode: every middleware that is not async (ours,
    WhiteNoise) is entered through a thread hop, and every MiddlewareMixin one runs its request and response
    hooks through a hop each, before the view gets one more. Here the chain and the view are the synchronous
    ones WSGI runs, entered once through `sync_to_async`.

    Django also starts a thread per request (and another to join it). Everything a thread holds went with
    it: its database connection (opened again, with SQLite's pragmas, on every request, the old one left
    for the collector) and the event loop a run turns on (agents.turns.run_here, with pydantic-ai's worker
    thread for sync tools). Here a request borrows an idle single-thread executor and gives it back once
    everything it queued has run, so a request whose client went away while its view still runs does not
    hold up the next one.
    """

    def __init__(self) -> None:
        super().__init__()
        self.idle: deque[ThreadPoolExecutor] = deque()

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        chain: Any = self._middleware_chain  # type: ignore[has-type]
        self._middleware_chain = sync_to_async(chain, thread_sensitive=True)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        poll = LONG_POLL.match(scope["path"]) if scope["method"] == "GET" else None
        wait = WAIT.search(scope.get("query_string", b"")) if poll else None
        if poll and wait and 0 < int(wait.group(1)) <= waiting.MAX_WAIT:
            await self._long_poll(scope, receive, send, poll.group(1), int(wait.group(1)))
        else:
            await self._serve(scope, receive, send)

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            executor = self.idle.pop()
        except IndexError:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            executor.submit(lambda: None).add_done_callback(lambda _: self._give_back(executor))

    async def _long_poll(self, scope: dict[str, Any], receive: Any, send: Any, request_id: str, seconds: int) -> None:
        """A request's JSON once it is decided or `seconds` passed: Django answers once (on a borrowed thread, given
        back); while that answer says to wait, nothing but a channel of the layer is held until the decision's
        wake, the time, or the client's disconnect; then the request's JSON the wake carried goes out (Django
        answers again after a timeout, or a wake without it)."""
        async with waiting.subscribed(request_id) as woken:
            first: list[dict[str, Any]] = []

            async def keep(message: dict[str, Any]) -> None:
                first.append(message)

            await self._serve(scope, receive, keep)
            start = first[0] if first else {}
            headers = start.get("headers", [])
            told = waiting.WAIT_HEADER.encode()
            if not any(name.lower() == told for name, _ in headers):
                for message in first:
                    await send(message)
                return
            wake = await woken(seconds, receive())
            if wake.outcome == "gone":
                return
            if wake.body is not None:
                # The request's JSON as the view answers it, with the first answer's status and headers.
                dropped = {told, b"content-length", b"content-encoding"}
                kept = [(name, value) for name, value in headers if name.lower() not in dropped]
                length = (b"content-length", str(len(wake.body)).encode())
                await send({**start, "headers": [*kept, length]})
                await send({"type": "http.response.body", "body": wake.body})
                return
        asked = False

        async def again() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return await receive()

        query = WAIT.sub(b"&", scope.get("query_string", b"")).strip(b"&")
        await self._serve({**scope, "query_string": query}, again, send)

    def _give_back(self, executor: ThreadPoolExecutor) -> None:
        if len(self.idle) < IDLE_REQUEST_THREADS:
            self.idle.append(executor)
        else:
            executor.shutdown(wait=False)


application = ProtocolTypeRouter(
    {
        "http": ConsoleASGIHandler(),
        "websocket": ConsoleOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
