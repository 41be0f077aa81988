"""Sub-agents (SPEC section 10): an agent's `subAgents` become tools `name(task)` whose call runs the sub-agent's
own definition inside the parent's turn; its events carry the envelope's `agentId`; a request it opens pauses
the parent run and its answer resumes the sub-agent where it waited; cycles and unknown agents are refused at
save time."""

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core import mail
from django.test import AsyncClient

from agents.models import Agent
from approvals.models import Rule
from tests.agents.test_events import frames, read_stream, sse_headers, thread_connections  # noqa: F401
from tests.helpers import EMAIL, assert_problem, call_line, make_agent, run_ok, run_queued, snapshot

RESEARCHER = {
    "name": "researcher",
    "displayName": "Researcher",
    "description": "Looks things up.",
    "tools": [{"name": "get_time"}, {"name": "send_email", "approval": "always"}, {"name": "ask_user"}],
}


@pytest.fixture
def researcher(admin) -> Agent:
    return make_agent(admin, **RESEARCHER, clientTools=[], parameters=[], instructions="", instructionsByCulture={})


@pytest.fixture
def parent(admin, researcher) -> Agent:
    return make_agent(admin, subAgents=["researcher"])


def delegate(task: str) -> str:
    return f"call researcher {json.dumps({'task': task})}"


def envelopes(persona: Any, run_id: str) -> list[dict[str, Any]]:
    response = persona.api("GET", f"/api/runs/{run_id}/events")
    assert response.status_code == 200, response.content
    return response.json()["items"]


