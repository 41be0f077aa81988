"""MCP servers behind the run API: a tool that asks the user something (MCP elicitation) ends the run
`awaiting_input`, and the answer, sent as the next turn's input, runs the call again in a new server
process. The servers are real stdio processes: the bundled demo (`python -m agents.mcp_demo`) in both of
its styles, and a server that dies in the middle of a call (tests/agents/crashing_mcp_server.py); and the
demo served over MCP's streamable HTTP on a loopback port, a connection named by its URL."""

import os
import re
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agents.definitions import DefinitionContent
from agents.engine import mcp as mcp_bridge
from agents.models import Agent, Event
from tests.conftest import Persona, grant
from tests.helpers import assert_problem, call_line, run, run_ok, snapshot

QUESTION = "Which day should I book?"
CRASHING_SERVER = str(Path(__file__).with_name("crashing_mcp_server.py"))
DEMO = ["-m", "agents.mcp_demo"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def connections(acme) -> None:
    """The installation's MCP servers: the demo (told its style and state key through the environment),
    a program that does not exist, and a server that dies mid-call."""
    grant("demo", "mcp", acme, command=sys.executable, args=DEMO, env=["AIRLOCK_MCP_STYLE", "AIRLOCK_MCP_STATE_KEY"])
    grant("broken", "mcp", acme, command="/nonexistent/binary")
    grant("fragile", "mcp", acme, command=sys.executable, args=[CRASHING_SERVER])


def meetings(**changes: Any) -> dict[str, Any]:
    return {"connection": "demo", "approval": "never", **changes}


def make_agent(persona: Persona, *servers: dict[str, Any]) -> Agent:
    content = {"name": "planner", "instructions": "You book meetings.", "mcpServers": list(servers)}
    return Agent.create(persona.tenant, DefinitionContent.model_validate(content), persona.user)


def send(persona: Persona, body: dict[str, Any]) -> dict[str, Any]:
    return run_ok(persona, body, agent="planner")


def book(persona: Persona, tool: str = "book_meeting", session: str = "s1") -> dict[str, Any]:
    result = send(persona, {"message": call_line(tool, {"topic": "roadmap"}), "sessionId": session})
    assert result["status"] == "awaiting_input", result
    return result


def answer(persona: Persona, asked: dict[str, Any], action: str, content: Any = None, session: str = "s1") -> Any:
    response = {"requestId": asked["pendingRequests"][0]["requestId"], "action": action}
    if content is not None:
        response["content"] = content
    return run(persona, {"sessionId": session, "inputResponses": [response]}, agent="planner")


def console_restart() -> None:
    """What a new console process knows of MCP servers: nothing (no tool lists, no protocol memory)."""
    mcp_bridge._TOOL_LISTS.clear()
    mcp_bridge._LEGACY_SERVERS.clear()


def server_log(capfd) -> tuple[str, list[str]]:
    """What the demo servers wrote on stderr (inherited from this process) since the last look, and the
    pids they wrote it from, in order of appearance."""
    log = capfd.readouterr().err
    return log, list(dict.fromkeys(re.findall(r"pid=(\d+)", log)))


def running_children() -> dict[int, str]:
    """This process's children that are still running (not zombies), by pid, with their command lines."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        # The command name may hold spaces and parentheses; the fields after the last ")" do not.
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == os.getpid() and state != "Z":
            found[int(entry.name)] = cmdline
    return found


@pytest.fixture(autouse=True)
def servers_left_behind():
    """Every MCP server process a run started is gone once the run has answered."""
    console_restart()
    before = set(running_children())

    def started_here() -> list[str]:
        return [cmdline for pid, cmdline in running_children().items() if pid not in before]

    yield
    deadline = time.monotonic() + 5
    while (left := started_here()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == []
    console_restart()


@pytest.fixture(autouse=True)
def demo_server_env(monkeypatch):
    """The variables the bridge passes to the demo server. The input_required style is the default here
    as it needs one process per turn; the classic style needs a second one after the first call fails."""
    monkeypatch.setenv("AIRLOCK_MCP_STYLE", "input_required")
    monkeypatch.setenv("AIRLOCK_MCP_STATE_KEY", secrets.token_hex(32))


# --- asking and answering ---------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["classic", "input_required"])
def test_it_asks_which_day_then_books_the_answer_in_a_new_process(operator, admin, monkeypatch, capfd, style):
    monkeypatch.setenv("AIRLOCK_MCP_STYLE", style)
    make_agent(admin, meetings())

    asked = book(operator)

    [pending] = asked["pendingRequests"]
    assert pending["kind"] == "input"
    assert pending["toolName"] == "book_meeting"
    assert pending["arguments"] == {"topic": "roadmap"}
    assert pending["message"] == QUESTION
    schema = pending["requestedSchema"]
    assert schema["required"] == ["day"]
    assert schema["properties"]["day"]["type"] == "string"
    assert asked["output"] is None
    [requested] = Event.objects.filter(run_id=asked["runId"], type="elicitation.requested")
    assert requested.data["message"] == QUESTION
    first_log, first_pids = server_log(capfd)
    assert first_pids
    assert "book_meeting" in first_log

    console_restart()
    response = answer(operator, asked, "accept", {"day": "Friday"})

    assert response.status_code == 200, response.content
    result = response.json()
    assert result["status"] == "completed", result
    assert result["output"] == 'book_meeting: Booked "roadmap" on Friday'
    assert result["previousRunId"] == asked["runId"]
    assert result["pendingRequests"] == []
    [completed] = Event.objects.filter(run_id=result["runId"], type="elicitation.completed")
    assert (completed.data["action"], completed.data["content"]) == ("accept", {"day": "Friday"})
    second_log, second_pids = server_log(capfd)
    assert f"style={style}" in second_log  # the style variable reached the server
    assert second_pids
    assert not set(first_pids) & set(second_pids)


def test_it_refuses_an_answer_that_does_not_fit_then_takes_a_decline(operator, admin):
    make_agent(admin, meetings())
    asked = book(operator)

    before = snapshot()
    problem = assert_problem(answer(operator, asked, "accept", {"when": "Friday"}), 400, "invalid_input_content")
    assert "day" in problem["detail"].lower()  # "Day is required."
    assert snapshot() == before

    response = answer(operator, asked, "decline")

    assert response.status_code == 200, response.content
    result = response.json()
    assert result["status"] == "completed", result
    assert result["output"] == 'book_meeting: Meeting "roadmap" not booked: user chose decline'


def test_it_offers_the_servers_tools_under_its_prefix(operator, admin):
    make_agent(admin, meetings(toolPrefix="cal"))

    asked = book(operator, tool="cal_book_meeting")
    assert asked["pendingRequests"][0]["toolName"] == "cal_book_meeting"
    assert asked["pendingRequests"][0]["message"] == QUESTION

    result = answer(operator, asked, "accept", {"day": "Monday"}).json()

    assert result["status"] == "completed", result
    assert result["output"] == 'cal_book_meeting: Booked "roadmap" on Monday'


def test_it_asks_for_approval_before_the_server_asks_for_input(operator, admin, capfd):
    make_agent(admin, meetings(approval="always"))

    asked = send(operator, {"message": call_line("book_meeting", {"topic": "roadmap"}), "sessionId": "s1"})

    assert asked["status"] == "awaiting_approval", asked
    [pending] = asked["pendingRequests"]
    assert (pending["kind"], pending["toolName"], pending["arguments"]) == (
        "approval",
        "book_meeting",
        {"topic": "roadmap"},
    )
    assert "book_meeting" not in capfd.readouterr().err, "the server was called before the approval"

    approval = {"requestId": pending["requestId"], "approved": True}
    approved = send(operator, {"sessionId": "s1", "approvals": [approval]})

    assert approved["status"] == "awaiting_input", approved
    [question] = approved["pendingRequests"]
    assert (question["kind"], question["message"]) == ("input", QUESTION)

    result = answer(operator, approved, "accept", {"day": "Tuesday"}).json()

    assert result["status"] == "completed", result
    assert result["output"] == 'book_meeting: Booked "roadmap" on Tuesday'
    assert not Event.objects.filter(run_id=result["runId"], type="permission.requested").exists()


# --- servers that fail ---------------------------------------------------------------------------------


def test_it_fails_the_run_when_the_server_cannot_start(operator, admin):
    agent = make_agent(admin, meetings(connection="broken"))

    started = time.monotonic()
    result = send(operator, {"message": call_line("book_meeting", {"topic": "roadmap"}), "sessionId": "s1"})

    assert time.monotonic() - started < 30
    assert result["status"] == "failed", result
    assert result["error"]["code"] == "mcp_server_failed"
    message = result["error"]["message"]
    assert message.startswith("The MCP server 'broken' could not be started: ")
    assert "/nonexistent/binary" in message
    assert result["pendingRequests"] == []
    # The operator takes the broken server out of the definition; the session goes on.
    content = DefinitionContent.model_validate({**agent.current.content, "mcpServers": []})
    agent.append_version(content, admin.user)
    after = send(operator, {"message": "Are you there?", "sessionId": "s1"})
    assert after["status"] == "completed", after
    assert after["output"] == "You said: Are you there?"


def test_it_fails_the_run_when_the_server_dies_mid_call(operator, admin):
    make_agent(admin, {"connection": "fragile", "approval": "never"})

    started = time.monotonic()
    result = send(operator, {"message": call_line("explode"), "sessionId": "s1"})

    assert time.monotonic() - started < 30, "a dead server must end the call, not leave it waiting"
    assert result["status"] == "failed", result
    assert result["error"]["code"] == "mcp_server_failed"
    message = result["error"]["message"]
    assert message.startswith("The MCP server 'fragile' stopped answering during the call to 'explode'")
    [complete] = Event.objects.filter(run_id=result["runId"], type="tool.execution_complete")
    assert complete.data["success"] is False
    after = send(operator, {"message": "Still there?", "sessionId": "s1"})
    assert after["status"] == "completed", after
    assert after["output"] == "You said: Still there?"


# --- a server reached over streamable HTTP ------------------------------------------------------------


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def serve_demo_over_http(style: str, folder: Path) -> HttpServer:
    """The demo server as a process of its own, listening on a loopback port (MCP's streamable HTTP)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = f"from agents.mcp_demo import build_server; build_server({style!r}).run('streamable-http', port={port})"
    log = folder / "mcp-http.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    server = HttpServer(f"http://127.0.0.1:{port}/mcp", process, log)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"the MCP server did not start:\n{server.output()}") from None
            time.sleep(0.1)


@pytest.fixture(params=["classic", "input_required"])
def http_demo(request, acme, tmp_path):
    """The demo server over streamable HTTP, in each style, as the installation's connection `demo-http`."""
    server = serve_demo_over_http(request.param, tmp_path)
    grant("demo-http", "mcp", acme, url=server.url)
    yield server
    server.process.terminate()
    server.process.wait(10)


def test_it_asks_and_books_through_a_server_over_streamable_http(operator, admin, http_demo):
    make_agent(admin, meetings(connection="demo-http"))

    asked = book(operator)

    [pending] = asked["pendingRequests"]
    assert (pending["kind"], pending["toolName"], pending["message"]) == ("input", "book_meeting", QUESTION)
    assert pending["requestedSchema"]["required"] == ["day"]
    console_restart()
    response = answer(operator, asked, "accept", {"day": "Friday"})

    assert response.status_code == 200, response.content
    result = response.json()
    assert (result["status"], result["output"]) == ("completed", 'book_meeting: Booked "roadmap" on Friday'), result
    # The calls went to the server behind the URL, not to a process the console started.
    assert "book_meeting body run #1 style=" in http_demo.output()
    assert set(re.findall(r"pid=(\d+)", http_demo.output())) == {str(http_demo.process.pid)}


def test_a_client_tool_named_like_an_mcp_tool_fails_the_turn_with_its_own_code(operator):
    # An MCP server's tools are listed only when a turn runs, so the definition saves; the turn says why it stops.
    content = {"name": "planner", "mcpServers": [meetings()], "clientTools": [{"name": "book_meeting"}]}
    Agent.create(operator.tenant, DefinitionContent.model_validate(content), operator.user)

    result = send(operator, {"message": call_line("book_meeting", {"topic": "roadmap"})})

    assert result["status"] == "failed", result
    assert result["error"]["code"] == "tool_name_conflict"
    assert result["error"]["message"].startswith("Two of the agent's tools are named 'book_meeting':")
    assert "Toolset" not in result["error"]["message"]
