"""Shared by the tests: the `assistant` agent, calling the run route, problem and no-change checks, playing
the worker for queued runs (an answer's continuation waits in the queue), and what the websocket tests check.
Fixtures live in the conftest.py files."""

import json
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django_tasks_db.models import DBTaskResult

from agents.claiming import drain
from agents.definitions import DefinitionContent
from agents.models import Agent, AgentVersion, Attachment, Checkpoint, Event, Run, RunStatus, Session
from agents.queue import run_claimed
from agents.request_kinds import RequestKind
from agents.workers import WorkerPool
from approvals.models import Approval, HeldAnswer, PendingRequest, Receipt, Rule
from approvals.push import notify_requests_closed
from tests.conftest import Persona

ASSISTANT: dict[str, Any] = {
    "name": "assistant",
    "instructions": "You help the {{team}} team. Sign as {{signature}}.",
    "instructionsByCulture": {"tr": "Merhaba {{team}} ekibi.", "tr-TR": "Türkiye: {{team}} ekibi."},
    "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time", "approval": "never"}],
    "clientTools": [
        {
            "name": "get_user_location",
            "description": "Where the user is, asked of the client.",
            "parameters": {"type": "object", "properties": {"precision": {"type": "string"}}},
        }
    ],
    "parameters": [
        {"name": "team", "kind": "text", "default": "ops"},
        {"name": "signature", "kind": "text", "default": "Airlock"},
        {"name": "budget", "kind": "number"},
        {"name": "urgent", "kind": "boolean", "default": False},
    ],
}

EMAIL = {"to": "ada@example.com", "subject": "Hello", "body": "Ship it."}


def make_agent(persona: Persona, **changes: Any) -> Agent:
    return Agent.create(persona.tenant, DefinitionContent.model_validate({**ASSISTANT, **changes}), persona.user)


def call_line(tool: str, arguments: dict[str, Any] | None = None) -> str:
    return f"call {tool} {json.dumps(arguments)}" if arguments is not None else f"call {tool}"


def run(persona: Persona, body: dict[str, Any], agent: str = "assistant", **headers: str) -> Any:
    return persona.api("POST", f"/api/agents/{agent}/runs", body, **headers)


def run_ok(persona: Persona, body: dict[str, Any], agent: str = "assistant") -> dict[str, Any]:
    response = run(persona, body, agent)
    assert response.status_code == 200, response.content
    return response.json()


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["detail"]
    return body


def snapshot() -> dict[str, Any]:
    """Every row a request may write, every field of it: agents and their versions, runs (output, error,
    queued input, lease, cancel flag), sessions (with the conversation), pending requests (answer, who,
    when, how, closing), approvals (a quorum's votes), receipts, held answers, rules, events (their data),
    attachments and queued tasks. Compare two to check that a refused request changed nothing at all."""
    return {
        model._meta.label: list(model.objects.order_by("pk").values())
        for model in (
            Agent,
            AgentVersion,
            Run,
            Session,
            Checkpoint,
            PendingRequest,
            Approval,
            Receipt,
            HeldAnswer,
            Rule,
            Event,
            Attachment,
            DBTaskResult,
        )
    }


def drain_queued(expected: int = 1) -> None:
    """Play the worker: run every ready queued run in this thread; exactly `expected` of them waited."""
    ran = drain()
    assert ran == expected, f"{ran} queued run(s) ran, expected {expected}"


def run_queued(run_id: Any) -> Run:
    """The queued run `run_id` (e.g. the continuation an answer started) after a worker ran it: it waited
    `queued` until then, and it was the only run waiting."""
    assert Run.objects.get(id=run_id).status == RunStatus.QUEUED
    drain_queued(1)
    return Run.objects.get(id=run_id)


def run_handed(pool: WorkerPool) -> None:
    """Play the pool's one thread (the `seat` fixture's): run the task a run queued in this process was handed
    to it with (no claim, nothing of the run read again), then wait for work again."""
    db_task = pool.given[0].get_nowait()
    assert db_task is not None
    run_claimed(db_task)
    pool.idle(0)


def stored_events(run_id: str) -> list[Event]:
    return list(Event.objects.filter(run_id=run_id).order_by("sequence"))


def upload(persona: Persona, name: str, content: bytes, content_type: str = "text/plain") -> Any:
    """POST /api/attachments as a multipart upload with the persona's token."""
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client

    file = SimpleUploadedFile(name, content, content_type=content_type)
    return Client().post("/api/attachments", {"file": file}, HTTP_AUTHORIZATION=f"Bearer {persona.token}")


def ask_to_send(persona: Persona, session: str = "s1", **email: str) -> dict[str, Any]:
    """A run in `session` that calls send_email and waits for its approval."""
    result = run_ok(persona, {"message": call_line("send_email", {**EMAIL, **email}), "sessionId": session})
    assert result["status"] == "awaiting_approval", result
    return result


DAY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}


def ask_for_a_day(asked: dict[str, Any], schema: dict[str, Any] = DAY_SCHEMA) -> PendingRequest:
    """An input request next to the approval `asked` opened (no MCP server needed for the question)."""
    approval = PendingRequest.objects.get(id=asked["pendingRequests"][0]["requestId"])
    return PendingRequest.objects.create(
        tenant=approval.tenant,
        agent=approval.agent,
        session=approval.session,
        run=approval.run,
        kind=RequestKind.INPUT,
        tool_name="book_meeting",
        call_id="call-day",
        message="Which day should I book?",
        requested_schema=schema,
    )


async def assert_nothing_pushed(tenant_id: int, *sockets: WebsocketCommunicator) -> None:
    """Nothing reached `sockets` (open consoles of the tenant) since their last message. A marker pushed to
    the tenant now must be the next message of each: a socket gets its messages in the order they were sent,
    so a push sent before the marker cannot slip past, however late it arrives (a short `receive_nothing()`
    wait can miss one)."""
    marker = str(uuid.uuid4())  # the id of no request
    await sync_to_async(notify_requests_closed)(tenant_id, [marker])
    for ws in sockets:
        pushed = await ws.receive_json_from(timeout=5)
        assert pushed.get("ids") == [marker], f"pushed before the marker: {pushed}"


def send_json(handler: Any, payload: Any) -> None:
    """Answer a `BaseHTTPRequestHandler`'s request 200 with `payload` as JSON (the loopback servers of tests)."""
    body = json.dumps(payload).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def swapped_out(response: Any, window: float, summary: str) -> None:
    """An htmx answer swaps its card out: for nothing when it applied at once, for its notice with an Undo when
    it is held for its window (`answer_window`)."""
    assert response.status_code == 200, response.content
    if window:
        assert f'aria-label="Undo: {summary}"' in response.content.decode(), response.content
    else:
        assert response.content == b""


def answer_said(window: float, at_once: str, summary: str) -> str:
    """What a console answer is said to have done once it applied: the inbox's message (`at_once`), or, held for
    its window (`answer_window`), its notice settled ("Approved send_email.")."""
    return f"{summary}." if window else at_once


def answer_told(persona: Persona, window: float) -> str:
    """Where the one who answered in the console reads what it did: the inbox page (applied at once), or, held
    for its window, their last answer's notice as its page asks for it when the window closes."""
    if not window:
        return persona.client.get("/inbox/").content.decode()
    batch = HeldAnswer.objects.filter(membership=persona.membership).latest("created_at").batch
    return persona.client.get(f"/inbox/held/{batch}/", HTTP_HX_REQUEST="true").content.decode()
