"""A run's event log: the stored chain, what never gets stored, and the two SSE streams (a run started
with `Accept: text/event-stream`, and following a run's events with `Last-Event-ID`)."""

import json
import uuid
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient

from agents.models import Event, Run
from tests.helpers import (
    EMAIL,
    ask_to_send,
    assert_problem,
    call_line,
    run_ok,
    snapshot,
    upload,
)

# Never stored: they only stream. (The SDK also calls `assistant.usage` and its requests ephemeral: those are kept.)
TRANSIENT = {"assistant.message_delta", "assistant.reasoning_delta", "session.idle"}
SDK_EPHEMERAL_KEPT = {"assistant.usage", "user_input.requested", "user_input.completed"}


def events_of(persona, run_id: str) -> list[dict[str, Any]]:
    response = persona.api("GET", f"/api/runs/{run_id}/events")
    assert response.status_code == 200, response.content
    return response.json()["items"]


def assert_chain(run_id: str, events: list[dict[str, Any]], after: str | None = None) -> None:
    """Sequence 1..n without gaps, each event's parent the one before (the first's: `after`, the last event of the
    session's run before, SPEC section 10), nothing transient, `ephemeral` as the SDK flags the type."""
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert [e["parentId"] for e in events] == [after] + [e["id"] for e in events[:-1]]
    assert len({e["id"] for e in events}) == len(events)
    for event in events:
        assert event["runId"] == run_id
        assert event["ephemeral"] is (event["type"] in SDK_EPHEMERAL_KEPT)
        assert event["type"] not in TRANSIENT
        assert datetime.fromisoformat(event["timestamp"]).tzinfo is not None
        uuid.UUID(event["id"])


def test_it_stores_the_chain_of_a_completed_run(operator, assistant):
    result = run_ok(operator, {"message": "hello there", "sessionId": "s1"})

    events = events_of(operator, result["runId"])

    assert_chain(result["runId"], events)
    assert [e["type"] for e in events] == [
        "run.started",
        "user.message",
        "assistant.turn_start",
        "assistant.message",
        "assistant.usage",
        "assistant.turn_end",
        "run.completed",
    ]
    data = {e["type"]: e["data"] for e in events}
    assert data["user.message"] == {"content": "hello there"}
    message = data["assistant.message"]
    assert message["content"] == "You said: hello there" and "toolRequests" not in message
    assert data["run.completed"] == {"output": "You said: hello there"}
    assert data["run.started"]["sessionId"] == "s1"
    assert data["assistant.usage"]["model"] == "scripted"  # one per model call
    assert data["assistant.turn_start"]["turnId"] == data["assistant.turn_end"]["turnId"]


def test_it_stores_the_chain_of_a_run_that_waits(operator, assistant):
    asked = ask_to_send(operator)

    events = events_of(operator, asked["runId"])

    assert_chain(asked["runId"], events)
    types = [e["type"] for e in events]
    assert types[:3] == ["run.started", "user.message", "assistant.turn_start"]
    assert types[-2:] == ["permission.requested", "run.awaiting"]
    assert "assistant.turn_end" in types
    assert "run.completed" not in types
    data = {e["type"]: e["data"] for e in events}
    [pending] = asked["pendingRequests"]
    assert data["permission.requested"]["requestId"] == pending["requestId"]
    asked_for = data["permission.requested"]["permissionRequest"]
    assert (asked_for["kind"], asked_for["toolName"], asked_for["args"]) == ("custom-tool", "send_email", EMAIL)
    assert data["run.awaiting"] == {"status": "awaiting_approval", "pendingRequests": [pending]}


def test_it_goes_on_with_the_sessions_chain_in_each_run(operator, assistant):
    asked = ask_to_send(operator)
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    result = run_ok(operator, {"sessionId": "s1", "approvals": [approval]})
    sessionless = run_ok(operator, {"message": "hello"})

    events = events_of(operator, result["runId"])

    assert_chain(result["runId"], events, after=events_of(operator, asked["runId"])[-1]["id"])
    assert_chain(sessionless["runId"], events_of(operator, sessionless["runId"]))  # a run without a session: its own
    types = [e["type"] for e in events]
    assert types[:4] == ["run.started", "permission.completed", "request.answered", "assistant.turn_start"]
    assert "user.message" not in types
    # The approved call runs inside the continuation's turn, which ends after it.
    assert (
        types.index("assistant.turn_start")
        < types.index("tool.execution_start")
        < types.index("tool.execution_complete")
        < types.index("assistant.turn_end")
        < types.index("run.completed")
    )
    completed = next(e["data"] for e in events if e["type"] == "tool.execution_complete")
    assert completed == {"toolCallId": "call_1", "success": True, "result": {"content": "sent to ada@example.com"}}


