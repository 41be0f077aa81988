"""The session stream (SPEC section 10, `GET /api/sessions/{key}/events`): every run of a session in one list,
or on one live SSE connection that follows the session across an answer's continuation, closes each turn
with `session.idle` and resumes after a `Last-Event-ID` that spans runs."""

import asyncio
import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.db import connections
from django.test import AsyncClient

from agents.events import session_title
from agents.models import Checkpoint, Event, RunStatus
from agents.payloads import PAYLOADS
from console.asgi import application
from tests.conftest import Persona
from tests.helpers import EMAIL, ask_to_send, assert_problem, call_line, run_ok, run_queued

SEND = call_line("send_email", EMAIL)


def session_events(persona: Persona, key: str = "s1") -> list[dict[str, Any]]:
    response = persona.api("GET", f"/api/sessions/{key}/events")
    assert response.status_code == 200, response.content
    return response.json()["items"]


def run_events(persona: Persona, run_id: str) -> list[dict[str, Any]]:
    response = persona.api("GET", f"/api/runs/{run_id}/events")
    assert response.status_code == 200, response.content
    return response.json()["items"]


def approve(persona: Persona, asked: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """Answer the run's approval through the respond API (as the inbox does); its continuation is queued."""
    body = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True, **fields}
    response = persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)
    assert response.status_code == 200, response.content
    outcome = response.json()
    assert outcome["status"] == "accepted", outcome
    return outcome


def stored_in_order(key: str) -> list[tuple[str, int, str, str]]:
    """The session's stored events as (runId, sequence, id, type): runs by creation, events by sequence."""
    events = Event.objects.filter(run__session__key=key).order_by("run__created_at", "run_id", "sequence")
    return [(str(e.run_id), e.sequence, str(e.id), e.type) for e in events]


# --- JSON -------------------------------------------------------------------------------------------


def test_it_lists_every_run_of_the_session_in_order(operator, assistant):
    asked = ask_to_send(operator)
    continuation = run_queued(approve(operator, asked)["continuationRunId"])
    assert continuation.status == RunStatus.COMPLETED
    later = run_ok(operator, {"message": "thanks", "sessionId": "s1"})
    run_ok(operator, {"message": "another conversation", "sessionId": "s2"})

    items = session_events(operator)

    runs = [asked["runId"], str(continuation.id), later["runId"]]
    assert items == [event for run_id in runs for event in run_events(operator, run_id)]
    assert [(e["runId"], e["sequence"], e["id"], e["type"]) for e in items] == stored_in_order("s1")
    assert [e["type"] for e in items if e["type"].startswith("run.")] == [
        "run.started",
        "run.awaiting",
        "run.started",
        "run.completed",
        "run.started",
        "run.completed",
    ]


def test_it_lists_only_a_forks_own_runs(operator, assistant):
    asked = ask_to_send(operator)
    earlier = str(Checkpoint.objects.get(run_id=asked["runId"]).id)
    run_queued(approve(operator, asked)["continuationRunId"])

    outcome = approve(operator, asked, checkpointId=earlier)
    forked = run_queued(outcome["continuationRunId"])

    assert forked.session.key == outcome["sessionId"] != "s1"
    assert session_events(operator, outcome["sessionId"]) == run_events(operator, str(forked.id))
    assert len({e["runId"] for e in session_events(operator)}) == 2


def test_it_hides_the_session_from_an_outsider(operator, outsider, reader, assistant):
    ask_to_send(operator)

    assert_problem(outsider.api("GET", "/api/sessions/s1/events"), 404, "session_not_found")
    sse = {"HTTP_ACCEPT": "text/event-stream"}
    assert_problem(outsider.api("GET", "/api/sessions/s1/events", **sse), 404, "session_not_found")
    assert_problem(operator.api("GET", "/api/sessions/nope/events"), 404, "session_not_found")
    assert len(session_events(reader)) == len(stored_in_order("s1"))


