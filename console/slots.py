"""Caps on the long-lived connections one user holds open in this process: session streams
(`agents.api.stream_routes`) and console websockets (`approvals.consumers`). Each open connection costs the process
for as long as it lasts, so without a cap one reader could hold enough of them to slow every tenant down.

The count is this process's only: behind several daphnes a user may hold the cap in each.
"""

import threading
import weakref
from collections import Counter

from django.conf import settings


class Slots:
    """How many connections of one kind each user holds open here, at most the setting `setting` (read on every
    `take`, so a changed setting applies from the next connection on)."""

    def __init__(self, setting: str) -> None:
        self.setting = setting
        self.held: Counter[int] = Counter()
        # Taken in a request's thread, given back on the event loop or wherever the collector runs.
        self._lock = threading.Lock()

    def take(self, user_id: int) -> "Slot | None":
        """A slot for one more connection of `user_id`, or None when they hold the cap already."""
        with self._lock:
            if self.held[user_id] >= getattr(settings, self.setting):
                return None
            self.held[user_id] += 1
        return Slot(self, user_id)

    def _give_back(self, user_id: int) -> None:
        with self._lock:
            self.held[user_id] -= 1
            if self.held[user_id] <= 0:
                del self.held[user_id]


class Slot:
    """One open connection's place. `release()` gives it back, once however often it is called; so does the slot's
    being dropped unreleased (a response whose client left before it was sent, a consumer that crashed), so no way
    a connection ends can keep its place taken."""

    def __init__(self, slots: Slots, user_id: int) -> None:
        self.release = weakref.finalize(self, slots._give_back, user_id)
