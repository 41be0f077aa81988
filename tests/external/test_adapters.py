"""The adapters against a real console process, each with its framework's own test double for the model (no
network): an OpenAI Agents SDK run (clients/python/examples/openai_agents_example.py, in the SDK's environment
.venv-openai-agents, as an external agent runs elsewhere) and a LangGraph graph (in this process), their pauses
answered through the API by another member than the agent's service user."""

import operator
import os
import subprocess
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from airlock_client import AsyncAirlock, ainvoke_with_airlock, invoke_with_airlock
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from tests.processes.cluster import ROOT, wait_for

pytestmark = pytest.mark.processes

EXAMPLES = ROOT / "clients" / "python" / "examples"
SDK_PYTHON = ROOT / ".venv-openai-agents" / "bin" / "python"


def pending(console, agent: str) -> list[dict[str, Any]]:
    return console.api("ada").ok("GET", f"/api/requests?agent={agent}")["items"]


def one_pending(console, agent: str) -> dict[str, Any]:
    [request] = wait_for(lambda: pending(console, agent), f"a request of {agent} in the inbox", timeout=60)
    return request


def start_example(console, script: str, agent: str, **env: str) -> subprocess.Popen[str]:
    """An example as its user runs it, as the operator otto (the agent's service user)."""
    python = SDK_PYTHON if script.startswith("openai") else ROOT / ".venv" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{python} is missing: make setup installs it")
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    environment |= {"AIRLOCK_URL": console.url, "AIRLOCK_TOKEN": console.tokens["otto"], "AIRLOCK_AGENT": agent}
    return subprocess.Popen(
        [str(python), str(EXAMPLES / script)],
        cwd=Path("/"),  # anywhere: the repository's `agents` app must not be what the SDK imports
        env=environment | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> str:
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, out
    return out


def test_openai_agents_an_approval_in_airlock_runs_the_tool(console):
    agent = console.external_agent()
    ids = {"AIRLOCK_SESSION": "oa-approve", "AIRLOCK_CALL_ID": "call_approve_1"}
    run = start_example(console, "openai_agents_example.py", agent, **ids)
    try:
        request = one_pending(console, agent)
        assert request["toolName"] == "deploy" and request["sessionId"] == "oa-approve"
        assert request["arguments"] == {"service": "billing", "environment": "staging"}
        with console.client("ada") as ada:
            assert ada.decide(request["requestId"], approved=True).status == "accepted"
        out = finished(run)
    finally:
        run.kill()
    assert "the tool ran: billing@staging" in out
    assert "tool output: deployed billing to staging" in out and "final output: All done." in out
    events = console.api("ada").ok("GET", f"/api/runs/{request['runId']}/events")["items"]
    [complete] = [e for e in events if e["type"] == "tool.execution_complete"]
    assert complete["data"]["success"] is True

    # The same call again (a rerun of the paused state) finds its request, decided: nobody is asked twice.
    again = finished(start_example(console, "openai_agents_example.py", agent, **ids))
    assert "decided at once (api)" in again and "the tool ran: billing@staging" in again
    assert pending(console, agent) == []


def test_openai_agents_a_denial_in_airlock_keeps_the_tool_from_running(console):
    agent = console.external_agent()
    run = start_example(console, "openai_agents_example.py", agent)
    try:
        request = one_pending(console, agent)
        with console.client("ada") as ada:
            ada.decide(request["requestId"], approved=False, reason="not on a Friday")
        out = finished(run)
    finally:
        run.kill()
    assert "the tool did not run" in out
    assert "tool output: ada denied deploy: not on a Friday. The call was not run." in out
    assert "final output: All done." in out


class Deploy(TypedDict, total=False):
    service: str
    answers: Annotated[list[dict[str, Any]], operator.add]
    deployed: bool


def deploy_graph() -> Any:
    """Ask approval of the deploy, then ask a question: each node reads its answer from `interrupt()`."""

    def approve(state: Deploy) -> Deploy:
        answer = interrupt(
            {
                "kind": "approval",
                "toolName": "deploy",
                "arguments": {"service": state["service"], "environment": "staging"},
            }
        )
        return {"answers": [answer], "deployed": answer["approved"]}

    def ask(state: Deploy) -> Deploy:
        return {"answers": [interrupt({"question": "Announce it where?", "choices": ["chat", "mail"]})]}

    graph = StateGraph(Deploy)
    graph.add_node("approve", approve)
    graph.add_node("ask", ask)
    graph.add_edge(START, "approve")
    graph.add_edge("approve", "ask")
    graph.add_edge("ask", END)
    return graph.compile(checkpointer=InMemorySaver())


def answer_in_turn(console, agent: str, answers: list[dict[str, Any]]) -> threading.Thread:
    """ada answers each request of `agent` as it comes, in order (the graph asks one at a time)."""

    def answer() -> None:
        with console.client("ada") as ada:
            for fields in answers:
                request = one_pending(console, agent)
                ada.decide(request["requestId"], **fields)
                wait_for(
                    lambda rid=request["requestId"]: rid not in {r["requestId"] for r in pending(console, agent)}, "it"
                )

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


def test_langgraph_the_graph_resumes_with_who_answered(console):
    agent = console.external_agent()
    answering = answer_in_turn(console, agent, [{"approved": True}, {"text": "chat"}])
    config = {"configurable": {"thread_id": "lg-thread-1"}}
    with console.client("otto") as otto:
        result = invoke_with_airlock(deploy_graph(), {"service": "billing"}, config, airlock=otto, airlock_agent=agent)
    answering.join(10)
    approval, question = result["answers"]
    assert result["deployed"] is True
    assert approval["approved"] is True and approval["answeredBy"] == "ada" and approval["via"] == "api"
    assert approval["result"] == {"kind": "approved"}
    assert approval["arguments"] == {"service": "billing", "environment": "staging"}
    assert question["text"] == "chat" and question["answeredBy"] == "ada"
    sessions = {
        r["sessionId"] for r in console.api("ada").ok("GET", f"/api/requests?agent={agent}&status=answered")["items"]
    }
    assert sessions == {"lg-thread-1"}


async def test_langgraph_async_a_denial_reaches_the_node(console):
    agent = console.external_agent()
    answers = [
        {"approved": False, "reason": "billing is frozen"},
        {"text": "mail"},
    ]
    answering = answer_in_turn(console, agent, answers)
    config = {"configurable": {"thread_id": "lg-thread-2"}}
    async with AsyncAirlock(console.url, console.tokens["otto"], timeout=10) as otto:
        result = await ainvoke_with_airlock(
            deploy_graph(), {"service": "billing"}, config, airlock=otto, airlock_agent=agent
        )
    answering.join(10)
    approval, question = result["answers"]
    assert result["deployed"] is False
    assert approval["text"] == "billing is frozen" and approval["answeredBy"] == "ada"
    assert approval["result"] == {"kind": "denied-interactively-by-user", "feedback": "billing is frozen"}
    assert question["text"] == "mail"


def test_the_client_example_deploys_with_the_arguments_the_approver_edited(console):
    agent = console.external_agent()
    run = start_example(console, "client_example.py", agent)
    try:
        request = one_pending(console, agent)
        production = {"service": "billing", "environment": "production"}
        with console.client("ada") as ada:
            ada.decide(request["requestId"], approved=True, override_arguments=production)
        out = finished(run)
    finally:
        run.kill()
    assert f"approved by ada (api), with {production}" in out
    events = console.api("ada").ok("GET", f"/api/runs/{request['runId']}/events")["items"]
    assert [e["data"]["success"] for e in events if e["type"] == "tool.execution_complete"] == [True]


def test_the_langgraph_example_prints_who_answered(console):
    agent = console.external_agent()
    answering = answer_in_turn(console, agent, [{"approved": True}, {"text": "chat"}])
    out = finished(start_example(console, "langgraph_example.py", agent, AIRLOCK_SESSION="lg-example"))
    answering.join(10)
    assert "approval: approved=True by ada via api" in out
    assert "question: 'chat' from ada" in out
    assert "'announce': 'chat'" in out


# The synchronous entry with the synchronous client; `status` needs no approval, so Airlock decides at once.
SYNC_RUN = """
import os, sys
from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from airlock_client import Airlock, run_with_airlock_sync

set_tracing_disabled(True)
read = []

@function_tool(needs_approval=True)
def status() -> str:
    read.append("status")
    return "green"

model = ScriptedModel([[function_call("status", {}, call_id="call_status_1")], [assistant_message("It is green.")]])
with Airlock(os.environ["AIRLOCK_URL"], os.environ["AIRLOCK_TOKEN"]) as airlock:
    result = run_with_airlock_sync(
        Agent(name="a", model=model, tools=[status]), "status?", airlock=airlock, airlock_agent=sys.argv[1]
    )
print(read, result.final_output)
"""


def test_openai_agents_sync_a_tool_that_needs_no_approval_runs_at_once(console):
    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} is missing: make setup installs it")
    agent = console.external_agent()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE")}
    env |= {
        "AIRLOCK_URL": console.url,
        "AIRLOCK_TOKEN": console.tokens["otto"],
        "PYTHONPATH": str(ROOT / "clients" / "python"),
    }
    done = subprocess.run(
        [str(SDK_PYTHON), "-c", SYNC_RUN, agent], cwd="/", env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['status'] It is green."
    decided = console.api("ada").ok("GET", f"/api/requests?agent={agent}&status=answered")["items"]
    assert [(r["toolName"], r["decision"]["approved"]) for r in decided] == [("status", True)]
