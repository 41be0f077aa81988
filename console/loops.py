"""Each thread's own event loop, kept between uses, for running a coroutine from synchronous code.

A new loop for each call costs more than most of what runs on it: asgiref's `async_to_sync`, called where no server
loop is above (a worker thread), starts a thread and a loop for every call (~0.4 ms of CPU). A turn (agents.turns),
and what a worker publishes once the turn's outcome is committed (agents.live), run on their thread's loop instead.

The loop is uvloop's: a turn schedules a few hundred callbacks and tasks (pydantic-ai's graph, AnyIO's task groups),
whose bookkeeping asyncio's own loop does in Python (about 2,300 Python calls of a served conversation's 36,800).
"""

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any

import uvloop


class _ThreadLoop:
    """An event loop of one thread, closed when the thread ends (its thread-local goes away)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()

    def __del__(self) -> None:
        if not self.loop.is_running():
            self.loop.close()


_THREAD = threading.local()


def run_here[T](coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` to its end on this thread's own event loop (none may be running in this thread)."""
    holder = getattr(_THREAD, "loop", None)
    if holder is None:
        holder = _THREAD.loop = _ThreadLoop()
    return holder.loop.run_until_complete(coroutine)
