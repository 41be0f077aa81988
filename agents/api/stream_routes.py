"""The event streams of the JSON API (server-sent events): a run's as it runs (`stream_run`), a run's stored
events followed until it ends (`follow_run`), and a session's, followed live across its turns (`follow_session`),
with the slots that bound how many one user holds open."""

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import close_old_connections
from django.db.models import FilteredRelation, Q, QuerySet

from agents import actions, live
from agents.events import EventType, event_envelope, session_idle, session_title
from agents.models import Event, Run, RunStatus, Session
from agents.payloads import TURN_ENDS, is_stored
from agents.run_lifecycle import StartedRun, execute, run_result
from console.api import ApiError
from console.slots import Slot, Slots
from console.sql import Prepared
from console.tenancy import ConsoleRequest

_DETACHED: set["asyncio.Future[None]"] = set()

# How often a run's event stream reads the database for what is new, and how soon a session's stream fills a
# gap its live events left.
FOLLOW_POLL_SECONDS = 0.2
# How often an idle session stream reads the database all the same: what is new comes live or with a wake
# (agents.live), so this look is only for a message the channel layer lost. Each look comes a little earlier or
# later (RECHECK_SPREAD), so that the streams a wake made read together do not read together again.
SESSION_RECHECK_SECONDS = 10.0
RECHECK_SPREAD = 0.2
# The open session streams of each user in this process (SESSION_STREAMS_PER_USER).
SESSION_STREAMS = Slots("SESSION_STREAMS_PER_USER")
# A client refused for holding too many streams: when to try again (a stream it closes frees one at once).
STREAMS_RETRY_AFTER_SECONDS = 5
# After each look at the database, how long in all the stream takes in live events that came meanwhile (so that
# a delta among them is placed between the stored events the database gave, not dropped as late).
DRAIN_SECONDS = 0.002


def _sse(envelope: dict[str, Any]) -> str:
    head = f"id: {envelope['sequence']}\n" if is_stored(envelope) else ""
    return f"{head}event: {envelope['type']}\ndata: {json.dumps(envelope)}\n\n"


def wants_sse(request: ConsoleRequest) -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


