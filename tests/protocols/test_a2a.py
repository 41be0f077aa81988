"""A2A (SPEC section 16) through the console's ASGI application, with the a2a-sdk's own client: the agent card, a
task sent and run, a pause as `input-required` with its requests as a DataPart, answered by a message or in the
inbox, a cancel, the 0.3 method names, and every refusal (no token, another tenant's agent, bad answers) in the
protocol's error shape with nothing changed."""

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, AgentCardResolutionError, ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
from asgiref.sync import sync_to_async
from google.protobuf.json_format import MessageToDict, ParseDict

from agents.claiming import drain
from agents.models import Run, RunStatus
from approvals.models import Approval, PendingRequest, RequestStatus
from console.asgi import application
from tests.conftest import Persona, make_persona
from tests.helpers import EMAIL, ask_for_a_day, call_line, make_agent, snapshot

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "http://testserver"
ENDPOINT = f"{BASE}/a2a/assistant"
SEND = call_line("send_email", EMAIL)


def http(persona: Persona | None, **headers: str) -> httpx.AsyncClient:
    auth = {"Authorization": f"Bearer {persona.token}"} if persona else {}
    transport = httpx.ASGITransport(app=application)
    return httpx.AsyncClient(transport=transport, base_url=BASE, headers={**auth, **headers}, timeout=30)


@asynccontextmanager
async def a2a(persona: Persona, *, streaming: bool = False) -> AsyncIterator[Client]:
    """The a2a-sdk's client of the assistant, from its card, with `persona`'s token."""
    async with http(persona) as session:
        card = await A2ACardResolver(session, ENDPOINT).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=session, streaming=streaming)).create(card)
        yield client


def said(text: str, **ids: str) -> SendMessageRequest:
    message = Message(message_id="m-" + text[:8], role=Role.ROLE_USER, parts=[Part(text=text)], **ids)
    return SendMessageRequest(message=message)


def answering(task: Task, *answers: Any) -> SendMessageRequest:
    """A message on `task` whose DataPart holds `answers` (one object, or a list of them)."""
    part = Part()
    ParseDict(answers[0] if len(answers) == 1 else list(answers), part.data)
    message = Message(message_id="answer", role=Role.ROLE_USER, task_id=task.id, context_id=task.context_id)
    message.parts.append(part)
    return SendMessageRequest(message=message)


async def sent(client: Client, request: SendMessageRequest) -> Task:
    responses: list[StreamResponse] = [response async for response in client.send_message(request)]
    assert responses[-1].HasField("task"), responses
    return responses[-1].task


def waiting_on(task: Task) -> list[dict[str, Any]]:
    """The requests an `input-required` task's status holds in its DataPart."""
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task.status
    data = [MessageToDict(part.data) for part in task.status.message.parts if part.HasField("data")]
    assert len(data) == 1, task.status.message
    return data[0]["pendingRequests"]  # type: ignore[no-any-return]


@pytest.fixture
def assistant(admin: Persona) -> Any:
    return make_agent(admin)


@pytest.fixture
def worker() -> Any:
    """A worker of this process running queued runs (an answer's continuation) while a test waits."""
    stop = threading.Event()

    def work() -> None:
        from django.db import connections

        try:
            while not stop.wait(0.05):
                drain()
        finally:
            connections.close_all()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(10)


