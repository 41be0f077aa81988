"""The console's ASGI application plus a bare Channels broadcast, for bench/push_latency.py only.

`/bench/ws/` joins the group "bench"; `POST /bench/broadcast?size=N` sends one message of N bytes to
it with a plain `group_send` (no rendering, no checks): the floor the inbox push is compared with.
"""

import json
import time

from channels.generic.http import AsyncHttpConsumer
from channels.generic.websocket import AsyncWebsocketConsumer

from bench.served_asgi import application as console


class BareConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        await self.channel_layer.group_add("bench", self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard("bench", self.channel_name)

    async def bench_message(self, event: dict) -> None:
        await self.send(text_data=event["text"])


class Broadcast(AsyncHttpConsumer):
    async def handle(self, body: bytes) -> None:
        size = int(self.scope["query_string"].decode().removeprefix("size=") or 1000)
        text = json.dumps({"type": "bench", "html": "x" * size, "sentAt": time.time()})
        await self.channel_layer.group_send("bench", {"type": "bench.message", "text": text})
        await self.send_response(204, b"")


_bare = BareConsumer.as_asgi()
_broadcast = Broadcast.as_asgi()


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] == "websocket" and scope["path"] == "/bench/ws/":
        return await _bare(scope, receive, send)
    if scope["type"] == "http" and scope["path"] == "/bench/broadcast":
        return await _broadcast(scope, receive, send)
    return await console(scope, receive, send)