def test_a_sub_agent_runs_inside_the_parents_turn(operator, parent):
    result = run_ok(operator, {"message": delegate(call_line("get_time")), "sessionId": "s1"})

    assert result["status"] == "completed", result
    assert result["output"].startswith("researcher: get_time: ")
    events = envelopes(operator, result["runId"])
    [started] = [e for e in events if e["type"] == "subagent.started"]
    [completed] = [e for e in events if e["type"] == "subagent.completed"]
    agent_id = started["data"]["toolCallId"]  # the sub-agent's events carry the id of the call that runs it
    assert started["data"]["agentName"] == "researcher" and started["data"]["agentDisplayName"] == "Researcher"
    assert started["data"]["agentDescription"] == "Looks things up."
    inside = events[events.index(started) + 1 : events.index(completed)]
    assert inside and all(e.get("agentId") == agent_id for e in inside)
    assert {"user.message", "tool.execution_start", "assistant.message"} <= {e["type"] for e in inside}
    assert not [e for e in events if e not in inside and "agentId" in e]  # exactly the sub-agent's events
    assert completed["data"]["totalToolCalls"] == 1 and completed["data"]["totalTokens"] > 0
    calls = [e["data"] for e in events if e["type"] == "tool.execution_start" and "agentId" not in e]
    assert [c["toolName"] for c in calls] == ["researcher"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_a_watched_run_streams_the_sub_agents_reply_as_it_comes(operator, researcher):
    await sync_to_async(make_agent)(operator, subAgents=["researcher"])
    task = "please say these several words back"
    response = await AsyncClient().post(
        "/api/agents/assistant/runs",
        json.dumps({"message": delegate(task)}),
        content_type="application/json",
        headers=sse_headers(operator),
    )
    streamed = frames(await read_stream(response))

    deltas = [f["data"] for f in streamed if f["event"] == "assistant.message_delta" and "agentId" in f["data"]]
    assert len(deltas) > 1
    assert "".join(d["data"]["deltaContent"] for d in deltas) == f"You said: {task}"
    assert streamed[-1]["data"]["output"] == f"researcher: You said: {task}"


def test_a_sub_agents_approval_pauses_the_parent_and_its_answer_resumes_it(operator, parent):
    asked = run_ok(operator, {"message": delegate(call_line("send_email", EMAIL)), "sessionId": "s1"})

    assert asked["status"] == "awaiting_approval", asked
    [request] = asked["pendingRequests"]
    assert request["toolName"] == "send_email" and request["arguments"] == EMAIL
    requested = [e for e in envelopes(operator, asked["runId"]) if e["type"] == "permission.requested"]
    assert requested[0]["agentId"]  # the sub-agent's request, in the parent's log
    assert mail.outbox == []

    body = {"requestId": request["requestId"], "approved": True, "remember": True}
    outcome = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()
    continued = run_queued(outcome["continuationRunId"])

    assert continued.status == "completed", continued.error
    assert continued.output == f"researcher: send_email: sent to {EMAIL['to']}"
    assert len(mail.outbox) == 1
    events = envelopes(operator, str(continued.id))
    [approved] = [e for e in events if e["type"] == "permission.completed"]
    assert approved["agentId"] == requested[0]["agentId"] and approved["data"]["result"]["kind"] == "approved"
    assert [e["type"] for e in events if e["type"].startswith("subagent.")] == ["subagent.completed"]
    assert Rule.objects.get().agent.name == "researcher"  # remembered for the sub-agent, whose turns consult it


def test_a_sub_agents_question_is_answered_in_words(operator, parent):
    asked = run_ok(
        operator, {"message": delegate(call_line("ask_user", {"question": "Which city?"})), "sessionId": "q"}
    )

    assert asked["status"] == "awaiting_input", asked
    [request] = asked["pendingRequests"]
    assert (request["kind"], request["message"]) == ("question", "Which city?")
    body = {"requestId": request["requestId"], "text": "Paris"}
    outcome = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()
    continued = run_queued(outcome["continuationRunId"])

    assert continued.output == "researcher: ask_user: Paris"


def test_a_sub_agent_of_a_sub_agent_runs_with_its_own_id(admin, operator, researcher):
    make_agent(
        admin,
        name="scout",
        tools=[{"name": "get_time"}],
        clientTools=[],
        parameters=[],
        instructions="",
        instructionsByCulture={},
    )
    researcher.append_version(researcher.current.definition.model_copy(update={"sub_agents": ["scout"]}), None)
    make_agent(admin, subAgents=["researcher"])
    task = f"call scout {json.dumps({'task': call_line('get_time')})}"

    result = run_ok(operator, {"message": delegate(task), "sessionId": "s1"})

    assert result["output"].startswith("researcher: scout: get_time: "), result
    events = envelopes(operator, result["runId"])
    started = [e for e in events if e["type"] == "subagent.started"]
    assert [s["data"]["agentName"] for s in started] == ["researcher", "scout"]
    # Each turn numbers its calls from call_1: the scout's id says under whom it runs.
    researcher_id = started[0]["data"]["toolCallId"]
    assert started[1]["agentId"] == researcher_id
    scout_id = f"{researcher_id}/{started[1]['data']['toolCallId']}"
    assert {e.get("agentId") for e in events} == {None, researcher_id, scout_id}


@pytest.mark.parametrize(
    ("sub_agents", "code"),
    [(["nobody"], "unknown_subagent"), (["assistant"], "subagent_cycle")],
)
def test_saving_refuses_an_unknown_or_cyclic_sub_agent(admin, researcher, sub_agents, code):
    make_agent(admin)
    before = snapshot()
    response = admin.api("PUT", "/api/agents/assistant", {"name": "assistant", "subAgents": sub_agents})
    assert_problem(response, 400, code)
    assert snapshot() == before


def test_saving_refuses_a_cycle_through_other_agents(admin, researcher, parent):
    # assistant -> researcher already; researcher -> assistant would close the circle.
    before = snapshot()
    response = admin.api("PUT", "/api/agents/researcher", {**RESEARCHER, "subAgents": ["assistant"]})
    problem = assert_problem(response, 400, "subagent_cycle")
    assert "researcher → assistant → researcher" in json.dumps(problem, ensure_ascii=False)
    assert problem["detail"] == "The definition's sub-agents lead back to the agent itself."
    assert snapshot() == before


def test_saving_refuses_chains_deeper_than_three(admin):
    for name, calls in [("d4", []), ("d3", ["d4"]), ("d2", ["d3"]), ("d1", ["d2"])]:
        make_agent(
            admin, name=name, subAgents=calls, clientTools=[], parameters=[], instructions="", instructionsByCulture={}
        )
    response = admin.api("POST", "/api/agents", {"name": "top", "subAgents": ["d1"]})
    assert "too deep" in assert_problem(response, 400, "subagent_too_deep")["detail"]


def test_a_sub_agent_named_like_a_tool_is_refused(admin, researcher):
    response = admin.api(
        "POST", "/api/agents", {"name": "x", "tools": [{"name": "get_time"}], "subAgents": ["get_time"]}
    )
    assert response.status_code == 400


def test_an_external_agent_cannot_be_a_sub_agent(admin):
    external = {"name": "deployer", "runtime": "external", "tools": [{"name": "deploy", "description": "Deploy"}]}
    assert admin.api("POST", "/api/agents", external).status_code == 201
    before = snapshot()
    response = admin.api("POST", "/api/agents", {"name": "boss", "subAgents": ["deployer"]})
    problem = assert_problem(response, 400, "external_subagent")
    assert "runs elsewhere" in json.dumps(problem)
    assert snapshot() == before
