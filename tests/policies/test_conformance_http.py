"""The agent-hooks conformance kit's vectors through Airlock's HTTP interceptor (SPEC section 12, "agent-hooks over
HTTP"): every interceptor a vector scripts sits behind `POST /api/agents/{name}/interceptions`.

The host is the in-process harness (tests/policies/ctk_harness.py), whose emitter gets, for each scripted
interceptor, an `AirlockInterceptor` (clients/python/airlock_client/agent_hooks.py) calling the console's ASGI
application in process. There, the external agent `ctk-<i>` binds one `airlock.webhook` policy whose connection
is a loopback receiver answering with the vector's scripted interceptor `i`. So each verdict crosses the client,
the console's API, its policy emitter and a real webhook, and the vectors must pass as they do in process.
"""

import asyncio
import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from agent_hooks.ctk import run_vector
from airlock_client.agent_hooks import AirlockInterceptor

from agents.definitions import DefinitionContent
from agents.models import Agent
from console.asgi import application
from tests.conftest import Persona, grant
from tests.helpers import send_json
from tests.policies.ctk_harness import AirlockHarness
from tests.policies.test_conformance import CLAIMED

pytestmark = pytest.mark.django_db(transaction=True)

# Interceptors a vector may script (the most any vector has).
SLOTS = max(len(v.get("interceptor_scripts") or [None]) for v in CLAIMED)


class Receiver(BaseHTTPRequestHandler):
    """The policy webhook of `ctk-<i>` at `/<i>`: the current vector's scripted interceptor `i` answers."""

    slots: list[Any] = []

    def do_POST(self) -> None:
        context = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        interceptor = Receiver.slots[int(self.path.strip("/"))]
        try:
            verdict = interceptor.intercept(context)
        except Exception as error:  # a scripted fault: the webhook fails, and the policy fails closed
            self.send_error(500, type(error).__name__)
            return
        send_json(self, verdict if isinstance(verdict, dict) else verdict.to_wire())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver(acme) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def agents(admin: Persona, receiver: int) -> None:
    for i in range(SLOTS):
        grant(f"ctk-{i}", "webhook", admin.tenant, url=f"http://127.0.0.1:{receiver}/{i}")
        hooks = {
            "declaration": "agent-hooks-declaration/1.0",
            "bindings": [{"id": f"ctk-{i}", "kind": "airlock.webhook", "config": {"connection": f"ctk-{i}"}}],
        }
        content = {"name": f"ctk-{i}", "runtime": "external", "hooks": hooks}
        Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)


class HttpHarness(AirlockHarness):
    """The in-process harness with each interceptor behind Airlock's HTTP interceptor."""

    def __init__(self, token: str) -> None:
        super().__init__()
        transport = httpx.ASGITransport(app=application)
        self.remote = [
            AirlockInterceptor("http://testserver", token, f"ctk-{i}", transport=transport) for i in range(SLOTS)
        ]

    def remoted(self, interceptors: list[Any]) -> list[Any]:
        Receiver.slots = list(interceptors)
        return self.remote[: len(interceptors)]

    def setup(self, scenario: Any, interceptors: list[Any], *args: Any, **kwargs: Any) -> None:
        super().setup(scenario, self.remoted(interceptors), *args, **kwargs)

    def _start(self, scenario: Any, emitter: Any) -> None:
        # A declaration vector's bindings, built by the kit's registry, go behind HTTP too.
        bound = emitter._interceptors
        if bound and not isinstance(bound[0].interceptor, AirlockInterceptor):
            remote = self.remoted([b.interceptor for b in bound])
            emitter._interceptors[:] = [
                dataclasses.replace(b, interceptor=r) for b, r in zip(bound, remote, strict=True)
            ]
        super()._start(scenario, emitter)


def test_the_kits_vectors_pass_over_http(agents, operator):
    """One test over every claimed vector (each of them through real HTTP and a real webhook; one database
    for all), naming each that fails and why."""
    failures = {}

    async def run_all() -> None:
        for vector in CLAIMED:
            harness = HttpHarness(operator.token)
            result = await run_vector(harness, vector)
            if result.status != "pass":
                failures[vector["id"]] = [result.status, result.detail, *result.failures]

    asyncio.run(run_all())
    assert failures == {}
    assert len(CLAIMED) == 71