async def test_it_publishes_the_card_of_a_hosted_agent(assistant, reader):
    async with http(reader) as session:
        card = await A2ACardResolver(session, ENDPOINT).get_agent_card()
        raw = (await session.get("/a2a/assistant/.well-known/agent-card.json")).json()

    assert card.name == "assistant"
    assert {skill.id for skill in card.skills} >= {"send_email", "get_time", "get_user_location"}
    schemes = {name: MessageToDict(scheme) for name, scheme in card.security_schemes.items()}
    assert next(iter(schemes.values()))["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    versions = {(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces}
    assert versions == {(ENDPOINT, "JSONRPC", "1.0"), (ENDPOINT, "JSONRPC", "0.3")}
    assert raw["url"] == ENDPOINT and raw["protocolVersion"] in ("0.3", "0.3.0")


async def test_it_runs_a_task_to_its_end(assistant, operator):
    async with a2a(operator) as client:
        task = await sent(client, said("hello there"))

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    run = await sync_to_async(Run.objects.select_related("session").get)(id=task.id)
    assert run.session.key == task.context_id
    assert [part.text for part in task.status.message.parts] == ["You said: hello there"]
    assert [(m.role, m.parts[0].text) for m in task.history] == [
        (Role.ROLE_USER, "hello there"),
        (Role.ROLE_AGENT, "You said: hello there"),
    ]
    assert task.artifacts[0].parts[0].text == "You said: hello there"


async def test_a_pause_is_input_required_and_a_message_answers_it(assistant, operator, worker):
    async with a2a(operator) as client:
        asked = await sent(client, said(SEND))
        [request] = waiting_on(asked)
        assert (request["kind"], request["toolName"], request["status"]) == ("approval", "send_email", "pending")
        assert request["arguments"] == EMAIL

        done = await sent(client, answering(asked, {"requestId": request["requestId"], "approved": True}))

    assert done.id == asked.id and done.context_id == asked.context_id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED, done.status
    assert done.status.message.parts[0].text == "send_email: sent to ada@example.com"
    answered = await sync_to_async(PendingRequest.objects.get)(id=request["requestId"])
    assert answered.status == RequestStatus.ANSWERED and answered.answered_via == "a2a"


async def test_an_answer_in_the_inbox_moves_the_task_on(assistant, operator, admin):
    async with a2a(operator) as client:
        asked = await sent(client, said(SEND))
        [request] = waiting_on(asked)

        path = f"/api/requests/{request['requestId']}/responses"
        answered = await sync_to_async(admin.api)("POST", path, {"approved": False, "reason": "not today"})
        assert answered.json()["status"] == "accepted"
        queued = await client.get_task(GetTaskRequest(id=asked.id))
        assert queued.status.state == TaskState.TASK_STATE_SUBMITTED
        await sync_to_async(drain)()

        moved = await client.get_task(GetTaskRequest(id=asked.id))

    assert moved.status.state == TaskState.TASK_STATE_COMPLETED
    assert moved.status.message.parts[0].text == "send_email denied: not today"


async def test_cancel_ends_the_waiting_run(assistant, operator):
    async with a2a(operator) as client:
        asked = await sent(client, said(SEND))
        [request] = waiting_on(asked)
        cancelled = await client.cancel_task(CancelTaskRequest(id=asked.id))
        again = await client.get_task(GetTaskRequest(id=asked.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=asked.id))

    assert cancelled.status.state == again.status.state == TaskState.TASK_STATE_CANCELED
    run = await sync_to_async(Run.objects.get)(id=asked.id)
    closed = await sync_to_async(PendingRequest.objects.get)(id=request["requestId"])
    assert (run.status, closed.status) == (RunStatus.CANCELLED, RequestStatus.CANCELLED)


async def test_another_tenants_agent_is_not_found(assistant, outsider):
    async with http(outsider) as session:
        card = await session.get("/a2a/assistant/.well-known/agent-card.json")
        rpc = await session.post(
            "/a2a/assistant", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {}}
        )

    assert card.status_code == 404 and card.headers["content-type"] == "application/problem+json"
    assert card.json()["code"] == "agent_not_found"
    assert rpc.status_code == 404
    assert rpc.json()["error"]["code"] == -32600 and rpc.json()["id"] == 1


