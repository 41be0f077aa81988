"""A real OpenAI-compatible provider behind the run API: the agent's model points at a loopback fake of
the chat completions API (tests/fakes/openai_server.py), so every request the engine sends is seen and
every reply, error and broken body is planned by the test."""

import asyncio
import importlib
import json
import socket
import time
from typing import Any

import pytest
from django.core import mail
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agents.definitions import DefinitionContent
from agents.models import Agent, Event, Run, Session
from console.models import Connection
from tests.conftest import Persona, grant
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import EMAIL, run_ok

KEY_ENV = "AIRLOCK_TEST_OPENAI_KEY"
KEY = "sk-loopback-7f3a9c"

# The engine and the OpenAI SDK take seconds to import (and the SDK loads more on its first client):
# pay that once at collection, so each test's own time shows what a run costs.
importlib.import_module("agents.engine")
OpenAIChatModel("warm-up", provider=OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="-"))


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def key(monkeypatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


def definition() -> DefinitionContent:
    return DefinitionContent.model_validate(
        {
            "name": "remote",
            "instructions": "You help the ops team.",
            "model": {"connection": "loopback", "name": "loopback-model"},
            "tools": [{"name": "get_time", "approval": "never"}, {"name": "send_email", "approval": "always"}],
        }
    )


@pytest.fixture
def loopback(acme, fake) -> Connection:
    """The installation's connection to the loopback provider, granted to acme."""
    return grant("loopback", "openai", acme, base_url=fake.base_url, api_key_env=KEY_ENV)


@pytest.fixture
def remote(admin, loopback, key) -> Agent:
    return Agent.create(admin.tenant, definition(), admin.user)


def send(persona: Persona, body: dict[str, Any]) -> dict[str, Any]:
    return run_ok(persona, body, agent="remote")


def text_of(message: dict[str, Any]) -> str:
    """A chat message's text, whether sent as a string or as content parts."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content or ""


def assert_failed(result: dict[str, Any], code: str) -> str:
    assert result["status"] == "failed", result
    assert result["output"] is None
    assert result["pendingRequests"] == []
    assert result["error"]["code"] == code, result["error"]
    [failed] = Event.objects.filter(run_id=result["runId"], type="run.failed")
    assert failed.data["error"] == result["error"]
    return result["error"]["message"]


def assert_key_kept_out() -> None:
    """The key is read from the environment when a turn needs it and written nowhere."""
    stored = [
        *[json.dumps(run.version.content) for run in Run.objects.all()],
        *[json.dumps([run.error, run.output, run.parameters]) for run in Run.objects.all()],
        *[json.dumps(event.data) for event in Event.objects.all()],
        *[json.dumps(session.conversation) for session in Session.objects.all()],
    ]
    assert stored
    assert not [text for text in stored if KEY in text]


def recovers(operator: Persona, fake: FakeOpenAI, session: str = "s1") -> None:
    """The session a failed run left behind takes the next run as if nothing happened."""
    fake.reply_text("Back again.")
    result = send(operator, {"message": "Try again", "sessionId": session})
    assert result["status"] == "completed", result
    assert result["output"] == "Back again."
    assert not fake.requests[-1].problems


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# --- replies ---------------------------------------------------------------------------------------


def test_it_completes_with_the_providers_text_and_usage(operator, remote, fake):
    fake.reply_text("Hello from the loopback.", input_tokens=42, output_tokens=7)

    result = send(operator, {"message": "Say hello", "sessionId": "s1"})

    assert result["status"] == "completed"
    assert result["output"] == "Hello from the loopback."
    assert result["usage"] == {"requests": 1, "inputTokens": 42, "outputTokens": 7}
    [request] = fake.requests
    assert request.authorization == f"Bearer {KEY}"
    assert request.model == "loopback-model"
    # Nobody watches a JSON-mode turn live, so the provider is asked without streaming.
    assert not request.stream
    assert request.roles == ["system", "user"]
    assert text_of(request.messages[0]) == "You help the ops team."
    assert text_of(request.messages[1]) == "Say hello"
    assert sorted(request.tools) == ["get_time", "send_email"]
    [message] = Event.objects.filter(run_id=result["runId"], type="assistant.message")
    assert message.data["content"] == "Hello from the loopback."
    [usage] = Event.objects.filter(run_id=result["runId"], type="assistant.usage")
    assert usage.data["model"] and usage.data["inputTokens"] == result["usage"]["inputTokens"]
    assert_key_kept_out()


def test_it_reads_the_key_from_the_environment_at_each_turn(operator, remote, fake, monkeypatch):
    fake.reply_text("One.")
    fake.reply_text("Two.")
    send(operator, {"message": "first", "sessionId": "s1"})

    monkeypatch.setenv(KEY_ENV, "sk-rotated")
    result = send(operator, {"message": "second", "sessionId": "s1"})

    assert result["output"] == "Two."
    assert [r.authorization for r in fake.requests] == [f"Bearer {KEY}", "Bearer sk-rotated"]


def test_it_runs_a_server_tool_the_provider_calls(operator, remote, fake):
    fake.reply_tool_call("get_time", {}, call_id="call_time")
    fake.reply_text("It is noon.", input_tokens=20, output_tokens=4)

    result = send(operator, {"message": "What time is it?", "sessionId": "s1"})

    assert result["status"] == "completed"
    assert result["output"] == "It is noon."
    assert result["usage"] == {"requests": 2, "inputTokens": 30, "outputTokens": 9}
    first, second = fake.requests
    assert first.roles == ["system", "user"]
    assert second.roles == ["system", "user", "assistant", "tool"]
    assert second.messages[2]["tool_calls"][0]["function"]["name"] == "get_time"
    tool_message = second.messages[3]
    assert tool_message["tool_call_id"] == "call_time"
    [completed] = Event.objects.filter(run_id=result["runId"], type="tool.execution_complete")
    assert completed.data["success"] is True
    assert text_of(tool_message) == completed.data["result"]["content"]


def test_it_tells_the_provider_a_call_was_denied(operator, remote, fake):
    fake.reply_tool_call("send_email", EMAIL, call_id="call_mail")
    asked = send(operator, {"message": "Email Ada", "sessionId": "s1"})
    assert asked["status"] == "awaiting_approval"
    [pending] = asked["pendingRequests"]
    assert (pending["kind"], pending["toolName"], pending["callId"], pending["arguments"]) == (
        "approval",
        "send_email",
        "call_mail",
        EMAIL,
    )
    assert len(fake.requests) == 1

    fake.reply_text("Understood, I did not send it.")
    denial = {"requestId": pending["requestId"], "approved": False, "reason": "Not on a Friday"}
    result = send(operator, {"sessionId": "s1", "approvals": [denial]})

    assert result["status"] == "completed"
    assert result["output"] == "Understood, I did not send it."
    assert result["previousRunId"] == asked["runId"]
    assert mail.outbox == []
    answered = fake.requests[1]
    assert answered.roles == ["system", "user", "assistant", "tool"]
    assert answered.messages[3]["tool_call_id"] == "call_mail"
    assert "Not on a Friday" in text_of(answered.messages[3])
    assert_key_kept_out()


def test_it_sends_the_email_the_provider_asked_for_once_approved(operator, remote, fake):
    fake.reply_tool_call("send_email", EMAIL, call_id="call_mail")
    asked = send(operator, {"message": "Email Ada", "sessionId": "s1"})

    fake.reply_text("Sent.")
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    result = send(operator, {"sessionId": "s1", "approvals": [approval]})

    assert result["output"] == "Sent."
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    assert text_of(fake.requests[1].messages[3]) == "sent to ada@example.com"


# --- failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (500, "provider_server_error"),
        (503, "provider_unavailable"),
        (429, "provider_rate_limited"),
        (401, "provider_auth_failed"),
        (404, "provider_model_not_found"),
    ],
)
def test_it_fails_the_run_on_a_provider_error_and_keeps_the_session(operator, remote, fake, status, code):
    fake.fail(status)

    started = time.monotonic()
    result = send(operator, {"message": "Say hello", "sessionId": "s1"})

    assert time.monotonic() - started < 5, "the engine must not wait out the SDK's retries"
    message = assert_failed(result, code)
    assert message.startswith("The model provider failed")
    assert KEY not in message
    # Asked once: a retry belongs to whoever runs the turn again, not to a request thread sleeping.
    assert len(fake.requests) == 1
    recovers(operator, fake)
    assert fake.requests[-1].roles == ["system", "user"]


def test_it_does_not_wait_out_a_retry_after(operator, remote, fake):
    fake.fail(429, headers={"Retry-After": "60"})

    started = time.monotonic()
    result = send(operator, {"message": "Say hello", "sessionId": "s1"})

    assert time.monotonic() - started < 5
    assert_failed(result, "provider_rate_limited")


def test_it_fails_the_run_when_the_provider_is_unreachable(operator, admin, key, fake, loopback):
    loopback.base_url = closed_port_url()
    loopback.save()
    Agent.create(admin.tenant, definition(), admin.user)

    started = time.monotonic()
    result = send(operator, {"message": "Say hello", "sessionId": "s1"})

    assert time.monotonic() - started < 5
    message = assert_failed(result, "provider_unreachable")
    assert "connect" in message.lower()
    # The installation's operator fixes the base URL; the session's next turn uses it.
    loopback.base_url = fake.base_url
    loopback.save()
    recovers(operator, fake)


def test_it_fails_the_run_on_a_malformed_reply(operator, remote, fake):
    fake.reply_malformed()

    result = send(operator, {"message": "Say hello", "sessionId": "s1"})

    message = assert_failed(result, "provider_malformed_reply")
    assert message.startswith("The model's reply could not be used")
    recovers(operator, fake)


def test_it_fails_the_run_when_the_key_variable_is_not_set(operator, remote, fake, monkeypatch):
    monkeypatch.delenv(KEY_ENV)

    result = send(operator, {"message": "Say hello", "sessionId": "s1"})

    assert assert_failed(result, "provider_key_missing") == f"The environment variable {KEY_ENV} is not set."
    assert fake.requests == []
    monkeypatch.setenv(KEY_ENV, KEY)
    recovers(operator, fake)


@pytest.mark.django_db(transaction=True)
async def test_it_streams_from_the_provider_when_the_turn_is_watched(remote, fake, operator):
    from asgiref.sync import sync_to_async
    from django.test import AsyncClient

    fake.reply_text("Hello from the loopback.", input_tokens=3, output_tokens=4)
    response = await AsyncClient().post(
        "/api/agents/remote/runs",
        {"message": "Say hello", "sessionId": "watched"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {operator.token}", "Accept": "text/event-stream"},
    )
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    assert "event: done" in body and "Hello from the loopback." in body
    [request] = await sync_to_async(lambda: list(fake.requests))()
    assert request.stream


@pytest.mark.django_db(transaction=True)
async def test_a_streamed_run_whose_client_goes_away_still_finishes_under_the_server(operator, remote, fake):
    """Through the ASGI application daphne serves: the client drops the event stream while the model is
    still thinking; the turn goes on without it and its outcome is stored."""
    from asgiref.sync import sync_to_async
    from asgiref.testing import ApplicationCommunicator

    from console.asgi import application

    fake.reply_text("Finished anyway.", delay=1.0)
    headers = [
        (b"host", b"localhost"),
        (b"authorization", f"Bearer {operator.token}".encode()),
        (b"content-type", b"application/json"),
        (b"accept", b"text/event-stream"),
    ]
    scope = {"type": "http", "method": "POST", "path": "/api/agents/remote/runs", "headers": headers}
    client = ApplicationCommunicator(application, {**scope, "query_string": b"", "http_version": "1.1"})
    await client.send_input({"type": "http.request", "body": json.dumps({"message": "hi"}).encode()})
    start = await client.receive_output(timeout=10)
    assert start["status"] == 200
    first = await client.receive_output(timeout=10)
    assert b"event: run.started" in first["body"]

    await client.send_input({"type": "http.disconnect"})
    await client.wait(timeout=10)

    async def status() -> str:
        return await sync_to_async(lambda: Run.objects.get().status)()

    deadline = time.monotonic() + 15
    while await status() == "running" and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    run = await sync_to_async(Run.objects.get)()
    assert (run.status, run.output) == ("completed", "Finished anyway.")


def test_every_model_kind_has_a_provider_and_every_provider_a_kind():
    """A new provider is one entry in agents.engine.providers.PROVIDERS, its kind in MODEL_KINDS (which the
    definition checks and the form use) and, unless built in, a ConnectionKind an installation can store."""
    from agents.engine.providers import PROVIDERS
    from console.connections import MODEL_KINDS
    from console.models import ConnectionKind

    assert set(PROVIDERS) == MODEL_KINDS
    assert MODEL_KINDS - {"scripted"} <= set(ConnectionKind.values)
    assert ConnectionKind.MCP not in PROVIDERS and ConnectionKind.WEBHOOK not in PROVIDERS
