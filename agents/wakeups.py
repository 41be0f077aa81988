"""Wake-ups across processes (issue 32 item 3): on PostgreSQL a queued run wakes the idle workers of every
process at once, not at their next poll.

Every task put on a queue, and every task that ends (its lane may have room again), notifies the channel
`airlock_runs` with its queue's name: triggers on the task table do (migration agents/0015), so PostgreSQL
delivers it when the transaction commits, and no request or worker sends a statement more. Each process
that runs a `WorkerPool` holds one connection of its own (not one of the pool's) that LISTENs and wakes its
pools (`agents.seats.wake_workers`); when that connection is lost it connects again with a backoff, and
wakes the pools once it listens again, for what was queued meanwhile. The pools' poll
(`WORKER_POLL_SECONDS`) stays, as the safety net. Off with `WORKER_WAKEUPS=0`, and on SQLite: a process's
own runs still wake its pools directly.
"""

import logging
import threading
import time
from collections.abc import Callable

import psycopg
from django.db import connection

logger = logging.getLogger(__name__)

CHANNEL = "airlock_runs"
_STARTED = threading.Lock()
_listener: threading.Thread | None = None


def _connect() -> psycopg.Connection:
    """A connection of its own to the database of `default` (Django's pool lends connections only for a while)."""
    params = connection.get_connection_params()
    for django_only in ("cursor_factory", "context"):
        params.pop(django_only, None)
    return psycopg.connect(**params, autocommit=True)


def _listen(wake: Callable[[str], None]) -> None:
    backoff = 0.5
    while True:
        try:
            with _connect() as listening:
                listening.execute(f"LISTEN {CHANNEL}")
                backoff = 0.5
                wake("")  # a run queued while nobody listened
                for notice in listening.notifies():
                    wake(notice.payload)
        except Exception as error:
            logger.warning("listening for queued runs failed (%s); polling until it is back in %.1f s", error, backoff)
        time.sleep(backoff)
        backoff = min(backoff * 2, 30.0)


def start_listener(wake: Callable[[str], None]) -> None:
    """Listen for queued runs in this process (once): `wake(queue)` for each, `wake("")` after a reconnect."""
    global _listener
    with _STARTED:
        if _listener is None:
            _listener = threading.Thread(target=_listen, args=(wake,), name="airlock-wakeups", daemon=True)
            _listener.start()
