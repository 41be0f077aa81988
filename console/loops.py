"""Each thread's own event loop, kept between uses, for running a coroutine from synchronous code.

A new loop for each call costs more than most of what runs on it: asgiref's `async_to_sync`, called where no server
loop is above (a worker thread), starts a thread and a loop for every call (~0.4 ms of CPU). A turn (agents.turns),
and what a worker publishes once the turn's outcome is committed (agents.live), run on their thread's loop instead.

The loop is uvloop's: a turn schedules a few hundred callbacks and tasks (pydantic-ai's graph, AnyIO's task groups),
whose bookkeeping asyncio's own loop does in Python (about 2,300 Python calls of a served conversation's 36,800).

uvloop spawns a process in one of its loops at a time, and refuses a spawn in another loop meanwhile instead of
making it wait ("Racing with another loop to spawn a process"): two turns on two threads starting a stdio MCP server
at the same moment, one of them failed `mcp_server_failed`. The loops here take turns at spawning instead.
"""

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import uvloop

# Held by the loop spawning a process; the others wait for it, polling (their thread may not block: its loop runs
# the rest of its turn meanwhile).
_SPAWNING = threading.Lock()
SPAWN_POLL_SECONDS = 0.002


@contextlib.asynccontextmanager
async def _turn_to_spawn() -> AsyncIterator[None]:
    while not _SPAWNING.acquire(blocking=False):
        await asyncio.sleep(SPAWN_POLL_SECONDS)
    try:
        yield
    finally:
        _SPAWNING.release()


class _Loop(uvloop.Loop):
    """uvloop's loop, spawning a process only while no other loop here spawns one."""

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> Any:
        async with _turn_to_spawn():
            return await super().subprocess_exec(*args, **kwargs)

    async def subprocess_shell(self, *args: Any, **kwargs: Any) -> Any:
        async with _turn_to_spawn():
            return await super().subprocess_shell(*args, **kwargs)


class _ThreadLoop:
    """An event loop of one thread, closed when the thread ends (its thread-local goes away)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop = _Loop()

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