async def test_the_sdk_client_finds_no_agent_of_another_tenant(assistant, operator, outsider):
    async with http(outsider) as session:
        with pytest.raises(AgentCardResolutionError) as no_card:
            await A2ACardResolver(session, ENDPOINT).get_agent_card()
    # Even with the card in hand (as the agent's own tenant reads it), the outsider's token sends nothing.
    async with http(operator) as session:
        card = await A2ACardResolver(session, ENDPOINT).get_agent_card()
    async with http(outsider) as session:
        client = ClientFactory(ClientConfig(httpx_client=session, streaming=False)).create(card)
        with pytest.raises(A2AClientError, match="404"):
            await sent(client, said("hello"))

    assert no_card.value.status_code == 404
    assert await sync_to_async(Run.objects.count)() == 0


async def test_without_a_token_it_is_401(assistant):
    async with http(None) as session:
        card = await session.get("/a2a/assistant/.well-known/agent-card.json")
        rpc = await session.post("/a2a/assistant", json={"jsonrpc": "2.0", "id": 1, "method": "message/send"})
        with pytest.raises(A2AClientError, match="401"):
            await A2ACardResolver(session, ENDPOINT).get_agent_card()

    assert card.status_code == rpc.status_code == 401
    assert card.json()["code"] == "unauthenticated" and rpc.json()["error"]["message"].startswith(
        "An Airlock API token"
    )
    assert rpc.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "answer, code",
    [
        ({"requestId": "00000000-0000-0000-0000-000000000000", "approved": True}, "unknown_request"),
        ({"requestId": "not-a-request", "approved": True}, "unknown_request"),
        ({"approved": True, "result": {"x": 1}}, "response_type_mismatch"),
        ({"approved": "yes"}, "invalid_answer"),
        # What no database stores: PostgreSQL's error text came back as an internal error.
        ({"approved": False, "reason": "a\x00b"}, "invalid_request"),
    ],
)
async def test_a_bad_answer_is_refused_and_changes_nothing(assistant, operator, answer, code):
    async with a2a(operator) as client:
        asked = await sent(client, said(SEND))
        [request] = waiting_on(asked)
        before = await sync_to_async(snapshot)()
        with pytest.raises(InvalidParamsError) as refused:
            await sent(client, answering(asked, {"requestId": request["requestId"], **answer}))
        after = await sync_to_async(snapshot)()
        still = await client.get_task(GetTaskRequest(id=asked.id))

    assert refused.value.data and refused.value.data["code"] == code, refused.value
    assert after == before
    assert waiting_on(still)[0]["requestId"] == request["requestId"]


async def test_a_message_whose_text_no_database_stores_is_refused_and_starts_nothing(assistant, operator):
    async with a2a(operator) as client:
        before = await sync_to_async(snapshot)()
        with pytest.raises(InvalidParamsError) as refused:
            await sent(client, said("call\x00 me"))
        after = await sync_to_async(snapshot)()

    assert refused.value.data == {"code": "invalid_request"}, refused.value
    assert str(refused.value) == "The message's text contains a NUL character."
    assert after == before


async def test_a_quorum_vote_next_to_a_bad_answer_is_not_recorded(admin, operator):
    """send_email needs two approvals (SPEC section 14): sam's valid vote rides in one message with an answer the
    input request refuses, so neither is given and no approval is written."""
    two_keys = {"name": "send_email", "approval": "always", "require": {"approvals": 2}}
    await sync_to_async(make_agent)(admin, name="assistant", tools=[two_keys])
    sam = await sync_to_async(make_persona)("sam", admin.tenant, "operator")
    async with a2a(operator) as client:
        asked = await sent(client, said(SEND))
    [request] = waiting_on(asked)
    day = await sync_to_async(ask_for_a_day)({"pendingRequests": [request]})
    vote = {"requestId": request["requestId"], "approved": True}
    bad = {"requestId": str(day.id), "action": "accept", "content": {"day": 3}}
    before = await sync_to_async(snapshot)()
    async with a2a(sam) as client:
        with pytest.raises(InvalidParamsError) as refused:
            await sent(client, answering(asked, vote, bad))
    after = await sync_to_async(snapshot)()

    assert refused.value.data == {"code": "invalid_response", "requestId": str(day.id)}, refused.value
    assert after == before and await sync_to_async(Approval.objects.count)() == 0


