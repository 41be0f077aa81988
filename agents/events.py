"""The event log of a run (SPEC section 5): the envelope chain, stored and ephemeral events, and the
event types. Every module names an event type through `EventType`, never a string of its own."""

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

from django.db import connection
from django.utils import timezone

from agents.models import Event, Run


class EventType(StrEnum):
    RUN_STARTED = "run.started"
    RUN_AWAITING = "run.awaiting"
    RUN_RETRYING = "run.retrying"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    RUN_BLOCKED = "run.blocked"
    POLICY_VERDICT = "policy.verdict"
    USER_MESSAGE = "user.message"
    DOCUMENT_ATTACHED = "document.attached"
    ASSISTANT_TURN_START = "assistant.turn_start"
    ASSISTANT_TURN_END = "assistant.turn_end"
    ASSISTANT_MESSAGE = "assistant.message"
    ASSISTANT_MESSAGE_DELTA = "assistant.message_delta"
    ASSISTANT_REASONING_DELTA = "assistant.reasoning_delta"
    ASSISTANT_USAGE = "assistant.usage"
    TOOL_EXECUTION_START = "tool.execution_start"
    TOOL_EXECUTION_PROGRESS = "tool.execution_progress"
    TOOL_EXECUTION_PARTIAL_RESULT = "tool.execution_partial_result"
    TOOL_EXECUTION_COMPLETE = "tool.execution_complete"
    PERMISSION_REQUESTED = "permission.requested"
    PERMISSION_COMPLETED = "permission.completed"
    EXTERNAL_TOOL_REQUESTED = "external_tool.requested"
    EXTERNAL_TOOL_COMPLETED = "external_tool.completed"
    ELICITATION_REQUESTED = "elicitation.requested"
    ELICITATION_COMPLETED = "elicitation.completed"
    REQUEST_TERMINATED = "request.terminated"
    USER_INPUT_REQUESTED = "user_input.requested"
    USER_INPUT_COMPLETED = "user_input.completed"
    EXIT_PLAN_MODE_REQUESTED = "exit_plan_mode.requested"
    EXIT_PLAN_MODE_COMPLETED = "exit_plan_mode.completed"
    SESSION_LIMITS_EXHAUSTED_REQUESTED = "session_limits_exhausted.requested"
    SESSION_LIMITS_EXHAUSTED_COMPLETED = "session_limits_exhausted.completed"
    SESSION_IDLE = "session.idle"


# What a run's log says when its turn ends (completed, failed, cancelled, blocked or awaiting_*): on the session
# stream each is followed by `session.idle`.
TURN_ENDS = frozenset(
    {
        EventType.RUN_COMPLETED,
        EventType.RUN_FAILED,
        EventType.RUN_CANCELLED,
        EventType.RUN_BLOCKED,
        EventType.RUN_AWAITING,
    }
)


Listener = Callable[[dict[str, Any]], Awaitable[None]]


class EventLog:
    """Builds the envelope chain of one run. Stored events are written by `finish_run`, except those
    `flush` wrote before (a queued run's as it starts, a long turn's while it runs)."""

    def __init__(self, run: Run, listener: Listener | None = None) -> None:
        self.run = run
        self.listener = listener
        self.stored: list[Event] = []
        self.flushed = 0
        self.sequence = 0
        self.parent: uuid.UUID | None = None
        # Set while a keeper runs in this process (agents/turns.py): events reach the database mid-turn.
        self.live = False
        self._flushing = threading.Lock()

    @classmethod
    def resume(cls, run: Run) -> "EventLog":
        """The log of a run whose events so far are stored: the chain goes on after the last one."""
        log = cls(run)
        last = run.events.order_by("-sequence").only("id", "sequence").first()
        if last is not None:
            log.sequence, log.parent = last.sequence, last.id
        return log

    def flush(self) -> None:
        """Write the stored events not written yet (from any thread; the turn may go on meanwhile)."""
        with self._flushing:
            events = self.stored[self.flushed :]
            if events:
                Event.objects.bulk_create(events)
                self.flushed += len(events)

    def envelope(self, event_type: str, data: dict[str, Any], ephemeral: bool) -> dict[str, Any]:
        now = timezone.now()
        if ephemeral:
            return {
                "id": str(uuid.uuid4()),
                "runId": str(self.run.id),
                "sequence": self.sequence,
                "timestamp": now.isoformat(),
                "parentId": str(self.parent) if self.parent else None,
                "ephemeral": True,
                "type": event_type,
                "data": data,
            }
        return event_envelope(self._store(event_type, data, now))

    def _store(self, event_type: str, data: dict[str, Any], now: Any = None) -> Event:
        self.sequence += 1
        event = Event(
            run=self.run,
            sequence=self.sequence,
            parent_id=self.parent,
            type=event_type,
            data=data,
            timestamp=now or timezone.now(),
        )
        self.stored.append(event)
        self.parent = event.id
        return event

    async def emit(self, event_type: str, data: dict[str, Any], ephemeral: bool = False) -> None:
        if self.listener is not None:
            await self.listener(self.envelope(event_type, data, ephemeral))
        elif not ephemeral:
            self.record(event_type, data)
        if self.live and event_type == EventType.TOOL_EXECUTION_START and data.get("sideEffects"):
            # Stored before the tool runs: should this process die from here on, the run is not retried.
            await asyncio.to_thread(self._flush_apart)

    def _flush_apart(self) -> None:
        try:
            self.flush()
        finally:
            connection.close()

    def record(self, event_type: str, data: dict[str, Any]) -> None:
        """A stored event from synchronous code (no live listener is called)."""
        self._store(event_type, data)


def event_envelope(event: Event) -> dict[str, Any]:
    return {
        "id": str(event.id),
        "runId": str(event.run_id),
        "sequence": event.sequence,
        "timestamp": event.timestamp.isoformat(),
        "parentId": str(event.parent_id) if event.parent_id else None,
        "ephemeral": False,
        "type": event.type,
        "data": event.data,
    }


def session_idle(last: dict[str, Any]) -> dict[str, Any] | None:
    """The ephemeral `session.idle` after `last` (a stored event's envelope) when it ends a turn, else None:
    `aborted` when the turn was cancelled. It is dated and chained as the event that ended the turn, so a
    replayed history reads as the live one did."""
    if last["type"] not in TURN_ENDS:
        return None
    return {
        "id": str(uuid.uuid4()),
        "runId": last["runId"],
        "sequence": last["sequence"],
        "timestamp": last["timestamp"],
        "parentId": last["id"],
        "ephemeral": True,
        "type": EventType.SESSION_IDLE,
        "data": {"aborted": last["type"] == EventType.RUN_CANCELLED},
    }
