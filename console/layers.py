"""Channels' in-memory layer, safe to send to from any thread of the process.

The in-memory layer keeps an `asyncio.Queue` per channel, owned by the event loop its consumers wait on
(daphne's). A send from another thread — a worker thread of `manage.py serve` ending a queued turn (its pushes
and session events leave from the thread's own loop, console.loops) — put the message in that queue
from a foreign loop: the waiting consumer's future was resolved without waking daphne's loop, and the push went
out only when something else woke it (~0.65 s on `make run`). Here a send or group send made on any other loop
is handed to the loop the consumers receive on. The Redis layer needs none of this (each loop has its own
connections).
"""

import asyncio
from collections.abc import Coroutine
from typing import Any

from channels import layers

# A send handed to the consumers' loop that is not done by then is dropped, as a full channel's is (a push is
# best effort; a stopping server may never run it).
HAND_OVER_SECONDS = 5


class InMemoryChannelLayer(layers.InMemoryChannelLayer):
    # The loop the consumers last received on: the server's.
    home: asyncio.AbstractEventLoop | None = None

    async def receive(self, channel: str) -> Any:
        self.home = asyncio.get_running_loop()
        return await super().receive(channel)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        await self._on_consumers_loop(super().send(channel, message))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        if not self.groups.get(group):  # nobody listens: no hop to the consumers' loop (a turn's events, most pushes)
            return
        await self._on_consumers_loop(super().group_send(group, message))

    async def _on_consumers_loop(self, operation: Coroutine[Any, Any, None]) -> None:
        """Run `operation` here when this is the consumers' loop (or none runs), else hand it to theirs."""
        home = self.home
        if home is None or home.is_closed() or not home.is_running() or home is asyncio.get_running_loop():
            await operation
            return
        handed = asyncio.run_coroutine_threadsafe(operation, home)
        try:
            await asyncio.wait_for(asyncio.wrap_future(handed), HAND_OVER_SECONDS)
        except TimeoutError:
            handed.cancel()