def test_it_stores_no_ephemeral_event(operator, assistant):
    run_ok(operator, {"message": "a reply long enough to stream in several chunks", "sessionId": "s1"})
    ask_to_send(operator, session="s2")

    assert Event.objects.exists()
    assert not Event.objects.filter(type__in=TRANSIENT).exists()


def test_it_keeps_document_content_out_of_the_event_log(operator, assistant, media):
    secret = "The launch code is 7f3a-SECRET-91c2."
    attached = upload(operator, "attached.txt", f"Attached: {secret}".encode()).json()
    documents = [{"name": "plan.md", "content": f"# Plan\n{secret}"}]

    result = run_ok(
        operator,
        {"message": "echo documents", "documents": documents, "attachmentIds": [attached["id"]], "sessionId": "s1"},
    )

    assert result["output"] == "plan.md\nattached.txt"
    events = events_of(operator, result["runId"])
    assert [e["data"] for e in events if e["type"] == "document.attached"] == [
        {"name": "plan.md", "size": len(documents[0]["content"].encode())},
        {"name": "attached.txt", "size": attached["size"]},
    ]
    stored = json.dumps([e.data for e in Event.objects.all()])
    assert "7f3a-SECRET-91c2" not in stored
    assert "7f3a-SECRET-91c2" not in json.dumps(events)


def test_it_refuses_a_last_event_id_that_is_not_a_sequence(operator, assistant):
    result = run_ok(operator, {"message": "hi"})

    response = operator.api(
        "GET", f"/api/runs/{result['runId']}/events", HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="abc"
    )

    assert_problem(response, 400, "invalid_last_event_id")


# --- SSE ----------------------------------------------------------------------------------------


@pytest.fixture
async def thread_connections():
    """ORM calls made through sync_to_async open connections in asgiref's worker thread, which the test
    teardown never sees; left open, they keep PostgreSQL from dropping the test database."""
    yield
    await sync_to_async(connections.close_all)()


def frames(body: str) -> list[dict[str, Any]]:
    """Server-sent events as dicts: `id` (int, absent when the frame has none), `event`, `data` (decoded)."""
    parsed = []
    for block in body.strip().split("\n\n"):
        frame: dict[str, Any] = {}
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "id":
                frame["id"] = int(value)
            elif field == "event":
                frame["event"] = value
            elif field == "data":
                frame["data"] = json.loads(value)
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        parsed.append(frame)
    return parsed


async def read_stream(response) -> str:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    chunks = [chunk async for chunk in response.streaming_content]
    return b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks).decode()