def test_it_forgets_a_deleted_session(operator, assistant):
    run_ok(operator, {"message": "hello", "sessionId": "s1"})
    assert operator.api("DELETE", "/api/sessions/s1").status_code == 204

    assert_problem(operator.api("GET", "/api/sessions/s1/events"), 404, "session_not_found")
    fresh = run_ok(operator, {"message": "again", "sessionId": "s1"})
    assert {e["runId"] for e in session_events(operator)} == {fresh["runId"]}


@pytest.mark.parametrize("last_event_id", ["", "abc", "3", "0.x", "0.", ".1", "0.1.2", "².1", "-1.2", "0.1e3", "1.1"])
def test_it_refuses_a_last_event_id_that_is_not_a_position_of_the_session(operator, assistant, last_event_id):
    run_ok(operator, {"message": "hello", "sessionId": "s1"})  # one run: index 0 only

    response = operator.api(
        "GET", "/api/sessions/s1/events", HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID=last_event_id
    )

    assert_problem(response, 400, "invalid_last_event_id")


# --- SSE --------------------------------------------------------------------------------------------


@pytest.fixture
async def thread_connections():
    """ORM calls made through sync_to_async open connections in asgiref's worker thread, which the test
    teardown never sees; left open, they keep PostgreSQL from dropping the test database."""
    yield
    await sync_to_async(connections.close_all)()


def parse(block: str) -> dict[str, Any]:
    """One server-sent event as a dict: `id` (absent when the frame has none), `event`, `data` (decoded)."""
    frame: dict[str, Any] = {}
    for line in block.split("\n"):
        field, _, value = line.partition(": ")
        assert field in ("id", "event", "data"), f"unexpected SSE line {line!r}"
        frame[field] = json.loads(value) if field == "data" else value
    return frame


class Stream:
    """An open session stream, read frame by frame as the client gets them (it never ends by itself)."""

    def __init__(self, response: Any) -> None:
        assert response.status_code == 200, response.content
        assert response["Content-Type"].startswith("text/event-stream")
        self.chunks = response.streaming_content
        self.buffer = ""

    async def frame(self, timeout: float = 10) -> dict[str, Any]:
        """The next event (a comment, which opens the stream before any event, is skipped)."""
        while True:
            while "\n\n" not in self.buffer:
                chunk = await asyncio.wait_for(anext(self.chunks), timeout)
                self.buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
            block, self.buffer = self.buffer.split("\n\n", 1)
            if not block.startswith(":"):
                return parse(block)

    async def turn(self) -> list[dict[str, Any]]:
        """The frames up to the next `session.idle`, included."""
        frames = [await self.frame()]
        while frames[-1]["event"] != "session.idle":
            frames.append(await self.frame())
        return frames

    async def take(self, count: int) -> list[dict[str, Any]]:
        return [await self.frame() for _ in range(count)]

    async def assert_silent(self) -> None:
        """Nothing more comes for several polls (this ends the stream: the read is cancelled)."""
        with pytest.raises(TimeoutError):
            await self.frame(timeout=1)

    async def close(self) -> None:
        await self.chunks.aclose()


async def open_stream(persona: Persona, key: str = "s1", **headers: str) -> Stream:
    headers = {"Authorization": f"Bearer {persona.token}", "Accept": "text/event-stream", **headers}
    return Stream(await AsyncClient().get(f"/api/sessions/{key}/events", headers=headers))


def comparable(frame: dict[str, Any]) -> dict[str, Any]:
    """A frame without what differs between two sends of it: an ephemeral event's own id."""
    if "id" in frame:
        return frame
    return {**frame, "data": {**frame["data"], "id": None}}


