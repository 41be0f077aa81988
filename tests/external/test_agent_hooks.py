"""The agent-hooks adapter against a real console process: an agent-hooks host's emitter with Airlock as its
interceptor (`AirlockInterceptor`: the verdict of the external agent's bound policies, here the starter policy)
and its approval resolver (`AirlockResolver`: an escalation becomes an Airlock request, answered by another
member through the API)."""

import asyncio
import itertools
import threading
from typing import Any

import pytest
from agent_hooks import AgentContextBuilder, InterceptionBlocked, InterceptionEmitter
from airlock_client import AirlockInterceptor, AirlockResolver, AsyncAirlock

from agents.starter_policy import starter_hooks
from tests.external.test_adapters import one_pending

pytestmark = pytest.mark.processes
NAMES = itertools.count(1)

SEND = {
    "name": "send_email",
    "description": "Send a mail",
    "parameters": {"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}}},
}


def mailer(console: Any) -> str:
    name = f"hooks-mailer-{next(NAMES)}"
    definition = {"name": name, "runtime": "external", "tools": [SEND], "hooks": starter_hooks()}
    console.api("ada").ok("POST", "/api/agents", definition)
    return name


async def call(console: Any, agent: str, to: str, answer: dict[str, Any] | None = None) -> tuple[Any, str | None]:
    """One pre_tool_call of the host's send_email through Airlock; ada answers the escalation with `answer`."""
    async with AsyncAirlock(console.url, console.tokens["otto"], timeout=10) as otto:
        interceptor = AirlockInterceptor(console.url, console.tokens["otto"], agent)
        # The emitter's timeout bounds the resolver too: it must outlast the person's answer.
        emitter = InterceptionEmitter(resolver=AirlockResolver(otto, agent, timeout=20), timeout=30)
        emitter.register(interceptor, name="airlock")
        builder = AgentContextBuilder(agent_id=agent, framework="my-host", session_id=f"{agent}-{to}")
        context = builder.pre_tool_call(call_id="tc-1", name="send_email", args={"to": to, "subject": "Hi"})
        answered: list[str] = []

        def answer_it() -> None:
            request = one_pending(console, agent)
            answered.append(request["requestId"])
            console.api("ada").ok("POST", f"/api/requests/{request['requestId']}/responses", answer)

        answering = threading.Thread(target=answer_it, daemon=True) if answer is not None else None
        if answering is not None:
            answering.start()
        try:
            outcome: Any = await emitter.emit(context)
        except InterceptionBlocked as blocked:
            outcome = blocked
        finally:
            await interceptor.aclose()
        if answering is not None:
            await asyncio.to_thread(answering.join, 20)
        return outcome, answered[0] if answered else None


async def test_a_deny_an_allow_and_an_escalation_approved_in_airlock(console):
    agent = mailer(console)

    denied, _ = await call(console, agent, "eve@evil.test")
    assert isinstance(denied, InterceptionBlocked)
    assert denied.result.verdict.reason == "blocked_domain"

    allowed, _ = await call(console, agent, "amy@example.com")
    assert not isinstance(allowed, InterceptionBlocked)

    approved, request_id = await call(console, agent, "bob@partner.org", {"approved": True})
    assert not isinstance(approved, InterceptionBlocked), approved.result.verdict
    decided = console.api("ada").ok("GET", f"/api/requests/{request_id}")
    assert decided["decision"]["approved"] is True and decided["decision"]["answeredBy"] == "ada"
    assert decided["policy"]["reason"] == "external_recipient"


async def test_an_escalation_denied_in_airlock_blocks_the_call(console):
    agent = mailer(console)

    denied, request_id = await call(console, agent, "bob@partner.org", {"approved": False, "reason": "not them"})

    assert isinstance(denied, InterceptionBlocked)
    assert denied.result.verdict.message == "not them"
    assert console.api("ada").ok("GET", f"/api/requests/{request_id}")["decision"]["text"] == "not them"
