"""Turns held by this process: who holds them (`PROCESS_ID`, leases) and
the keeper's part for them (renew their leases, write their events as they come, pass on cancels asked
in another process). Reclaiming runs other processes lost is the keeper's (agents/keeper.py)."""

import asyncio
import os
import socket
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.events import EventLog
from agents.models import Run, RunStatus

PROCESS_ID = f"{socket.gethostname()[:24]}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
"""Who holds the turns run by this process (worker threads add their number)."""


def lease(worker_id: str) -> dict[str, Any]:
    return {"worker_id": worker_id, "lease_expires_at": timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)}


def hold_here() -> dict[str, Any]:
    """A synchronous turn of this process: leased while a keeper renews leases here (`serve`,
    `run_worker`), so its runs are reclaimed should the process die; without a keeper (another ASGI
    server, tests) it is not leased, as nothing would renew the lease of a long turn."""
    return lease(PROCESS_ID) if _KEEPER.is_set() else {"worker_id": PROCESS_ID}


@dataclass
class _Held:
    loop: asyncio.AbstractEventLoop
    task: "asyncio.Task[Any]"
    log: EventLog


_HELD: dict[uuid.UUID, _Held] = {}
_HELD_LOCK = threading.Lock()
_KEEPER = threading.Event()


@asynccontextmanager
async def holding(run: Run, log: EventLog) -> AsyncIterator[None]:
    """The turn running in this block is one this process holds: cancellable from here, kept alive by
    the keeper (and its events written as they come while one runs). When the block ends, every event the
    turn reported has reached the session's streams."""
    task = asyncio.current_task()
    assert task is not None
    log.live = _KEEPER.is_set()
    with _HELD_LOCK:
        _HELD[run.id] = _Held(asyncio.get_running_loop(), task, log)
    try:
        yield
    finally:
        with _HELD_LOCK:
            _HELD.pop(run.id, None)
        await log.sent_live()


def cancel_here(run_id: uuid.UUID) -> bool:
    """Cancel the turn of `run_id` when this process holds it; False when it does not."""
    with _HELD_LOCK:
        held = _HELD.get(run_id)
    if held is None:
        return False
    held.loop.call_soon_threadsafe(held.task.cancel)
    return True


def keep_held() -> None:
    """The keeper's round for the turns held here: renew leases, write events, pass on cancels."""
    with _HELD_LOCK:
        held = dict(_HELD)
    if not held:
        return
    Run.objects.filter(id__in=held, status=RunStatus.RUNNING).update(
        lease_expires_at=timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)
    )
    for entry in held.values():
        entry.log.flush()
    for run_id in Run.objects.filter(id__in=held, cancel_requested=True).values_list("id", flat=True):
        cancel_here(run_id)


def keeper_started() -> None:
    """A keeper renews leases in this process from now on: synchronous turns get leases too."""
    _KEEPER.set()
