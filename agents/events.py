"""The event log of a run (SPEC section 5): the envelope chain of stored and ephemeral events. The types and
their payloads are `agents.payloads`; every module names an event type through `EventType`, never a string."""

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, OuterRef, QuerySet, Subquery, When
from django.utils import timezone

from agents import live
from agents.models import Event, Run
from agents.payloads import PAYLOADS, Payload, ToolExecutionStart
from agents.payloads import TURN_ENDS as TURN_ENDS
from agents.payloads import EventType as EventType  # the types live with their payloads
from console.inserts import insert_rows

Listener = Callable[[dict[str, Any]], Awaitable[None]]


class EventLog:
    """Builds the envelope chain of one run. Stored events are written by `finish_run`, except those
    `flush` wrote before (a queued run's as it starts, a long turn's while it runs)."""

    def __init__(self, run: Run, listener: Listener | None = None, *, look_back: bool = True) -> None:
        self.run = run
        self.listener = listener
        self.stored: list[Event] = []
        self.flushed = 0
        self.sequence = 0
        # The chain spans the session (SPEC section 10): a run's first event follows the last one of the run before
        # Without `look_back` (a run that begins its session, or one whose place the caller sets) nothing is read.
        follows = run.session_id is not None and look_back
        self.parent: uuid.UUID | None = session_last_event(run) if follows else None
        # Set while a keeper runs in this process (agents/turns.py): events reach the database mid-turn.
        self.live = False
        # The stored events already published to the session's stream (agents.live).
        self.published = 0
        # Whose events `record` writes (`speaking_for`): a sub-agent's `agentId`, or "" for the run's agent.
        self._agent_id = ""
        self._flushing = threading.Lock()
        # What `emit` publishes: the events of this round of the loop, and the message being sent (`_send_live`).
        self._batch: list[dict[str, Any]] = []
        self._sending: asyncio.Future[None] | None = None

    @classmethod
    def resume(cls, run: Run) -> "EventLog":
        """The log of a run whose events so far are stored: the chain goes on after the last one (read with the
        run by `with_last_event`, or here)."""
        read: Any = run
        if hasattr(read, "last_event_id"):
            last = (read.last_event_id, read.last_sequence) if read.last_event_id is not None else None
        else:
            found = run.events.order_by("-sequence").values_list("id", "sequence").first()
            last = (found[0], found[1]) if found is not None else None
        if last is None:
            if hasattr(read, "follows_event_id"):
                log = cls(run, look_back=False)
                log.parent = read.follows_event_id
                return log
            return cls(run)
        log = cls(run, look_back=False)  # after the run's own last event
        log.parent, log.sequence = last
        return log

    def flush(self) -> None:
        """Write the stored events not written yet (from any thread; the turn may go on meanwhile)."""
        if self.flushed == len(self.stored):
            return
        # The write transaction first, then the log's lock, wherever the log is flushed from (the keeper, a tool
        # about to run, the finishing turn inside its own transaction): on SQLite, a flusher holding the lock
        # while waiting to write and one holding a write transaction while waiting for the lock each waited
        # for the other until the database's timeout.
        with transaction.atomic(savepoint=False), self._flushing:
            events = self.stored[self.flushed :]
            if events:
                insert_rows(events)
                self.flushed += len(events)
                if self.run.session_id is not None:
                    transaction.on_commit(self._wake_readers, robust=True)

    def _wake_readers(self) -> None:
        # A session's streams read the database only when told to (agents.live): the events synchronous code
        # recorded and flushed (a cancel, a closed request) reach them through this wake, robust so that a layer
        # that fails cannot fail the committed write (the streams' slow recheck still finds them).
        if self.published < self.flushed and self.run.session_id is not None:
            live.wake_now(self.run.session_id)

    def forget_after(self, kept: int, written: int) -> None:
        """Forget the stored events from the `kept`-th on, as if never recorded: a turn whose outcome the database
        refused drops them (one of them may be what it refused). `written`: how many of the kept ones the database
        has, whatever a rolled-back flush counted. The sequence goes on after theirs, as live readers may have seen
        those numbers; the chain goes on from the last event kept."""
        del self.stored[kept:]
        self.flushed = written
        self.published = min(self.published, kept)
        if self.stored:
            self.parent = self.stored[-1].id
        else:
            self.parent = self.run.events.order_by("-sequence").values_list("id", flat=True).first()

    def envelope(self, payload: Payload, data: dict[str, Any], agent_id: str = "") -> dict[str, Any]:
        now = timezone.now()
        if not payload.stored:
            envelope = {
                "id": str(uuid.uuid4()),
                "runId": str(self.run.id),
                "sequence": self.sequence,
                "timestamp": now.isoformat(),
                "parentId": str(self.parent) if self.parent else None,
                "ephemeral": payload.ephemeral,
                "type": payload.type,
                "data": data,
            }
            if agent_id:
                envelope["agentId"] = agent_id
            return envelope
        return event_envelope(self._store(payload, data, now, agent_id))

    def _store(self, payload: Payload, data: dict[str, Any], now: Any = None, agent_id: str = "") -> Event:
        self.sequence += 1
        event = Event(
            run=self.run,
            sequence=self.sequence,
            parent_id=self.parent,
            type=payload.type,
            data=data,
            timestamp=now or timezone.now(),
            agent_id=agent_id,
            side_effects=isinstance(payload, ToolExecutionStart) and payload.side_effects,
        )
        self.stored.append(event)
        self.parent = event.id
        return event

    async def emit(self, payload: Payload, agent_id: str | None = None) -> None:
        """Report an event: into the log, to the live listener when there is one, and to the session's stream
        readers (agents.live)."""
        data = payload.dump()
        session = self.run.session_id
        if self.listener is None and session is None:
            if payload.stored:
                self._store(payload, data, agent_id=agent_id or "")
        else:
            envelope = self.envelope(payload, data, agent_id or "")
            if self.listener is not None:
                await self.listener(envelope)
            if session is not None:
                # What synchronous code recorded before (the run's start) goes out first, in order.
                backlog = self._unpublished()
                self._send_live(backlog if payload.stored else [*backlog, envelope])
        if self.live and isinstance(payload, ToolExecutionStart) and payload.side_effects:
            # Stored before the tool runs: should this process die from here on, the run is not retried.
            await asyncio.to_thread(self._flush_apart)

    def _send_live(self, envelopes: list[dict[str, Any]]) -> None:
        """Publish `envelopes` to the session's streams (agents.live) without waiting: with what the turn reports
        until its loop's next round, in one message (a turn reports most of its events back to back, and each
        message costs a hop to the loop the streams read on, a wake of each stream and a chunk of each
        response), after the messages sent before it."""
        if not self._batch:
            asyncio.get_running_loop().call_soon(self._send_batch)
        self._batch += envelopes

    def _send_batch(self) -> None:
        batch, self._batch = self._batch, []
        if batch:
            self._sending = asyncio.ensure_future(self._send_after(self._sending, batch))

    async def _send_after(self, before: "asyncio.Future[None] | None", batch: list[dict[str, Any]]) -> None:
        if before is not None:
            await before
        assert self.run.session_id is not None
        await live.publish(self.run.session_id, batch, self._follows())

    async def sent_live(self) -> None:
        """Once every event the turn reported is published (the turn's end: what is committed after goes out with
        `publish_rest`, after these)."""
        self._send_batch()
        if self._sending is not None:
            await self._sending

    def _unpublished(self) -> list[dict[str, Any]]:
        events, self.published = self.stored[self.published :], len(self.stored)
        return [event_envelope(event) for event in events]

    def publish_rest(self) -> None:
        """Publish the stored events not published yet (from synchronous code, once they are committed)."""
        if self.run.session_id is not None:
            live.publish_now(self.run.session_id, self._unpublished(), self._follows())

    def _follows(self) -> tuple[str, str] | None:
        """`agents.live.Published.follows` of this run's first event."""
        run = self.run
        return (str(run.previous_run_id), run.created_at.isoformat()) if run.previous_run_id is not None else None

    def _flush_apart(self) -> None:
        try:
            self.flush()
        finally:
            connection.close()

    def record(self, payload: Payload, agent_id: str | None = None) -> None:
        """A stored event from synchronous code (no live listener is called)."""
        self._store(payload, payload.dump(), agent_id=agent_id or self._agent_id)

    @contextlib.contextmanager
    def speaking_for(self, agent_id: str | None) -> Iterator[None]:
        """`record` writes the events of the sub-agent `agent_id` (None: of the run's agent) meanwhile."""
        before, self._agent_id = self._agent_id, agent_id or ""
        try:
            yield
        finally:
            self._agent_id = before


