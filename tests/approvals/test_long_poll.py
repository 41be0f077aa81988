"""`GET /api/requests/{id}?wait=N` through the console's ASGI application (SPEC section 12): it returns the
moment the request is decided, with the decision the wake carried; after N seconds still pending; at once
when decided already; past LONG_POLLS_PER_PROCESS held at once, 429. The header that tells the handler to wait
never reaches a client. (Two console processes on Redis: tests/processes/test_long_poll_cluster.py; a thousand
polls on one: tests/processes/test_long_poll_storm.py.)"""

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals import waiting
from console.asgi import application
from tests.conftest import Persona

pytestmark = pytest.mark.django_db(transaction=True)

DEPLOY = {"name": "deploy", "description": "Deploy a service"}


@pytest.fixture
def deployer(admin: Persona) -> Agent:
    content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": [DEPLOY]})
    return Agent.create(admin.tenant, content, admin.user)


def client(persona: Persona, **headers: str) -> httpx.AsyncClient:
    auth = {"Authorization": f"Bearer {persona.token}", **headers}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://testserver", headers=auth)


async def open_deploy(persona: Persona) -> str:
    body = {"kind": "approval", "toolName": "deploy", "arguments": {}}
    async with client(persona) as http:
        opened = await http.post("/api/agents/deployer/requests", json=body)
    assert opened.status_code == 201, opened.text
    return str(opened.json()["requestId"])


async def answer_later(persona: Persona, request_id: str, delay: float) -> float:
    await asyncio.sleep(delay)
    path = f"/api/requests/{request_id}/responses"
    response = await sync_to_async(persona.api)("POST", path, {"approved": True, "reason": "go"})
    assert response.json()["status"] == "accepted"
    return time.monotonic()


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
async def test_a_long_poll_returns_when_the_answer_lands(deployer, operator, admin, encoding):
    request_id = await open_deploy(operator)
    async with client(operator, **{"Accept-Encoding": encoding}) as http:
        started = time.monotonic()
        poll = asyncio.ensure_future(http.get(f"/api/requests/{request_id}?wait=20"))
        answered_at = await answer_later(admin, request_id, 0.5)
        response = await poll
    returned_at = time.monotonic()

    assert response.status_code == 200
    assert returned_at - answered_at < 1.0 and returned_at - started < 5
    assert waiting.WAIT_HEADER not in response.headers
    assert int(response.headers["content-length"]) == len(response.content)
    body = response.json()
    assert body["requestId"] == request_id and body["status"] == "answered"
    decision = body["decision"]
    assert decision["approved"] is True and decision["text"] == "go" and decision["answeredBy"] == admin.user.username


# A `wait` given twice is the view's last one; one with a space is read as the number (both answered at once before).
@pytest.mark.parametrize("query", ["wait=1", "wait=61&wait=1", "wait=%201", "a=b&wait=1&c=d"])
async def test_a_long_poll_answers_pending_when_the_time_is_up(deployer, operator, query):
    request_id = await open_deploy(operator)
    async with client(operator) as http:
        started = time.monotonic()
        response = await http.get(f"/api/requests/{request_id}?{query}")
    took = time.monotonic() - started

    assert 1.0 <= took < 3.0
    assert response.status_code == 200 and waiting.WAIT_HEADER not in response.headers
    assert response.json()["status"] == "pending" and response.json()["decision"] is None


async def test_a_decided_request_answers_at_once_and_strangers_wait_for_nothing(deployer, operator, admin, outsider):
    request_id = await open_deploy(operator)
    await answer_later(admin, request_id, 0)
    async with client(operator) as http:
        started = time.monotonic()
        decided = await http.get(f"/api/requests/{request_id}?wait=30")
    assert time.monotonic() - started < 2 and decided.json()["decision"]["approved"] is True

    async with client(outsider) as http:
        started = time.monotonic()
        stranger = await http.get(f"/api/requests/{request_id}?wait=30")
    assert time.monotonic() - started < 2
    assert stranger.status_code == 404 and stranger.headers["content-type"] == "application/problem+json"
    assert "decision" not in json.loads(stranger.content)


async def test_a_wait_out_of_bounds_is_refused(deployer, operator):
    request_id = await open_deploy(operator)
    async with client(operator) as http:
        refused: list[Any] = [await http.get(f"/api/requests/{request_id}?wait={n}") for n in ("61", "-1", "x")]
    assert [r.status_code for r in refused] == [400, 400, 400]


async def test_it_refuses_a_long_poll_past_the_process_cap_until_one_ends(deployer, operator, admin, settings):
    settings.LONG_POLLS_PER_PROCESS = 1
    request_id = await open_deploy(operator)
    async with client(operator) as http:
        held = asyncio.ensure_future(http.get(f"/api/requests/{request_id}?wait=20"))
        await asyncio.sleep(0.3)
        refused = await http.get(f"/api/requests/{request_id}?wait=20")
        unheld = await http.get(f"/api/requests/{request_id}")
        await answer_later(admin, request_id, 0)
        answered = await held
        after = await http.get(f"/api/requests/{request_id}?wait=20")

    assert refused.status_code == 429 and refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "too_many_long_polls" and int(refused.headers["retry-after"]) > 0
    assert int(refused.headers["content-length"]) == len(refused.content)
    assert unheld.status_code == 200  # a read without wait is not a long poll
    assert answered.json()["decision"]["approved"] is True
    assert after.status_code == 200 and after.json()["decision"]["approved"] is True