@pytest.fixture(autouse=True)
def no_recheck(monkeypatch):
    """Every stream here shows what comes live or with a wake (agents.live): its safety-net look at the database
    never comes within a test."""
    import console.urls  # noqa: F401  # the API's modules, loaded in their order (agents.api alone would be a cycle)

    monkeypatch.setattr("agents.api.stream_routes.SESSION_RECHECK_SECONDS", 60.0)


async def open_served(persona: Persona, key: str = "s1") -> tuple[HttpCommunicator, dict[str, Any]]:
    """A session stream through the console's ASGI application, as daphne serves it: the communicator and the
    response's start."""
    headers = [
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {persona.token}".encode()),
        (b"accept", b"text/event-stream"),
    ]
    client = HttpCommunicator(application, "GET", f"/api/sessions/{key}/events", headers=headers)
    await client.send_input({"type": "http.request", "body": b""})
    return client, await client.receive_output(10)


async def hang_up(client: HttpCommunicator) -> None:
    """The client goes away; the application returns (not awaited with a timeout that would cancel it: a stream
    that ignored the disconnect would ignore that cancellation too)."""
    await client.send_input({"type": "http.disconnect"})
    await asyncio.wait({client.future}, timeout=5)
    assert client.future.done()
    await client.wait()


async def assert_too_many(client: HttpCommunicator, start: dict[str, Any], held: int) -> None:
    """The stream was refused: its user holds `held` open already."""
    assert start["status"] == 429
    headers = {name.lower(): value for name, value in start["headers"]}
    assert headers[b"content-type"] == b"application/problem+json"
    assert headers[b"retry-after"] == b"5"
    body = json.loads((await client.receive_output(5))["body"])
    assert (body["status"], body["code"]) == (429, "too_many_streams")
    assert f"{held} session streams open" in body["detail"]
    await client.wait()


def envelope(run_id: Any, kind: str, sequence: int = 1, ephemeral: bool = False) -> dict[str, Any]:
    """An envelope as a turn publishes it (agents.live)."""
    return {
        "id": f"{kind}-{sequence}-{ephemeral}",
        "runId": str(run_id),
        "sequence": sequence,
        "timestamp": "2026-12-01T00:00:00+00:00",
        "parentId": None,
        "ephemeral": ephemeral,
        "type": kind,
        "data": {"deltaContent": "word "} if ephemeral else {},
    }


async def running_run(key: str = "s1") -> tuple[Any, Any]:
    """The session `key` and a new running run of it with no event yet."""
    from agents.models import Run, Session

    session = await Session.objects.select_related("agent", "tenant").aget(key=key)
    first = await Run.objects.select_related("version").filter(session=session).afirst()
    assert first is not None
    run = await Run.objects.acreate(
        tenant=session.tenant, agent=session.agent, version=first.version, session=session, status=RunStatus.RUNNING
    )
    return session, run