def rebuilt(events: list[StreamResponse]) -> str:
    """The streamed artifact as A2A says to read it: `append` adds to it, else the chunk replaces it."""
    words = ""
    for event in events:
        if event.HasField("artifact_update"):
            chunk = event.artifact_update.artifact.parts[0].text
            words = words + chunk if event.artifact_update.append else chunk
    return words


async def test_message_stream_streams_the_reply_and_ends_with_the_tasks_state(assistant, operator):
    async with a2a(operator, streaming=True) as client:
        events = [event async for event in client.send_message(said("stream me"))]
        timed = [event async for event in client.send_message(said("the time?\ncall get_time"))]
        paused = [event async for event in client.send_message(said(SEND))]
        stored = await client.get_task(GetTaskRequest(id=timed[0].task.id))

    assert events[0].HasField("task")
    assert rebuilt(events) == "You said: stream me"
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert rebuilt(timed).startswith("get_time: ") and rebuilt(timed) == stored.artifacts[-1].parts[0].text
    last = paused[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    data = MessageToDict(last.status.message.parts[1].data)
    assert data["pendingRequests"][0]["toolName"] == "send_email"


def rpc(method: str, params: dict[str, Any], call: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": call, "method": method, "params": params}


def v03_message(text: str | None = None, data: dict[str, Any] | None = None, **ids: str) -> dict[str, Any]:
    part = {"kind": "text", "text": text} if text is not None else {"kind": "data", "data": data}
    return {"message": {"kind": "message", "messageId": f"m{len(ids)}", "role": "user", "parts": [part], **ids}}


async def test_an_answer_holding_a_number_json_has_not_is_refused_and_changes_nothing(assistant, operator):
    async with http(operator) as session:
        asked = (await session.post("/a2a/assistant", json=rpc("message/send", v03_message(SEND)))).json()["result"]
        request = asked["status"]["message"]["parts"][1]["data"]["pendingRequests"][0]
        answer = v03_message(
            data={"requestId": request["requestId"], "approved": False, "reason": 7}, taskId=asked["id"]
        )
        # `1e999` is JSON's way to an infinity, which protobuf's Value holds and no JSON column stores.
        endless = json.dumps(rpc("message/send", answer)).replace('"reason": 7', '"reason": 1e999')
        before = await sync_to_async(snapshot)()
        refused = await session.post("/a2a/assistant", content=endless, headers={"Content-Type": "application/json"})
        after = await sync_to_async(snapshot)()

    error = refused.json()["error"]
    assert (error["code"], error["data"]) == (-32602, {"code": "invalid_request"}), error
    assert "NaN or an infinity" in error["message"]
    assert after == before


FILE_PART = {"kind": "file", "file": {"bytes": "!!!notbase64", "mimeType": "text/plain"}}


@pytest.mark.parametrize(
    ("method", "params", "said"),
    [
        ("message/send", v03_message("h\ud800i"), "unpaired surrogate"),
        ("message/stream", v03_message("h\ud800i"), "unpaired surrogate"),
        ("message/send", v03_message("hi", contextId="\ud800"), "unpaired surrogate"),
        ("message/send", {"message": {**v03_message("hi")["message"], "metadata": {"k": "\ud800"}}}, "surrogate"),
        ("message/send", {"message": {**v03_message("hi")["message"], "parts": [FILE_PART]}}, "base64"),
        ("message/send", {**v03_message("hi"), "configuration": {"historyLength": 2**40}}, "out of range"),
        ("tasks/get", {"id": "\ud800"}, "unpaired surrogate"),
        ("tasks/get", {"id": "t", "historyLength": 10**30}, "out of range"),
        ("tasks/cancel", {"id": "\ud800"}, "unpaired surrogate"),
        ("message/send", v03_message(data=json.loads('{"a": ' * 60 + "1" + "}" * 60)), "too deep"),
    ],
)
async def test_a_0_3_request_the_current_protocol_cannot_hold_is_invalid_params(
    assistant, operator, method, params, said
):
    """The SDK's 0.3 adapter reads these but cannot convert them to the current protocol's types: they are the
    caller's mistake (-32602), not an internal error (-32603), and nothing is started."""
    body = json.dumps(rpc(method, params, call=9)).encode("utf-8", "surrogatepass")
    async with http(operator) as session:
        before = await sync_to_async(snapshot)()
        refused = await session.post("/a2a/assistant", content=body, headers={"Content-Type": "application/json"})
        after = await sync_to_async(snapshot)()

    answer = refused.json()
    assert (refused.status_code, answer["id"]) == (200, 9)
    assert (answer["error"]["code"], answer["error"]["data"]) == (-32602, {"code": "invalid_request"}), answer
    assert said in answer["error"]["message"]
    assert after == before


@pytest.mark.parametrize(("body", "said"), [(b"\xff", "not UTF-8"), (b"[" * 100_000, "nests too deep")])
@pytest.mark.parametrize("signed_in", [True, False])
async def test_a_body_that_cannot_be_read_is_a_parse_error(assistant, operator, body, said, signed_in):
    """Not UTF-8, or nested past what Python's parser reads: the SDK answered -32603 with Python's words, and the
    refusal of a request without a token was a 500."""
    async with http(operator if signed_in else None) as session:
        answered = await session.post("/a2a/assistant", content=body, headers={"Content-Type": "application/json"})

    if signed_in:
        assert answered.status_code == 200
        assert answered.json()["error"]["code"] == -32700 and said in answered.json()["error"]["message"]
    else:
        assert (answered.status_code, answered.json()["error"]["code"]) == (401, -32600), answered.text


async def test_a_request_over_a_megabyte_is_refused_and_one_under_it_runs(assistant, operator):
    async with http(operator) as session:
        big = rpc("message/send", v03_message("x" * (1024 * 1024)))
        refused = (await session.post("/a2a/assistant", json=big)).json()
        done = (await session.post("/a2a/assistant", json=rpc("message/send", v03_message("y" * 1000)))).json()

    assert refused["error"]["code"] == -32600 and "too large" in refused["error"]["message"], refused
    assert done["result"]["status"]["state"] == "completed", done


async def test_the_0_3_names_send_get_and_cancel(assistant, operator, worker):
    async with http(operator) as session:
        done = (await session.post("/a2a/assistant", json=rpc("message/send", v03_message("hi")))).json()["result"]
        asked = (await session.post("/a2a/assistant", json=rpc("message/send", v03_message(SEND)))).json()["result"]
        request = asked["status"]["message"]["parts"][1]["data"]["pendingRequests"][0]
        answer = v03_message(data={"requestId": request["requestId"], "approved": True}, taskId=asked["id"])
        answered = (await session.post("/a2a/assistant", json=rpc("message/send", answer))).json()["result"]
        got = (await session.post("/a2a/assistant", json=rpc("tasks/get", {"id": done["id"]}))).json()["result"]
        other = (await session.post("/a2a/assistant", json=rpc("message/send", v03_message(SEND)))).json()["result"]
        cancel = rpc("tasks/cancel", {"id": other["id"]})
        cancelled = (await session.post("/a2a/assistant", json=cancel)).json()["result"]

    assert (done["kind"], done["status"]["state"]) == ("task", "completed")
    assert done["status"]["message"]["parts"] == [{"kind": "text", "text": "You said: hi"}]
    assert asked["status"]["state"] == "input-required" and request["kind"] == "approval"
    assert answered["status"]["state"] == "completed"
    assert answered["status"]["message"]["parts"][0]["text"] == "send_email: sent to ada@example.com"
    assert got["id"] == done["id"] and [m["role"] for m in got["history"]] == ["user", "agent"]
    assert cancelled["status"]["state"] == "canceled"


async def streamed_0_3(session: httpx.AsyncClient, text: str) -> list[dict[str, Any]]:
    """The results of a 0.3 `message/stream` of `text`: each server-sent event's JSON-RPC response."""
    results = []
    async with session.stream("POST", "/a2a/assistant", json=rpc("message/stream", v03_message(text))) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                answer = json.loads(line.removeprefix("data: "))
                assert answer["jsonrpc"] == "2.0" and answer["id"] == 1 and "error" not in answer, answer
                results.append(answer["result"])
    return results


async def test_the_0_3_name_message_stream_streams_the_reply_and_the_pause(assistant, operator):
    async with http(operator) as session:
        reply = await streamed_0_3(session, "stream me")
        paused = await streamed_0_3(session, SEND)

    assert reply[0]["kind"] == "task" and reply[0]["status"]["state"] == "working"
    chunks = [r["artifact"] for r in reply if r["kind"] == "artifact-update"]
    assert len(chunks) > 1 and "".join(chunk["parts"][0]["text"] for chunk in chunks) == "You said: stream me"
    last = reply[-1]
    assert (last["kind"], last["final"], last["status"]["state"]) == ("status-update", True, "completed")
    assert last["status"]["message"]["parts"] == [{"kind": "text", "text": "You said: stream me"}]
    assert {r.get("taskId", r.get("id")) for r in reply} == {reply[0]["id"]}
    waiting = paused[-1]  # the stream's last (the SDK's 0.3 conversion marks only ended states `final`)
    assert (waiting["kind"], waiting["status"]["state"]) == ("status-update", "input-required")
    [request] = waiting["status"]["message"]["parts"][1]["data"]["pendingRequests"]
    assert (request["kind"], request["toolName"], request["arguments"]) == ("approval", "send_email", EMAIL)


async def test_answering_a_closed_request_is_refused_and_changes_nothing(assistant, operator):
    async with a2a(operator) as client:
        asked = await sent(client, said(SEND))
        [request] = waiting_on(asked)
        other = await sent(client, said(SEND, context_id="elsewhere"))
        await client.cancel_task(CancelTaskRequest(id=asked.id))
        before = await sync_to_async(snapshot)()
        with pytest.raises(UnsupportedOperationError) as ended:
            await sent(client, answering(asked, {"requestId": request["requestId"], "approved": True}))
        [theirs] = waiting_on(other)
        with pytest.raises(InvalidParamsError) as closed:
            # A request of the task's session that was closed: the cancelled one, answered on the other task.
            await sent(client, answering(other, {"requestId": request["requestId"], "approved": True}))
        after = await sync_to_async(snapshot)()

    assert ended.value.data and ended.value.data["code"] == "task_ended"
    assert closed.value.data and closed.value.data["code"] == "unknown_request"
    assert after == before and theirs["status"] == "pending"


async def test_a_request_answered_in_the_inbox_is_refused_by_message_and_changes_nothing(assistant, operator, admin):
    async with a2a(operator) as client:
        asked = await sent(client, said(f"{SEND}\ncall get_user_location"))
        approval, location = sorted(waiting_on(asked), key=lambda wire: wire["kind"])
        path = f"/api/requests/{approval['requestId']}/responses"
        assert (await sync_to_async(admin.api)("POST", path, {"approved": True})).json()["status"] == "accepted"
        before = await sync_to_async(snapshot)()
        with pytest.raises(InvalidParamsError) as refused:
            await sent(client, answering(asked, {"requestId": approval["requestId"], "approved": False}))
        after = await sync_to_async(snapshot)()
        still = await client.get_task(GetTaskRequest(id=asked.id))

    assert refused.value.data and refused.value.data["code"] == "request_closed"
    assert after == before
    assert [wire["requestId"] for wire in waiting_on(still)] == [location["requestId"]]


async def test_a_reader_may_read_the_card_but_not_send(assistant, reader):
    async with http(reader) as session:
        response = await session.post("/a2a/assistant", json=rpc("message/send", v03_message("hi")))

    assert response.status_code == 403
    assert response.json()["error"]["data"] == {"code": "forbidden"}


@pytest.mark.parametrize(
    ("who", "status", "code"),
    [(None, 401, "unauthenticated"), ("reader", 403, "forbidden"), ("outsider", 404, "agent_not_found")],
)
async def test_a_refusal_speaks_the_callers_protocol_version(assistant, operator, reader, outsider, who, status, code):
    """A 0.3 client (0.3's method names, no `A2A-Version` header) gets a refusal in 0.3's error shape, `data` an
    object, as the SDK's own 0.3 errors come; a 1.0 client in 1.0's, `data` a list of error details."""
    persona = {None: None, "reader": reader, "outsider": outsider}[who]
    unknown = {"id": "00000000-0000-0000-0000-000000000000"}
    async with http(operator) as session:
        sdk_0_3 = (await session.post("/a2a/assistant", json=rpc("tasks/get", unknown))).json()["error"]
    async with http(persona) as session:
        refused_0_3 = await session.post("/a2a/assistant", json=rpc("message/send", v03_message("hi"), call=7))
        unread_0_3 = await session.post("/a2a/assistant", content=b"{not json")
        refused_1_0 = await session.post(
            "/a2a/assistant", json=rpc("SendMessage", {}, call="x"), headers={"A2A-Version": "1.0"}
        )

    assert refused_0_3.status_code == unread_0_3.status_code == refused_1_0.status_code == status
    assert set(sdk_0_3) == {"code", "message", "data"} and isinstance(sdk_0_3["data"], dict)
    error = refused_0_3.json()["error"]
    assert (refused_0_3.json()["id"], set(error), error["code"], error["data"]) == (
        7,
        {"code", "message", "data"},
        -32600,
        {"code": code},
    )
    assert unread_0_3.json()["id"] is None and unread_0_3.json()["error"]["data"] == {"code": code}
    error = refused_1_0.json()["error"]
    assert refused_1_0.json()["id"] == "x" and error["code"] == -32600
    [detail] = error["data"]
    assert detail["@type"].endswith("google.rpc.ErrorInfo") and detail["metadata"] == {"code": code}


async def test_an_agent_that_runs_elsewhere_has_no_card(admin, operator):
    from agents.definitions import DefinitionContent
    from agents.models import Agent

    external = DefinitionContent.model_validate({"name": "outside", "runtime": "external"})
    await sync_to_async(Agent.create)(admin.tenant, external, admin.user)
    async with http(operator) as session:
        card = await session.get("/a2a/outside/.well-known/agent-card.json")

    assert card.status_code == 404 and card.json()["code"] == "agent_not_found"


async def test_an_unknown_task_is_not_found(assistant, operator):
    async with a2a(operator) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="00000000-0000-0000-0000-000000000000"))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="nothing"))


