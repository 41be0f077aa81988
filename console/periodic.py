"""Periodic work in a daemon thread of the serving or worker process (deadline sweep, run keeper)."""

import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections
from django.dispatch import Signal

logger = logging.getLogger(__name__)
_STARTED: set[str] = set()
_LOCK = threading.Lock()

# Sent by `manage.py serve` before it serves: an app above console starts its own periodic work on it (slackapp's
# outbox), as console imports no app above it.
serving = Signal()
# Sent by `manage.py serve` as daphne stops (SIGTERM, SIGINT), on its event loop before the loop ends: a receiver may
# return an awaitable, its app's last writes, which the stop waits for (the gateway's passed calls not yet written).
stopping = Signal()


def start_periodic(name: str, every_seconds: float, step: Callable[[], object]) -> bool:
    """Call `step` every `every_seconds` in a daemon thread, once per process and name; a failing step
    is logged and tried again next time. False when `name` already runs here."""
    with _LOCK:
        if name in _STARTED:
            return False
        _STARTED.add(name)

    def loop() -> None:
        pause = threading.Event()
        while True:
            try:
                step()
            except Exception:
                logger.exception("%s failed; it runs again in %s s", name, every_seconds)
            finally:
                close_old_connections()
            pause.wait(every_seconds)

    threading.Thread(target=loop, name=f"airlock-{name}", daemon=True).start()
    return True
