"""The console's ASGI application plus a bare Channels SSE stream, for bench/session_stream.py only.

`GET /bench/sse/` holds a server-sent-events response open on the group "bench-sse". `POST /bench/sse-send`
(JSON `{"offsets": [seconds, ...]}`) sends one `assistant.message_delta`-sized envelope per offset to that
group with a plain `group_send`, each at its offset from the start (the schedule a real reply kept), with
its `timestamp` set as it leaves: the floor the session stream is compared with. No offsets: the streams end.
"""

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime

from channels.generic.http import AsyncHttpConsumer
from channels.layers import get_channel_layer

from bench.served_asgi import application as console

GROUP = "bench-sse"


class BareStream(AsyncHttpConsumer):
    """Reads its own channel in the group, as a session stream does (agents.live.Subscription), until `end`."""

    async def handle(self, body: bytes) -> None:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(GROUP, channel)
        await self.send_headers(headers=[(b"Content-Type", b"text/event-stream"), (b"Cache-Control", b"no-cache")])
        await self.send_body(b": open\n\n", more_body=True)
        try:
            while (message := await layer.receive(channel)).get("frame") is not None:
                await self.send_body(message["frame"], more_body=True)
        finally:
            await layer.group_discard(GROUP, channel)
        await self.send_body(b"", more_body=False)


class BareSend(AsyncHttpConsumer):
    async def handle(self, body: bytes) -> None:
        offsets = json.loads(body or b"{}").get("offsets") or []
        run_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
        start = time.perf_counter()
        for sequence, offset in enumerate(offsets):
            wait = start + offset - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            envelope = {
                "id": str(uuid.uuid4()),
                "runId": run_id,
                "sequence": sequence,
                "timestamp": datetime.now(UTC).isoformat(),
                "parentId": None,
                "ephemeral": True,
                "type": "assistant.message_delta",
                "data": {"messageId": message_id, "deltaContent": "word "},
            }
            frame = f"event: assistant.message_delta\ndata: {json.dumps(envelope)}\n\n".encode()
            await self.channel_layer.group_send(GROUP, {"type": "bench.delta", "frame": frame})
        if not offsets:  # the end: every bare stream closes
            await self.channel_layer.group_send(GROUP, {"type": "bench.delta", "frame": None})
        await self.send_response(204, b"")


_stream = BareStream.as_asgi()
_send = BareSend.as_asgi()


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] == "http" and scope["path"] == "/bench/sse/":
        return await _stream(scope, receive, send)
    if scope["type"] == "http" and scope["path"] == "/bench/sse-send":
        return await _send(scope, receive, send)
    return await console(scope, receive, send)