async def stream_run(started: StartedRun) -> AsyncIterator[str]:
    arrivals: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent, last = 0, None
    for event in started.log.stored:
        sent, last = event.sequence, event_envelope(event)
        yield _sse(last)

    async def listener(envelope: dict[str, Any]) -> None:
        await arrivals.put(envelope)

    started.log.listener = listener
    task = asyncio.ensure_future(execute(started))
    try:
        while not (task.done() and arrivals.empty()):
            getter = asyncio.ensure_future(arrivals.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                envelope = getter.result()
                if is_stored(envelope):
                    sent, last = envelope["sequence"], envelope
                yield _sse(envelope)
            else:
                getter.cancel()
        ended = await sync_to_async(actions.finish)(started, task.result())
        for event in started.log.stored:
            if event.sequence > sent:
                last = event_envelope(event)
                yield _sse(last)
        yield _idle(last)
        result = await sync_to_async(ended.result)()
        yield f"event: done\ndata: {json.dumps(result)}\n\n"
    except (asyncio.CancelledError, GeneratorExit):
        # The client went away; the turn still finishes and is stored.
        started.log.listener = None
        detached = asyncio.ensure_future(_finish_detached(task, started))
        _DETACHED.add(detached)
        detached.add_done_callback(_DETACHED.discard)
        raise


async def _finish_detached(task: "asyncio.Future[Any]", started: StartedRun) -> None:
    # Outlives its request, so not on the request's thread (console.asgi keeps that for the next request,
    # and refuses work from tasks of a request that ended): a pool thread, its connection closed after.
    await database_sync_to_async(actions.finish, thread_sensitive=False)(started, await task)


async def follow_run(run_id: uuid.UUID, after: int) -> AsyncIterator[str]:
    """Stored events after `after`, polling until the run has finished."""
    last = None
    while True:
        events, status = await sync_to_async(_events_after)(run_id, after)
        for event in events:
            after, last = event.sequence, event_envelope(event)
            yield _sse(last)
        if status not in (RunStatus.RUNNING, RunStatus.QUEUED):
            if last is None and after:  # resumed after the run's end: the turn's close still ends the stream
                ended = await sync_to_async(Event.objects.filter(run_id=run_id, sequence=after).first)()
                last = event_envelope(ended) if ended is not None else None
            yield _idle(last)
            run = await sync_to_async(Run.objects.select_related("agent", "version", "session").get)(id=run_id)
            result = await sync_to_async(run_result)(run)
            yield f"event: done\ndata: {json.dumps(result)}\n\n"
            return
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


def _idle(last: dict[str, Any] | None) -> str:
    """`session.idle` after the turn's last event, when it ended the turn (SPEC section 10: it closes every
    turn's stream); nothing otherwise."""
    idle = session_idle(last) if last is not None else None
    return _sse(idle) if idle is not None else ""


def _events_after(run_id: uuid.UUID, after: int) -> tuple[list[Event], str]:
    status = Run.objects.values_list("status", flat=True).get(id=run_id)
    return list(Event.objects.filter(run_id=run_id, sequence__gt=after).order_by("sequence")), status


@dataclass(frozen=True)
class SessionPosition:
    """Where a session stream stands: after event `sequence` of the session's run number `index`, which sorts
    at `run` (its creation time and id); `run` is None before the first event."""

    index: int = 0
    sequence: int = 0
    run: tuple[datetime, uuid.UUID] | None = None

    @property
    def cursor(self) -> str:
        return f"{self.index}.{self.sequence}"


def session_position(session: Session, last_event_id: str | None) -> SessionPosition:
    """The position a `Last-Event-ID` names: `<run>.<sequence>`, its run one of the session's."""
    if last_event_id is None:
        return SessionPosition()
    index, dot, sequence = last_event_id.partition(".")
    runs = []
    if dot and _is_count(index) and _is_count(sequence):
        ordered = session.runs.order_by("created_at", "id").values_list("created_at", "id")
        runs = list(ordered[int(index) : int(index) + 1])
    if not runs:
        detail = "Last-Event-ID must be the id of a frame of this session's stream, `<run>.<sequence>`."
        raise ApiError(400, "invalid_last_event_id", detail)
    return SessionPosition(int(index), int(sequence), runs[0])


def _is_count(text: str) -> bool:
    # str.isdigit() also takes digits int() cannot read, such as "²"; the length keeps it a database integer.
    return text.isascii() and text.isdigit() and len(text) <= 9


def _session_frame(event: live.Published, cursor: str | None) -> str:
    head = f"id: {cursor}\n" if cursor is not None else ""
    return f"{head}event: {event.type}\ndata: {event.encoded}\n\n"


async def follow_session(session_pk: int, after: SessionPosition, slot: Slot) -> AsyncIterator[str]:
    """The session's events after `after`, a turn's end followed by `session.idle`, until the session is deleted
    with none of its turns still to end. Live (agents.live) as the turns report them, deltas included; from
    the database where the stream starts or resumes, whenever the live events leave a gap (an event it did
    not see, a run it does not know yet), when woken (a write that was not published), and every
    SESSION_RECHECK_SECONDS otherwise. A client that goes away cancels it; however it ends, `slot` is given
    back."""
    try:
        async with live.Subscription(session_pk) as subscription:
            yield ": following\n\n"  # a comment: the response starts (its headers go out) before any event
            follower = _SessionFollower(after)
            loop = asyncio.get_running_loop()
            while True:
                fresh, over, runs = await sync_to_async(_look_up_session)(session_pk, follower.after)
                follower.runs.update(runs)
                # For DRAIN_SECONDS in all, not per message: a reply streaming a delta every moment never goes
                # quiet that long, and its deltas were held until its turn ended.
                drained, woken, ended = loop.time() + DRAIN_SECONDS, False, False
                while (left := drained - loop.time()) > 0 and (
                    meanwhile := await subscription.receive(left)
                ) is not None:
                    follower.held += meanwhile
                    woken, ended = woken or not meanwhile, ended or _ends_turn(meanwhile)
                looked = [
                    frame
                    for position, envelope in fresh
                    for frame in follower.deliver(position, live.Published.of(envelope))
                ]
                if frames := "".join([*looked, *follower.release_held()]):
                    yield frames  # what one look gives, in one chunk of the response
                if over:
                    return
                if woken or (ended and follower.held):
                    continue  # a write committed while the database was read may not be in what it gave
                gap = bool(follower.held)  # still open after the database: it fills within a moment
                recheck = SESSION_RECHECK_SECONDS * random.uniform(1 - RECHECK_SPREAD, 1 + RECHECK_SPREAD)
                deadline = loop.time() + (FOLLOW_POLL_SECONDS if gap else recheck)
                while (wait := deadline - loop.time()) > 0:
                    events = await subscription.receive(wait)
                    if not events:
                        break  # woken, or time to look again: the database has what was not published
                    if frames := "".join(frame for event in events for frame in follower.live(event)):
                        yield frames  # a message's events in one chunk
                    if follower.held and (not gap or _ends_turn(events)):
                        break  # a new gap (or a new run), or a turn's end after a gap: look at the database at once
    finally:
        slot.release()


def _ends_turn(events: list[live.Published]) -> bool:
    """Whether `events` hold a turn's end: a turn's last events are published once committed, so the database then
    has every event of the turn, those a stream missed included."""
    return any(event.type in TURN_ENDS for event in events)


class _SessionFollower:
    """Where a session stream stands, and the live stored events it holds until the database fills the gap
    before them. A live event is placed by its run's index among the session's runs (`runs`, from the
    database: run id -> (index, (created_at, id)))."""

    def __init__(self, after: SessionPosition) -> None:
        self.after = after
        self.runs: RunPlaces = {}
        self.held: list[live.Published] = []
        # Where the stream stood when it delivered a turn's end (the event a `session.idle` follows), if it did.
        self.turn_ended: tuple[int, int] | None = None

    def _place(self, event: live.Published) -> tuple[int, int] | None:
        """Where `event` sorts in the session (its run's index, its sequence); None while its run is not placed."""
        run = self.runs.get(event.run_id)
        return (run[0], event.sequence) if run is not None else None

    def deliver(self, position: SessionPosition, event: live.Published) -> Iterator[str]:
        yield _session_frame(event, position.cursor)
        self.after = position
        if self.held:  # the ephemeral events held for this place come right after it; earlier ones are late
            here, kept = (position.index, position.sequence), []
            for waiting in self.held:
                place = self._place(waiting)
                if not waiting.ephemeral or place is None or place > here:
                    kept.append(waiting)
                elif place == here:
                    yield _session_frame(waiting, None)
            self.held = kept
        if position.index == 0 and event.type == EventType.USER_MESSAGE:  # the session's first message names it
            title = session_title(json.loads(event.encoded))
            if title is not None:
                yield _session_frame(live.Published.of(title), None)
        head = {"type": event.type, "runId": event.run_id, "sequence": event.sequence, "id": event.id}
        idle = session_idle({**head, "timestamp": event.timestamp})
        if idle is not None:
            self.turn_ended = self._at()
            yield _session_frame(live.Published.of(idle), None)

    def _follow(self, event: live.Published) -> None:
        """Place the run `event` is the first event of when it follows the run whose turn's end the stream stands at
        (the session's next run: one turn at a time), without reading the database. Anything else, such as that
        run's end not delivered yet, leaves the run unplaced: the database places it."""
        if event.follows is None or event.run_id in self.runs or self.after.run is None:
            return
        previous, created_at = event.follows
        if previous == str(self.after.run[1]) and self.turn_ended == self._at():
            place = (datetime.fromisoformat(created_at), uuid.UUID(event.run_id))
            self.runs[event.run_id] = (self.after.index + 1, place)

    def live(self, event: live.Published) -> Iterator[str]:
        """A live event: delivered when it comes next (an ephemeral one: when the stream stands at the stored
        event it follows), held when an event before it is missing (or its run is not known yet), dropped when
        already delivered (an ephemeral one: when the stream is past the event it follows)."""
        self._follow(event)
        run = self.runs.get(event.run_id)
        if event.ephemeral:
            place = self._place(event)
            if self.held or place is None or place > self._at():
                self.held.append(event)
            elif place == self._at():
                yield _session_frame(event, None)
            return
        if self.held or run is None:
            self.held.append(event)
            return
        index = run[0]
        if (index, event.sequence) <= self._at():
            return
        if self._next(index, event.sequence):
            yield from self.deliver(SessionPosition(index, event.sequence, run[1]), event)
        else:
            self.held.append(event)

    def release_held(self) -> Iterator[str]:
        """The held events that now come next (the database caught up); from the first that still does not, all
        stay held."""
        held, self.held = self.held, []
        for waiting, event in enumerate(held):
            run = self.runs.get(event.run_id)
            if event.ephemeral:
                place = self._place(event)
                if place is None or place > self._at():
                    self.held = held[waiting:]  # the event it follows has not come yet
                    return
                if place == self._at():
                    yield _session_frame(event, None)
                continue  # else the stream is past the event it followed: too late to show
            if run is not None and (run[0], event.sequence) <= self._at():
                continue  # the database gave it already
            if run is None or not self._next(run[0], event.sequence):
                self.held = held[waiting:]
                return
            yield from self.deliver(SessionPosition(run[0], event.sequence, run[1]), event)

    def _at(self) -> tuple[int, int]:
        return (self.after.index, self.after.sequence) if self.after.run is not None else (-1, 0)

    def _next(self, index: int, sequence: int) -> bool:
        at_index, at_sequence = self._at()
        if index == at_index:
            return sequence == at_sequence + 1
        # The session's next run starts once the last one's turn ended (one turn at a time).
        return index == at_index + 1 and sequence == 1


RunPlaces = dict[str, tuple[int, tuple[datetime, uuid.UUID]]]


def _look_up_session(
    session_pk: int, after: SessionPosition
) -> tuple[list[tuple[SessionPosition, dict[str, Any]]], bool, RunPlaces]:
    """`_session_events_after`, the connection then given back where none is kept (PostgreSQL's pool): a stream
    holds its request's thread for as long as it lasts, and with it, else, one of the pool's few connections,
    which a few idle streams used up for every request of the process."""
    try:
        return _session_events_after(session_pk, after)
    finally:
        close_old_connections()


def _session_rows(
    session: int, created_at: datetime | None = None, run: uuid.UUID | None = None, sequence: int = 0
) -> QuerySet[Any, Any]:
    """The session's runs (those from `run` on, when given: created at `created_at`), each joined with its events
    (those after `sequence` of `run`), in the session's order."""
    runs = Run.objects.filter(session_id=session)
    newer = Q()
    if created_at is not None:
        runs = runs.filter(Q(created_at__gt=created_at) | Q(created_at=created_at, id__gte=run))
        newer = ~Q(events__run_id=run) | Q(events__sequence__gt=sequence)
    return (
        runs.annotate(new=FilteredRelation("events", condition=newer))
        .order_by("created_at", "id", "new__sequence")
        .values(
            "id",
            "created_at",
            "status",
            "session__deleted_at",
            "new__id",
            "new__sequence",
            "new__parent_id",
            "new__type",
            "new__data",
            "new__timestamp",
            "new__agent_id",
        )
    )


# A stream's look at the database (issue 56: compiled once a thread), from the session's start or after a place.
_FROM_START = Prepared(_session_rows, session=int)
_AFTER = Prepared(_session_rows, session=int, created_at=datetime, run=uuid.UUID, sequence=int)


def _session_events_after(
    session_pk: int, after: SessionPosition
) -> tuple[list[tuple[SessionPosition, dict[str, Any]]], bool, RunPlaces]:
    """The session's stored events after `after`, each with its position, whether the stream is over (the
    session deleted, none of its turns queued or running), and where each run from `after`'s on stands (run
    id -> (index, (created_at, id))). One query however many runs: the session's runs
    from the one of `after` on, each joined with its events after `after` (a row with no event for a run
    that has none new)."""
    if after.run is None:
        rows = _FROM_START.dicts(session=session_pk)
    else:
        created_at, run_id = after.run
        rows = _AFTER.dicts(session=session_pk, created_at=created_at, run=run_id, sequence=after.sequence)
    first = after.index if after.run is not None else 0
    indexes: dict[uuid.UUID, int] = {}
    fresh = []
    for row in rows:
        index = indexes.setdefault(row["id"], first + len(indexes))
        if row["new__id"] is None:
            continue
        event = Event(
            id=row["new__id"],
            run_id=row["id"],
            sequence=row["new__sequence"],
            parent_id=row["new__parent_id"],
            type=row["new__type"],
            data=row["new__data"],
            timestamp=row["new__timestamp"],
            agent_id=row["new__agent_id"],
        )
        position = SessionPosition(index, event.sequence, (row["created_at"], row["id"]))
        fresh.append((position, event_envelope(event)))
    places = {str(row["id"]): (indexes[row["id"]], (row["created_at"], row["id"])) for row in rows}
    if not rows:
        # Only a session without any run yet gives no row.
        return fresh, not Session.objects.live().filter(pk=session_pk).exists(), places
    turning = any(row["status"] in (RunStatus.QUEUED, RunStatus.RUNNING) for row in rows)
    return fresh, rows[0]["session__deleted_at"] is not None and not turning, places