def database_reads(monkeypatch: Any) -> list[Any]:
    """The session streams' looks at the database from now on, as they happen."""
    from agents.api import stream_routes

    reads: list[Any] = []
    read = stream_routes._session_events_after

    def counted(*args: Any) -> Any:
        reads.append(args)
        return read(*args)

    monkeypatch.setattr(stream_routes, "_session_events_after", counted)
    return reads


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_follows_the_session_across_an_answer_on_one_connection(operator, assistant):
    asked = await sync_to_async(ask_to_send)(operator)
    stream = await open_stream(operator)

    asking = await stream.turn()
    outcome = await sync_to_async(approve)(operator, asked)
    await sync_to_async(run_queued)(outcome["continuationRunId"])
    continuing = await stream.turn()
    await stream.assert_silent()

    continuation = outcome["continuationRunId"]
    for turn, run_id, last in ((asking, asked["runId"], "run.awaiting"), (continuing, continuation, "run.completed")):
        idle = turn[-1]
        assert "id" not in idle
        assert idle["data"]["ephemeral"] is True
        assert idle["data"]["data"] == {"aborted": False}
        assert idle["data"]["runId"] == run_id
        assert (turn[-2]["event"], turn[-2]["data"]["runId"]) == (last, run_id)
        assert idle["data"]["parentId"] == turn[-2]["data"]["id"]
    assert [f["event"] for f in asking + continuing].count("session.title_changed") == 1
    stored = [f for f in asking + continuing if "id" in f]  # ephemeral frames (title, deltas, idle) have none
    in_db = await sync_to_async(stored_in_order)("s1")
    # No gap, no duplicate: what streamed is every stored event of both runs, once, in order.
    assert [(f["data"]["runId"], f["data"]["sequence"], f["data"]["id"], f["event"]) for f in stored] == in_db
    # `ephemeral` is the SDK's flag for the type: the stored `assistant.usage` has it too (docs/events.md).
    assert all(f["event"] == f["data"]["type"] for f in stored)
    assert {f["event"] for f in stored if f["data"]["ephemeral"]} == {"assistant.usage"}
    asked_count = sum(1 for run_id, *_ in in_db if run_id == asked["runId"])
    assert [f["id"] for f in stored] == [f"0.{n}" for n in range(1, asked_count + 1)] + [
        f"1.{n}" for n in range(1, len(in_db) - asked_count + 1)
    ]
    assert [f["event"] for f in continuing[:2]] == ["run.started", "permission.completed"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_resumes_after_the_last_event_id_across_runs(operator, assistant):
    asked = await sync_to_async(ask_to_send)(operator)
    await sync_to_async(run_queued)((await sync_to_async(approve)(operator, asked))["continuationRunId"])
    stream = await open_stream(operator)
    whole = await stream.turn() + await stream.turn()
    await stream.close()
    assert [f["event"] for f in whole].count("session.idle") == 2

    for cursor in (whole.index(next(f for f in whole if f.get("id") == id)) for id in ("0.3", "1.1")):
        again = await open_stream(operator, **{"Last-Event-ID": whole[cursor]["id"]})
        rest = whole[cursor + 1 :]
        resumed = await again.take(len(rest))
        await again.assert_silent()

        assert [comparable(f) for f in resumed] == [comparable(f) for f in rest]

    # Resumed at the end, the stream goes on with the session's next turn.
    again = await open_stream(operator, **{"Last-Event-ID": whole[-2]["id"]})
    later = await sync_to_async(run_ok)(operator, {"message": "thanks", "sessionId": "s1"})
    next_turn = await again.turn()
    await again.close()
    assert {f["data"]["runId"] for f in next_turn} == {later["runId"]}
    assert next_turn[0]["id"] == "2.1"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_the_first_message_names_the_session_once(operator, assistant):
    first = "  Plan   the launch \n\nwith the team, then mail them."
    await sync_to_async(run_ok)(operator, {"message": first, "sessionId": "s1"})
    await sync_to_async(run_ok)(operator, {"message": "And the budget?", "sessionId": "s1"})
    stream = await open_stream(operator)
    frames = await stream.turn() + await stream.turn()
    await stream.close()

    titled = [i for i, f in enumerate(frames) if f["event"] == "session.title_changed"]
    assert len(titled) == 1
    message, title = frames[titled[0] - 1], frames[titled[0]]
    assert message["event"] == "user.message" and message["id"] == "0.2"
    assert "id" not in title and title["data"]["ephemeral"] is True
    assert title["data"]["data"] == {"title": "Plan the launch"}
    assert title["data"]["parentId"] == message["data"]["id"]
    assert PAYLOADS["session.title_changed"].model_validate(title["data"]["data"]).title == "Plan the launch"


def test_a_title_is_the_first_line_with_words_cut_at_80_characters():
    def title(content: str) -> str | None:
        envelope = {"runId": "r", "sequence": 2, "timestamp": "t", "id": "e", "data": {"content": content}}
        made = session_title(envelope)
        return made and made["data"]["title"]

    assert title("\n\n   \nhello  there\nsecond") == "hello there"
    assert title("x" * 100) == "x" * 79 + "…"
    assert title("   ") is None
    assert session_title({"agentId": "researcher", "data": {"content": "a task"}}) is None  # a sub-agent's


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_says_a_cancelled_turn_was_aborted(operator, assistant):
    asked = await sync_to_async(ask_to_send)(operator)
    stream = await open_stream(operator)
    assert (await stream.turn())[-1]["data"]["data"] == {"aborted": False}

    cancelled = await sync_to_async(operator.api)("POST", f"/api/runs/{asked['runId']}/cancel")
    assert cancelled.json()["status"] == "cancelled"

    ending = await stream.turn()
    await stream.close()
    assert [f["event"] for f in ending] == [
        "permission.completed",
        "request.terminated",
        "abort",
        "run.cancelled",
        "session.idle",
    ]
    assert ending[-1]["data"]["data"] == {"aborted": True}
    assert ending[-1]["data"]["runId"] == asked["runId"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_ends_the_stream_when_the_session_is_deleted(operator, assistant):
    await sync_to_async(ask_to_send)(operator)
    stream = await open_stream(operator)
    await stream.turn()

    deleted = await sync_to_async(operator.api)("DELETE", "/api/sessions/s1")
    assert deleted.status_code == 204

    # The deletion closes the open approval in the log of the run that asked, then the stream ends.
    completed, closing = await stream.frame(), await stream.frame()
    assert completed["data"]["data"]["result"] == {"kind": "cancelled", "reason": "abandoned"}
    assert closing["event"] == "request.terminated"
    assert closing["data"]["data"]["kind"] == "abandoned"
    with pytest.raises(StopAsyncIteration):
        await stream.frame()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_ends_the_stream_of_an_idle_session_when_it_is_deleted(operator, assistant):
    """Nothing is written to the log of a session without an open turn or request: the deletion wakes its streams."""
    await sync_to_async(run_ok)(operator, {"message": "hello", "sessionId": "s1"})
    stream = await open_stream(operator)
    await stream.turn()

    assert (await sync_to_async(operator.api)("DELETE", "/api/sessions/s1")).status_code == 204
    with pytest.raises(StopAsyncIteration):
        await stream.frame()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_stops_when_the_client_disconnects(operator, assistant):
    await sync_to_async(ask_to_send)(operator)
    client, start = await open_served(operator)
    assert start["status"] == 200
    body = b""
    while b"event: session.idle" not in body:
        body += (await client.receive_output(10))["body"]

    await hang_up(client)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_refuses_a_users_101st_stream_while_another_user_opens_one(operator, admin, assistant):
    """One user's streams are capped (SESSION_STREAMS_PER_USER, 100): an idle stream read the database five times
    a second, and 400 of them made another tenant's API take seconds. On PostgreSQL this also holds the streams
    to giving their connection back to the pool between reads: the 21st stream used to wait for one."""
    await sync_to_async(run_ok)(operator, {"message": "hello", "sessionId": "s1"})
    held: list[HttpCommunicator] = []
    try:
        for _ in range(100):
            client, start = await open_served(operator)
            held.append(client)
            assert start["status"] == 200

        await assert_too_many(*await open_served(operator), held=100)
        other, start = await open_served(admin)
        held.append(other)
        assert start["status"] == 200

        await hang_up(held.pop(0))  # a stream closed gives its place back
        client, start = await open_served(operator)
        held.append(client)
        assert start["status"] == 200
    finally:
        for client in held:
            await hang_up(client)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_gives_a_streams_place_back_however_the_stream_ends(operator, assistant, settings, monkeypatch):
    from django.db import DatabaseError

    from agents import live
    from agents.api import stream_routes
    from agents.models import Session

    settings.SESSION_STREAMS_PER_USER = 1
    await sync_to_async(ask_to_send)(operator)
    await sync_to_async(run_ok)(operator, {"message": "hello", "sessionId": "s2"})
    first, start = await open_served(operator)
    assert start["status"] == 200
    await assert_too_many(*await open_served(operator, "s2"), held=1)

    await hang_up(first)  # the client went away
    ending, start = await open_served(operator)
    assert start["status"] == 200

    assert (await sync_to_async(operator.api)("DELETE", "/api/sessions/s1")).status_code == 204
    await ending.wait(10)  # the session ended: so did its stream
    failing, start = await open_served(operator, "s2")
    assert start["status"] == 200

    def unreadable(*args: Any) -> Any:
        raise DatabaseError("the database went away")

    with monkeypatch.context() as patched:
        patched.setattr(stream_routes, "_session_events_after", unreadable)
        await live.wake_session((await Session.objects.aget(key="s2")).pk)  # the stream reads the database, and fails
        with pytest.raises(DatabaseError):
            await failing.wait(10)
    last, start = await open_served(operator, "s2")
    assert start["status"] == 200
    await hang_up(last)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_waits_for_what_is_published_without_reading_the_database_meanwhile(operator, assistant, monkeypatch):
    """An idle stream reads the database for nothing: what a turn publishes reaches it from the channel layer. It
    read the database every 0.2 s (100 idle streams took 0.73 of a core)."""
    from agents import live

    await sync_to_async(run_ok)(operator, {"message": "hello", "sessionId": "s1"})
    session, run = await running_run()  # placed by the stream's first look at the database
    stream = await open_stream(operator)
    await stream.turn()
    reads = database_reads(monkeypatch)
    waiting = asyncio.ensure_future(stream.frame())
    await asyncio.sleep(1)
    await live.publish(session.pk, [envelope(run.id, "run.started")])
    started = await asyncio.wait_for(waiting, 5)
    await stream.close()

    assert (started["id"], started["event"]) == ("1.1", "run.started")
    assert reads == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_the_next_turn_of_the_session_reaches_the_stream_without_a_look_at_the_database(
    operator, assistant, monkeypatch
):
    """A stream standing at the end of a turn places the session's next run from its first live event, which names
    the run it follows: with 100 streams on a session, a new turn was 100 reads of the database."""
    await sync_to_async(run_ok)(operator, {"message": "hello", "sessionId": "s1"})
    stream = await open_stream(operator)
    await stream.turn()
    reads = database_reads(monkeypatch)
    await sync_to_async(run_ok)(operator, {"message": "hello again", "sessionId": "s1"})
    second = await stream.turn()
    await stream.close()

    assert reads == []
    stored = [f for f in second if "id" in f]
    in_db = (await sync_to_async(stored_in_order)("s1"))[-len(stored) :]
    assert [(f["data"]["runId"], f["data"]["sequence"], f["data"]["id"], f["event"]) for f in stored] == in_db
    assert [f["id"] for f in stored] == [f"1.{n}" for n in range(1, len(stored) + 1)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_still_reads_the_database_now_and_then_for_what_nobody_published(operator, assistant, monkeypatch):
    """A message the channel layer lost is not lost to the stream: it reads the database every
    SESSION_RECHECK_SECONDS all the same."""
    from django.utils import timezone

    monkeypatch.setattr("agents.api.stream_routes.SESSION_RECHECK_SECONDS", 0.5)
    await sync_to_async(run_ok)(operator, {"message": "hello", "sessionId": "s1"})
    _, run = await running_run()
    stream = await open_stream(operator)
    await stream.turn()

    await Event.objects.acreate(run=run, sequence=1, type="run.started", data={}, timestamp=timezone.now())
    started = await stream.frame(timeout=5)
    await stream.close()
    assert (started["id"], started["event"]) == ("1.1", "run.started")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_a_reply_that_streams_without_a_pause_reaches_the_stream_as_it_streams(operator, assistant):
    """The stream reads the database when a run it does not know starts, then takes in the live events that
    came meanwhile for a moment in all: a fast model's deltas, which never pause that long, were taken in until
    the reply ended, and the reader got none of them while the turn streamed."""
    from agents import live

    await sync_to_async(run_ok)(operator, {"message": "hello", "sessionId": "s1"})
    stream = await open_stream(operator)
    await stream.turn()
    session, run = await running_run()
    streaming = asyncio.Event()
    streaming.set()

    async def reply() -> None:
        # The new run's first stored event (unknown to the stream: it reads the database), then its deltas.
        await live.publish(session.pk, [envelope(run.id, "run.started")])
        deadline = asyncio.get_running_loop().time() + 5
        while streaming.is_set() and asyncio.get_running_loop().time() < deadline:
            await live.publish(session.pk, [envelope(run.id, "assistant.message_delta", ephemeral=True)])
            await asyncio.sleep(0)
        streaming.clear()

    replying = asyncio.create_task(reply())
    try:
        started = await stream.frame()
        delta = await stream.frame()
        still_streaming = streaming.is_set()
    finally:
        streaming.clear()
        await replying
        await stream.close()

    assert (started["id"], started["event"]) == ("1.1", "run.started")
    assert delta["event"] == "assistant.message_delta"
    assert still_streaming, "the delta came only once the reply stopped"


def test_a_delta_of_a_run_the_stream_does_not_know_yet_waits_for_it_instead_of_being_lost():
    """A turn that does not stream reports its reply as one delta, in the first message the stream gets of that
    run: it waits with the run's stored events until the database says where the run stands, then comes right
    after the event it follows; a delta whose moment passed is dropped."""
    from datetime import UTC, datetime

    import console.urls  # noqa: F401  # the API's modules, loaded in their order (agents.api alone would be a cycle)
    from agents import live
    from agents.api.stream_routes import SessionPosition, _SessionFollower

    def published(run: str, sequence: int, kind: str, ephemeral: bool = False) -> live.Published:
        envelope = {"runId": run, "sequence": sequence, "ephemeral": ephemeral, "type": kind, "id": f"{run}.{sequence}"}
        return live.Published.of({**envelope, "timestamp": "t", "data": {}})

    first, second = (datetime(2026, 12, 1, tzinfo=UTC), "a"), (datetime(2026, 12, 1, 0, 1, tzinfo=UTC), "b")
    follower = _SessionFollower(SessionPosition(0, 4, first))  # type: ignore[arg-type]
    follower.runs["a"] = (0, first)  # type: ignore[assignment]
    arriving = [
        published("b", 1, "run.started"),
        published("b", 2, "assistant.turn_start"),
        published("b", 2, "assistant.message_delta", ephemeral=True),
        published("a", 3, "assistant.message_delta", ephemeral=True),  # after an event long delivered: too late
    ]
    assert [frame for event in arriving for frame in follower.live(event)] == []

    follower.runs["b"] = (1, second)  # type: ignore[assignment]  # the database read: run b comes next
    frames = list(follower.release_held())

    assert [frame.split("\n")[:2] for frame in frames] == [
        ["id: 1.1", "event: run.started"],
        ["id: 1.2", "event: assistant.turn_start"],
        ["event: assistant.message_delta", f"data: {arriving[2].encoded}"],
    ]
    assert follower.held == []


def test_a_delta_that_came_while_the_database_was_read_comes_between_the_events_the_database_gave():
    """The live events that arrive while the stream reads the database are held first (`follow_session` drains
    them): when the database then gives the stored events around a delta, the delta comes right after the
    event it follows instead of being dropped as late."""
    from datetime import UTC, datetime

    import console.urls  # noqa: F401  # the API's modules, loaded in their order (agents.api alone would be a cycle)
    from agents import live
    from agents.api.stream_routes import SessionPosition, _SessionFollower

    def published(sequence: int, kind: str, ephemeral: bool = False) -> live.Published:
        envelope = {"runId": "b", "sequence": sequence, "ephemeral": ephemeral, "type": kind, "id": f"b.{sequence}"}
        return live.Published.of({**envelope, "timestamp": "t", "data": {}})

    run = (datetime(2026, 12, 1, tzinfo=UTC), "b")
    follower = _SessionFollower(SessionPosition(1, 1, run))  # type: ignore[arg-type]
    follower.runs["b"] = (1, run)  # type: ignore[assignment]
    turn_start, delta, message = (
        published(2, "assistant.turn_start"),
        published(2, "assistant.message_delta", ephemeral=True),
        published(3, "assistant.message"),
    )
    follower.held += [turn_start, delta, message]  # as drained after the look at the database

    frames = [
        frame
        for sequence, event in ((2, turn_start), (3, message))
        for frame in follower.deliver(SessionPosition(1, sequence, run), event)  # type: ignore[arg-type]
    ]
    frames += list(follower.release_held())

    assert [frame.split("\n")[:2] for frame in frames] == [
        ["id: 1.2", "event: assistant.turn_start"],
        ["event: assistant.message_delta", f"data: {delta.encoded}"],
        ["id: 1.3", "event: assistant.message"],
    ]
    assert follower.held == []


def test_a_run_that_names_the_run_it_follows_is_placed_only_once_that_runs_turn_ended():
    """A live first event names the run before it: the stream places its run without the database only when it
    stands at that run's turn end; before that end was delivered (it may still be on its way), or after another
    run, the event waits for the database as before."""
    from datetime import UTC, datetime

    import console.urls  # noqa: F401  # the API's modules, loaded in their order (agents.api alone would be a cycle)
    from agents import live
    from agents.api.stream_routes import SessionPosition, _SessionFollower

    first_id, second_id = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"
    first, created = (datetime(2026, 12, 1, tzinfo=UTC), first_id), datetime(2026, 12, 1, 0, 1, tzinfo=UTC)

    def published(run: str, sequence: int, kind: str, follows: tuple[str, str] | None = None) -> live.Published:
        envelope = {"runId": run, "sequence": sequence, "ephemeral": False, "type": kind, "id": f"{run}.{sequence}"}
        return live.Published.of({**envelope, "timestamp": "t", "data": {}}, follows)

    def follower_at(sequence: int) -> _SessionFollower:
        follower = _SessionFollower(SessionPosition(0, sequence - 1, first))  # type: ignore[arg-type]
        follower.runs[first_id] = (0, first)  # type: ignore[assignment]
        return follower

    starts = published(second_id, 1, "run.started", (first_id, created.isoformat()))
    assert published(second_id, 2, "assistant.turn_start", (first_id, created.isoformat())).follows is None

    def heads(frames: Any) -> list[str]:
        kept = ([line for line in frame.split("\n") if line and not line.startswith("data: ")] for frame in frames)
        return [" ".join(lines) for lines in kept]

    ended = follower_at(4)
    assert heads(ended.live(published(first_id, 4, "run.completed"))) == [
        "id: 0.4 event: run.completed",
        "event: session.idle",
    ]
    assert heads(ended.live(starts)) == ["id: 1.1 event: run.started"]
    assert ended.runs[second_id] == (1, (created, uuid.UUID(second_id)))

    midway = follower_at(3)  # the first run's end not delivered yet
    assert list(midway.live(published(first_id, 3, "assistant.message"))) != []
    assert list(midway.live(starts)) == [] and midway.held == [starts] and second_id not in midway.runs

    elsewhere = follower_at(4)
    list(elsewhere.live(published(first_id, 4, "run.completed")))
    other = published(second_id, 1, "run.started", ("00000000-0000-0000-0000-00000000000c", created.isoformat()))
    assert list(elsewhere.live(other)) == [] and second_id not in elsewhere.runs
