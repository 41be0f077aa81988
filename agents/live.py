"""A session's events, live: every event a turn reports (deltas included) is published to its session's channel
group as it happens, and each session stream (`agents.api.stream_routes`, `GET /api/sessions/{id}/events`) reads that
group, with the database as where it catches up and resumes. The process that runs the turn publishes; the one
that serves the stream may be another (the Redis channel layer carries it across).

A message carries events in their order, each envelope JSON-encoded once by the publisher (`Published`),
not once per reader, and the message's events as one JSON text; stored events recorded by synchronous code before
the turn's first live event (a run's start) go out with it, those recorded after its last (a run's end) once they
are committed (`agents.events.EventLog.publish_rest`).

Past where it starts or resumes, a stream reads the database only when something tells it to: a live event it
cannot place yet, or a wake (`wake_now`, a message without events) sent once a write that was not published is
committed (stored events synchronous code recorded and flushed, such as a cancel or a closed request; a
session's deletion). Its slow look of its own (`agents.api.stream_routes.SESSION_RECHECK_SECONDS`) is only a safety net
for a message lost.
"""

import asyncio
import json
from typing import Any, NamedTuple

from channels.layers import get_channel_layer

from agents.payloads import is_stored
from console.loops import run_here


class Published(NamedTuple):
    """An event as a session stream needs it: where it goes, and its envelope encoded once for every reader."""

    run_id: str
    sequence: int
    # Not stored (a delta, progress, the stream's own idle and title): it has no place of its own in the session.
    ephemeral: bool
    type: str
    id: str
    timestamp: str
    encoded: str
    # On a run's first event: the run before it in its session and this run's creation time (ISO 8601), so that a
    # stream standing at the end of that run's turn places this one without reading the database.
    follows: tuple[str, str] | None = None

    @classmethod
    def of(cls, envelope: dict[str, Any], follows: tuple[str, str] | None = None) -> "Published":
        stored = is_stored(envelope)
        return cls(
            envelope["runId"],
            envelope["sequence"],
            not stored,
            envelope["type"],
            envelope["id"],
            envelope["timestamp"],
            json.dumps(envelope),
            follows if stored and envelope["sequence"] == 1 else None,
        )


def session_group(session_pk: int) -> str:
    return f"session.{session_pk}"


async def publish(session_pk: int, envelopes: list[dict[str, Any]], follows: tuple[str, str] | None = None) -> None:
    """Send `envelopes` (events of one run) to the session's streams; `follows`: see `Published.follows`."""
    layer = get_channel_layer()
    if layer is not None and envelopes:
        # One text however many events: a layer copies (in memory) or packs (Redis) each message for each stream, and
        # a text costs that once where a list of events costs it for every value of every event.
        events = json.dumps([Published.of(envelope, follows) for envelope in envelopes])
        await layer.group_send(session_group(session_pk), {"type": "session.events", "events": events})


def publish_now(session_pk: int, envelopes: list[dict[str, Any]], follows: tuple[str, str] | None = None) -> None:
    """`publish` from synchronous code, on this thread's own loop (console.loops)."""
    if envelopes:
        run_here(publish(session_pk, envelopes, follows))


async def wake_session(session_pk: int) -> None:
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(session_group(session_pk), {"type": "session.events", "events": "[]"})


def wake_now(session_pk: int) -> None:
    """`wake_session` from synchronous code (on this thread's own loop): the session's streams read the database now."""
    run_here(wake_session(session_pk))


class Subscription:
    """A session stream's place in its session's group, for as long as the stream lasts."""

    def __init__(self, session_pk: int) -> None:
        self.group = session_group(session_pk)
        self.layer = get_channel_layer()
        self.channel = ""

    async def __aenter__(self) -> "Subscription":
        if self.layer is not None:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(self.group, self.channel)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.layer is not None and self.channel:
            await self.layer.group_discard(self.group, self.channel)

    async def receive(self, timeout: float) -> list[Published] | None:
        """The events of the next message (none for a wake), or None when none came within `timeout` seconds."""
        if self.layer is None:
            await asyncio.sleep(timeout)
            return None
        try:
            message = await asyncio.wait_for(self.layer.receive(self.channel), timeout)
        except TimeoutError:
            return None
        return [Published(*event) for event in json.loads(message["events"])]