def with_last_event(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` with the id and sequence of each one's last stored event, which `EventLog.resume` goes on from, and
    for one with none yet, the last event of its session before it, which its first event follows."""
    last = Event.objects.filter(run=OuterRef("pk")).order_by("-sequence")
    before = Event.objects.filter(run__session=OuterRef("session_id")).exclude(run_id=OuterRef("pk"))
    follows = Subquery(before.order_by("-run__created_at", "-run_id", "-sequence").values("id")[:1])
    runs = runs.annotate(
        last_event_id=Subquery(last.values("id")[:1]), last_sequence=Subquery(last.values("sequence")[:1])
    )
    # Only for a run with no event yet (the database skips the other branch of a CASE).
    return runs.annotate(follows_event_id=Case(When(last_event_id=None, then=follows)))


def last_event_of_session() -> Subquery:
    """The id of the last stored event of the outer session's runs (in the session's order: runs by creation,
    events by sequence): what the first event of its next run follows."""
    events = Event.objects.filter(run__session=OuterRef("pk"))
    return Subquery(events.order_by("-run__created_at", "-run_id", "-sequence").values("id")[:1])


def session_last_event(run: Run) -> uuid.UUID | None:
    """The id of the last stored event of the session's runs before `run` (in the session's order: runs by
    creation, events by sequence), or None when `run` begins the session."""
    earlier = Event.objects.filter(run__session=run.session_id).exclude(run_id=run.pk)
    return earlier.order_by("-run__created_at", "-run_id", "-sequence").values_list("id", flat=True).first()


def event_envelope(event: Event) -> dict[str, Any]:
    """A stored event as the API sends it; `ephemeral` is the SDK's flag for its type (SPEC section 10)."""
    model = PAYLOADS.get(event.type)
    envelope = {
        "id": str(event.id),
        "runId": str(event.run_id),
        "sequence": event.sequence,
        "timestamp": event.timestamp.isoformat(),
        "parentId": str(event.parent_id) if event.parent_id else None,
        "ephemeral": model.ephemeral if model is not None else False,
        "type": event.type,
        "data": event.data,
    }
    if event.agent_id:
        envelope["agentId"] = event.agent_id
    return envelope


TITLE_LENGTH = 80


def session_title(first: dict[str, Any]) -> dict[str, Any] | None:
    """The ephemeral `session.title_changed` after `first`, the envelope of the user message that opened the
    session (its first run's, not a sub-agent's task): the message's first line that has words, up to 80
    characters. None when it has none. Dated and chained as that message, like `session_idle`."""
    if first.get("agentId"):
        return None
    lines = (" ".join(line.split()) for line in str(first["data"].get("content") or "").splitlines())
    title = next((line for line in lines if line), "")
    if not title:
        return None
    if len(title) > TITLE_LENGTH:
        title = title[: TITLE_LENGTH - 1].rstrip() + "…"
    return _following(first, EventType.SESSION_TITLE_CHANGED, {"title": title})


def session_idle(last: dict[str, Any]) -> dict[str, Any] | None:
    """The ephemeral `session.idle` after `last` (a stored event's envelope) when it ends a turn, else None:
    `aborted` when the turn was cancelled. It is dated and chained as the event that ended the turn, so a
    replayed history reads as the live one did."""
    if last["type"] not in TURN_ENDS:
        return None
    return _following(last, EventType.SESSION_IDLE, {"aborted": last["type"] == EventType.RUN_CANCELLED})


def _following(event: dict[str, Any], kind: EventType, data: dict[str, Any]) -> dict[str, Any]:
    """An ephemeral event the session stream adds after `event` (an envelope): dated and chained as it."""
    return {
        "id": str(uuid.uuid4()),
        "runId": event["runId"],
        "sequence": event["sequence"],
        "timestamp": event["timestamp"],
        "parentId": event["id"],
        "ephemeral": True,
        "type": kind,
        "data": data,
    }
