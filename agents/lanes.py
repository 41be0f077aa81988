"""Lanes: named queues of runs (`lane` in a run request), each with its own concurrency limit.

Kept free of Django imports: settings read the limits through `parse_limits`."""

import hashlib
import re

LANE_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
DEFAULT_LANE = "default"
_LANE = re.compile(LANE_PATTERN)
# The tasks backend keeps a queue name in 32 characters; a longer lane is shortened with a hash.
_QUEUE_NAME_LENGTH = 32


def queue_name(lane: str) -> str:
    """The task queue that carries `lane`'s runs."""
    if len(lane) <= _QUEUE_NAME_LENGTH:
        return lane
    digest = hashlib.sha256(lane.encode()).hexdigest()[:8]
    return f"{lane[: _QUEUE_NAME_LENGTH - 9]}~{digest}"


def parse_limits(text: str) -> dict[str, int]:
    """`"default=4,bulk=1"` -> {"default": 4, "bulk": 1}; raises ValueError naming the bad item."""
    limits: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        lane, separator, number = item.partition("=")
        lane = lane.strip()
        if not separator or not _LANE.match(lane) or not number.strip().isdigit() or int(number) < 1:
            raise ValueError(f"{item!r} is not LANE=LIMIT (a lane name, a limit of at least 1)")
        limits[lane] = int(number)
    return limits