async def test_a_streamed_answer_follows_the_continuation_to_its_end(assistant, operator, worker):
    async with a2a(operator, streaming=True) as client:
        paused = [event async for event in client.send_message(said(SEND))]
        task = paused[0].task
        [request] = MessageToDict(paused[-1].status_update.status.message.parts[1].data)["pendingRequests"]
        answer = answering(task, {"requestId": request["requestId"], "approved": True})
        followed = [event async for event in client.send_message(answer)]

    assert followed[0].task.id == task.id
    assert followed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert rebuilt(followed) == "send_email: sent to ada@example.com"


@pytest.fixture
def asker(admin: Persona) -> Any:
    return make_agent(admin, tools=[{"name": "ask_user", "approval": "never"}])


async def test_words_answer_the_one_question_a_task_waits_on(asker, operator, worker):
    async with a2a(operator) as client:
        asked = await sent(client, said(call_line("ask_user", {"question": "Which colour?"})))
        [question] = waiting_on(asked)
        reply = Message(message_id="r", role=Role.ROLE_USER, task_id=asked.id, parts=[Part(text="blue")])
        done = await sent(client, SendMessageRequest(message=reply))

    assert question["kind"] == "question" and question["question"] == "Which colour?"
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.status.message.parts[0].text == "ask_user: blue"
