"""The in-memory channel layer (console/layers.py): a send from a thread that is not the consumers' reaches the
consumer at once, as a worker thread of `manage.py serve` sends a queued turn's pushes and session events."""

import asyncio
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync

from console.layers import InMemoryChannelLayer


def test_a_group_send_from_another_thread_wakes_the_loop_its_consumer_waits_on():
    layer = InMemoryChannelLayer()
    loop = asyncio.new_event_loop()
    server = threading.Thread(target=loop.run_forever)
    server.start()
    joined = threading.Event()

    async def consumer() -> Any:
        channel = await layer.new_channel()
        await layer.group_add("tenant.1", channel)
        receiving = asyncio.ensure_future(layer.receive(channel))
        await asyncio.sleep(0)  # the receive waits on this loop, which has nothing else to do
        joined.set()
        return await receiving

    try:
        received = asyncio.run_coroutine_threadsafe(consumer(), loop)
        assert joined.wait(5)
        # From this thread, as a worker thread pushes (async_to_sync runs it on a loop of its own).
        async_to_sync(layer.group_send)("tenant.1", {"type": "console.push", "text": "opened"})

        # The stock layer resolved the consumer's wait from this thread without waking its loop: nothing came.
        assert received.result(timeout=5) == {"type": "console.push", "text": "opened"}
    finally:
        loop.call_soon_threadsafe(loop.stop)
        server.join(5)
        loop.close()


def test_a_send_on_the_consumers_loop_or_with_no_consumer_yet_goes_as_before():
    layer = InMemoryChannelLayer()

    async def here() -> Any:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "x"})  # no consumer has received yet: no loop to hand it to
        return await layer.receive(channel)

    assert asyncio.run(here()) == {"type": "x"}


def test_a_group_send_nobody_listens_to_does_not_wait_on_the_consumers_loop():
    layer = InMemoryChannelLayer()
    loop = asyncio.new_event_loop()
    server = threading.Thread(target=loop.run_forever)
    server.start()

    async def consumer() -> Any:
        channel = await layer.new_channel()
        await layer.group_add("session.1", channel)
        return await layer.receive(channel)  # the consumers' loop is now the layer's home

    try:
        received = asyncio.run_coroutine_threadsafe(consumer(), loop)
        while layer.home is not loop:
            time.sleep(0.01)
        loop.call_soon_threadsafe(time.sleep, 2)  # the consumers' loop busy for a while
        began = time.monotonic()
        async_to_sync(layer.group_send)("session.2", {"type": "session.events", "events": []})
        assert time.monotonic() - began < 1  # returned at once: nothing to hand over

        async_to_sync(layer.group_send)("session.1", {"type": "session.events", "events": []})
        assert time.monotonic() - began >= 1.5  # a listened group's send waits for the loop, as before
        assert received.result(timeout=5) == {"type": "session.events", "events": []}
    finally:
        loop.call_soon_threadsafe(loop.stop)
        server.join(5)
        loop.close()
