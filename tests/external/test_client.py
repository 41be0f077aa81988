"""The typed client (`airlock_client.Airlock`, `AsyncAirlock`) against a real console process: an agent opens a
request as the operator otto, the admin ada answers it through the API, and the agent's wait returns her
decision; retries, conflicts, cancels, outcomes and remembered rules as the agent sees them."""

import threading
import time
import uuid

import httpx
import pytest
from airlock_client import Airlock, AirlockError, AsyncAirlock, RequestClosed, WaitTimeout

from tests.processes.cluster import wait_for

pytestmark = pytest.mark.processes

STAGING = {"service": "billing", "environment": "staging"}


def pending_ids(console, agent):
    return [r["requestId"] for r in console.api("ada").ok("GET", f"/api/requests?agent={agent}")["items"]]


def test_it_waits_for_the_answer_another_member_gives(console):
    agent = console.external_agent()
    with console.client("otto") as otto, console.client("ada") as ada:
        opened = otto.request(agent, tool_name="deploy", arguments=STAGING, session_id="ci-1")
        assert opened.status == "pending" and opened.created and opened.decision is None
        assert opened.session_id == "ci-1"
        assert pending_ids(console, agent) == [opened.request_id]

        def answer():
            time.sleep(0.5)  # the agent is in its long poll by then
            ada.decide(opened.request_id, approved=False, reason="not on a Friday")

        answering = threading.Thread(target=answer)
        answering.start()
        started = time.monotonic()
        decision = otto.wait(opened.request_id, timeout=30)
        answering.join()
        assert time.monotonic() - started < 10  # woken by the answer, not by the poll's end
    assert decision.approved is False and decision.text == "not on a Friday"
    assert decision.answered_by == "ada" and decision.via == "api"
    assert decision.result == {"kind": "denied-interactively-by-user", "feedback": "not on a Friday"}
    assert pending_ids(console, agent) == []


def test_a_retry_is_the_same_request_and_another_body_conflicts(console):
    agent = console.external_agent()
    rid = uuid.uuid4()
    with console.client("otto") as otto:
        first = otto.request(agent, tool_name="deploy", arguments=STAGING, request_id=rid)
        again = otto.request(agent, tool_name="deploy", arguments=STAGING, request_id=rid)
        assert (first.created, again.created) == (True, False)
        # The request's id in Airlock is derived from ours and the tenant's; ours names it too.
        assert again.request_id == first.request_id != str(rid) and again.run_id == first.run_id
        assert otto.get(rid).request_id == first.request_id
        with pytest.raises(AirlockError) as conflict:
            otto.request(agent, tool_name="deploy", arguments={**STAGING, "environment": "production"}, request_id=rid)
        with pytest.raises(AirlockError) as unknown:
            otto.request(agent, tool_name="launch", arguments={})
        with pytest.raises(AirlockError) as invalid:
            otto.request(agent, tool_name="deploy", arguments={"service": "billing"})
    assert (conflict.value.status, conflict.value.code) == (409, "request_conflict")
    assert (unknown.value.status, unknown.value.code) == (400, "unknown_tool")
    assert invalid.value.code == "invalid_arguments" and "environment" in str(invalid.value.errors)
    assert pending_ids(console, agent) == [first.request_id]


def test_a_failed_try_is_retried_with_the_same_request_id(console):
    """The first try reaches the console but its answer is lost (a 502 from a proxy): the retry opens nothing
    new."""
    agent = console.external_agent()
    real = httpx.HTTPTransport()
    bodies = []

    def flaky(request: httpx.Request) -> httpx.Response:
        response = real.handle_request(request)
        bodies.append(request.content)
        if len(bodies) == 1:
            response.read()
            return httpx.Response(502, text="bad gateway")
        return response

    with real, Airlock(console.url, console.tokens["otto"], backoff=0.05, transport=httpx.MockTransport(flaky)) as otto:
        opened = otto.request(agent, tool_name="deploy", arguments=STAGING)
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    assert opened.created is False  # the second try found the request the first one opened
    assert pending_ids(console, agent) == [opened.request_id]


def test_the_agent_cancels_and_a_wait_says_so(console):
    agent = console.external_agent()
    with console.client("otto") as otto:
        opened = otto.request(agent, tool_name="deploy", arguments=STAGING)
        with pytest.raises(WaitTimeout):
            otto.wait(opened.request_id, timeout=1)
        cancelled = otto.cancel(opened.request_id)
        assert cancelled.status == "cancelled"
        with pytest.raises(RequestClosed) as closed:
            otto.wait(opened.request_id, timeout=5)
        with pytest.raises(AirlockError) as again:
            otto.cancel(opened.request_id)
    assert closed.value.reason == "cancelled" and closed.value.decision.approved is False
    assert again.value.code == "request_closed"
    assert pending_ids(console, agent) == []


def test_the_outcome_is_reported_into_the_run(console):
    agent = console.external_agent()
    with console.client("otto") as otto, console.client("ada") as ada:
        opened = otto.request(agent, tool_name="deploy", arguments=STAGING)
        with pytest.raises(AirlockError) as early:
            otto.report(opened.request_id, True)
        assert ada.decide(opened.request_id, approved=True).status == "accepted"
        assert otto.wait(opened.request_id, timeout=10).approved is True
        otto.report(opened.request_id, True, {"url": "https://billing.staging"})
    assert early.value.code == "request_not_approved"
    events = console.api("ada").ok("GET", f"/api/runs/{opened.run_id}/events")["items"]
    complete = [e for e in events if e["type"] == "tool.execution_complete"]
    assert len(complete) == 1 and complete[0]["data"]["success"] is True


def test_a_remembered_answer_decides_the_next_request_at_once(console):
    agent = console.external_agent()
    with console.client("otto") as otto, console.client("ada") as ada:
        asked = otto.request(agent, tool_name="deploy", arguments=STAGING)
        ada.decide(asked.request_id, approved=True, remember=True)
        repeated = otto.request(agent, tool_name="deploy", arguments=STAGING)
        quick = otto.request(agent, tool_name="status", arguments={})
    assert repeated.status == "decided" and repeated.decision is not None
    assert repeated.decision.approved is True and repeated.decision.via == "rule"
    assert quick.status == "decided" and quick.decision is not None and quick.decision.approved is True
    assert pending_ids(console, agent) == []


async def test_the_async_client_waits_for_a_question_s_answer(console):
    agent = console.external_agent()
    async with AsyncAirlock(console.url, console.tokens["otto"], timeout=10) as otto:
        opened = await otto.request(agent, "question", question="Which region?", choices=["eu", "us"])
        wait_for(lambda: opened.request_id in pending_ids(console, agent), "the question in the inbox")
        with console.client("ada") as ada:
            answering = threading.Timer(0.3, lambda: ada.decide(opened.request_id, text="eu"))
            answering.start()
            decision = await otto.wait(opened.request_id, timeout=30)
            answering.join()
    assert decision.text == "eu" and decision.answered_by == "ada" and decision.result == {"kind": "answered"}