def sse_headers(persona, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {persona.token}", "Accept": "text/event-stream", **more}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_streams_a_run_with_deltas_and_ends_with_the_result(operator, assistant):
    message = "please say these several words back"
    response = await AsyncClient().post(
        "/api/agents/assistant/runs",
        json.dumps({"message": message, "sessionId": "s1"}),
        content_type="application/json",
        headers=sse_headers(operator),
    )

    streamed = frames(await read_stream(response))

    done = streamed[-1]
    assert done["event"] == "done"
    assert "id" not in done
    result = done["data"]
    assert result["status"] == "completed"
    assert result["output"] == f"You said: {message}"
    deltas = [f for f in streamed if f["event"] == "assistant.message_delta"]
    assert len(deltas) > 1
    assert all("id" not in f and f["data"]["ephemeral"] is True for f in deltas)
    assert "".join(f["data"]["data"]["deltaContent"] for f in deltas) == result["output"]
    # The turn's close ends the stream before the result (SPEC section 10), ephemeral like the deltas.
    assert streamed[-2]["event"] == "session.idle" and "id" not in streamed[-2]
    assert streamed[-2]["data"]["data"] == {"aborted": False}
    stored = [f for f in streamed[:-2] if f["event"] != "assistant.message_delta"]
    assert [f["id"] for f in stored] == list(range(1, len(stored) + 1))
    assert all(f["id"] == f["data"]["sequence"] and f["event"] == f["data"]["type"] for f in stored)
    assert stored[0]["event"] == "run.started"
    assert stored[-1]["event"] == "run.completed"
    types = [f["event"] for f in streamed]
    assert types.index("assistant.turn_start") < types.index("assistant.message_delta")
    assert max(i for i, t in enumerate(types) if t == "assistant.message_delta") < types.index("assistant.message")
    # What streamed live is what was stored, and the result is the run's.
    in_db = await sync_to_async(
        lambda: [(e.sequence, str(e.id), e.type) for e in Event.objects.filter(run_id=result["runId"])]
    )()
    assert in_db == [(f["id"], f["data"]["id"], f["event"]) for f in stored]
    got = await sync_to_async(operator.api)("GET", f"/api/runs/{result['runId']}")
    assert got.json() == result


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_streams_a_run_that_waits(operator, assistant):
    response = await AsyncClient().post(
        "/api/agents/assistant/runs",
        json.dumps({"message": call_line("send_email", EMAIL), "sessionId": "s1"}),
        content_type="application/json",
        headers=sse_headers(operator),
    )

    streamed = frames(await read_stream(response))

    assert [f["event"] for f in streamed[-4:]] == ["permission.requested", "run.awaiting", "session.idle", "done"]
    result = streamed[-1]["data"]
    assert result["status"] == "awaiting_approval"
    assert [p["toolName"] for p in result["pendingRequests"]] == ["send_email"]
    assert streamed[-4]["data"]["data"]["requestId"] == result["pendingRequests"][0]["requestId"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_answers_a_rejected_streamed_run_with_a_problem(operator, assistant):
    before = await sync_to_async(snapshot)()

    response = await AsyncClient().post(
        "/api/agents/assistant/runs",
        json.dumps({"message": "hi", "parameters": {"nope": 1}}),
        content_type="application/json",
        headers=sse_headers(operator),
    )

    assert response.status_code == 400
    assert response.json()["code"] == "unknown_parameter"
    assert await sync_to_async(snapshot)() == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_resumes_the_event_stream_after_the_last_event_id(operator, assistant):
    result = await sync_to_async(run_ok)(operator, {"message": "hello", "sessionId": "s1"})
    stored = await sync_to_async(
        lambda: list(Event.objects.filter(run_id=result["runId"]).values_list("sequence", "type"))
    )()
    assert len(stored) > 4

    response = await AsyncClient().get(
        f"/api/runs/{result['runId']}/events", headers=sse_headers(operator, **{"Last-Event-ID": "3"})
    )

    streamed = frames(await read_stream(response))
    assert [(f["id"], f["event"]) for f in streamed[:-2]] == stored[3:]
    assert streamed[0]["id"] == 4
    assert [f["event"] for f in streamed[-2:]] == ["session.idle", "done"]
    assert streamed[-1]["data"]["runId"] == result["runId"]
    assert streamed[-1]["data"]["output"] == "You said: hello"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_streams_every_stored_event_without_a_last_event_id(operator, assistant):
    result = await sync_to_async(run_ok)(operator, {"message": "hello"})

    response = await AsyncClient().get(f"/api/runs/{result['runId']}/events", headers=sse_headers(operator))

    streamed = frames(await read_stream(response))
    count = await sync_to_async(Event.objects.filter(run_id=result["runId"]).count)()
    assert [f["id"] for f in streamed[:-2]] == list(range(1, count + 1))
    assert [f["event"] for f in streamed[-2:]] == ["session.idle", "done"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_it_hides_the_event_stream_from_an_outsider(operator, outsider, assistant):
    result = await sync_to_async(run_ok)(operator, {"message": "hello"})

    response = await AsyncClient().get(f"/api/runs/{result['runId']}/events", headers=sse_headers(outsider))

    assert response.status_code == 404
    assert await sync_to_async(Run.objects.count)() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_a_stream_resumed_after_the_end_still_closes_with_session_idle(operator, assistant):
    result = await sync_to_async(run_ok)(operator, {"message": "hello"})
    count = await sync_to_async(Event.objects.filter(run_id=result["runId"]).count)()

    response = await AsyncClient().get(
        f"/api/runs/{result['runId']}/events", headers=sse_headers(operator, **{"Last-Event-ID": str(count)})
    )

    streamed = frames(await read_stream(response))
    assert [f["event"] for f in streamed] == ["session.idle", "done"]
    assert streamed[0]["data"]["sequence"] == count
