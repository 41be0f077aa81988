"""What the MCP gateway writes off its event loop: a call's database work on a thread of the loop's pool
(`on_thread`), and the calls it passed through (approval `never`), written in its quiet moments (`Recorder`)."""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.dispatch import receiver

from agents import live
from approvals.actions.passed_calls import PassedCall, record_passed_calls
from console.periodic import stopping

logger = logging.getLogger(__name__)


async def on_thread[T](work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` on a thread of the loop's pool, its database connection given back after (a waiting call
    holds none)."""

    def run() -> T:
        try:
            return work(*args)
        finally:
            close_old_connections()

    return await sync_to_async(run, thread_sensitive=False)()


class Recorder:
    """Writes the passed calls of this process's gateways (`record_passed_calls`), many in one transaction, in the
    gateway's quiet moments: a write holds the interpreter for milliseconds (about 0.5 ms of CPU a call), which a
    call passing meanwhile would wait for. So the calls gathered are written once none has passed for RECORD_QUIET
    and the first has waited RECORD_GATHER, or, while calls keep coming, once it has waited RECORD_LATEST."""

    def __init__(self) -> None:
        self.waiting: list[PassedCall] = []
        self.writing: asyncio.Task[None] | None = None
        self.running = 0  # calls passing upstream now
        self.last_passed = 0.0  # when the last one came back (the loop's clock)
        self.hurry = False  # write what is gathered now (`drained`)

    @contextlib.contextmanager
    def passing(self) -> Iterator[None]:
        """Around a call passing upstream: the gateway is not quiet meanwhile."""
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self.last_passed = asyncio.get_running_loop().time()

    def add(self, passed: PassedCall) -> None:
        self.waiting.append(passed)
        loop = asyncio.get_running_loop()
        if self.writing is None or self.writing.done() or self.writing.get_loop() is not loop:
            self.writing = loop.create_task(self._write_all())

    async def _write_all(self) -> None:
        clock = asyncio.get_running_loop().time
        gathering = clock()
        while not self.hurry:
            await asyncio.sleep(RECORD_QUIET)
            waited = clock() - gathering
            quiet = not self.running and clock() - self.last_passed >= RECORD_QUIET
            if waited >= RECORD_LATEST or (quiet and waited >= RECORD_GATHER):
                break
        while self.waiting:
            batch, self.waiting = self.waiting[:RECORD_BATCH], self.waiting[RECORD_BATCH:]
            try:
                written = await on_thread(record_passed_calls, batch)
            except Exception:
                logger.exception("The gateway could not record %d calls", len(batch))
                continue
            for session_pk in written:
                with contextlib.suppress(Exception):  # the streams' own recheck finds the runs all the same
                    await live.wake_session(session_pk)

    async def drained(self) -> None:
        """Once every call recorded so far is written, without waiting for a quiet moment (tests, and a process
        about to stop)."""
        self.hurry = True
        try:
            while self.writing is not None and not self.writing.done():
                await asyncio.shield(self.writing)
        finally:
            self.hurry = False


RECORDER = Recorder()
# The most passed calls written in one transaction. How long the gateway must have passed no call before a write
# (a client calling tools one after another leaves a millisecond or two between calls), how long the first call
# waits for others to join it at least (a slow client's calls share a write too) and at most (calls never pausing).
# bench/gateway_proxy.py (blocks of 40 calls alternating with mcp-proxy's): written a second after the first call
# whatever came, the calls that met a write made the gateway's p95 1.8-2.3x mcp-proxy's; written in quiet moments,
# 1.05-1.19x. A client calling without a pause for longer than RECORD_LATEST still meets the write (p95 2x for 400
# calls back to back).
RECORD_BATCH = 200
RECORD_QUIET = 0.05
RECORD_GATHER = 0.5
RECORD_LATEST = 2.0


@receiver(stopping)
def _write_before_stopping(sender: Any, **kwargs: Any) -> Any:
    """`manage.py serve` stopping waits for the passed calls still gathering to be written."""
    return RECORDER.drained()
