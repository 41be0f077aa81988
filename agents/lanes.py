"""Lanes: named queues of runs (`lane` in a run request), each with its own concurrency limit. The name
pattern and the parsing of RUN_LANES live with the settings (`console/env.py`), which read them before
any app is loaded."""

import hashlib

from console.env import LANE_PATTERN

__all__ = ["DEFAULT_LANE", "LANE_PATTERN", "queue_name"]

DEFAULT_LANE = "default"
# The tasks backend keeps a queue name in 32 characters; a longer lane is shortened with a hash.
_QUEUE_NAME_LENGTH = 32


def queue_name(lane: str) -> str:
    """The task queue that carries `lane`'s runs."""
    if len(lane) <= _QUEUE_NAME_LENGTH:
        return lane
    digest = hashlib.sha256(lane.encode()).hexdigest()[:8]
    return f"{lane[: _QUEUE_NAME_LENGTH - 9]}~{digest}"
