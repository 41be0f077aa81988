"""Times as the console's pages show them."""

from datetime import datetime


def duration(start: datetime, end: datetime | None) -> str:
    """The time from `start` to `end` in its largest sensible units (`850 ms`, `4.2 s`, `3 min 5 s`,
    `2 h 10 min`); empty while `end` is None."""
    if end is None:
        return ""
    seconds = max((end - start).total_seconds(), 0.0)
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
