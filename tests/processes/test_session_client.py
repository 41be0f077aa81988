"""The typed client (`agents.client.SessionStream`) reads a whole session over the session stream of a real
console process: a tool approval answered from the inbox, a client tool answered through the API, and the
continuations they start, on one SSE connection that a proxy cuts once in the middle. No event is missed or
repeated, every payload validates against the published schema, each run's events chain by `parentId`, and
`session.idle` follows each turn's end."""

import contextlib
import itertools
import json
import re
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from agents.client import SessionEvent, SessionStream
from agents.payloads import TURN_ENDS
from tests.processes.cluster import Api, Cluster, login, new_cluster, wait_for

pytestmark = pytest.mark.processes

EMAIL = {"to": "ada@example.com", "subject": "Hi", "body": "Ship it."}
RESEARCHER = {"name": "researcher", "instructions": "Look things up.", "tools": [{"name": "ask_user"}]}
AGENT = {
    "name": "helper",
    "subAgents": ["researcher"],
    "instructions": "Help.",
    "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time"}],
    "clientTools": [
        {"name": "get_user_location", "description": "Where the user is.", "parameters": {"type": "object"}}
    ],
}


class CuttingProxy:
    """A TCP proxy to `upstream` whose open connections `cut()` closes, as a dropped network would."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.bytes_down = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, down: bool) -> None:
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
                if down:
                    self.bytes_down += len(chunk)
        except OSError:
            pass
        finally:
            for end in (source, target):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        for end in self.sockets:
            with contextlib.suppress(OSError):  # a pump may have shut it down already (ENOTCONN)
                end.shutdown(socket.SHUT_RDWR)
            end.close()  # whatever shutdown said: an unclosed socket is a ResourceWarning, a failure here
        self.sockets = []

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = new_cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def answer_in_inbox(url: str, request_id: str) -> None:
    """Approve from the inbox page, as the logged-in admin's browser does."""
    browser = login(url)
    with browser.open(f"{url}/inbox/", timeout=10) as response:
        page = response.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token and request_id in page
    form = urllib.parse.urlencode({"decision": "approve", "csrfmiddlewaretoken": token[1]}).encode()
    request = urllib.request.Request(
        f"{url}/inbox/{request_id}/answer/", data=form, headers={"Referer": f"{url}/inbox/"}
    )
    with browser.open(request, timeout=30) as response:
        assert response.status == 200


def test_the_typed_client_reads_a_whole_session_across_a_dropped_connection(cluster):
    token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
    console = cluster.serve("daphne", WORKER_THREADS="1")
    api = Api(console.url, token)
    api.ok("POST", "/api/agents", RESEARCHER)
    api.ok("POST", "/api/agents", AGENT)
    schema = api.ok("GET", "/api/events/schema.json")
    asked = api.ok(
        "POST", "/api/agents/helper/runs", {"message": f"call send_email {json.dumps(EMAIL)}", "sessionId": "s1"}
    )
    [approval] = asked["pendingRequests"]

    proxy = CuttingProxy(("127.0.0.1", int(console.url.rsplit(":", 1)[1])))
    stream = SessionStream(f"http://127.0.0.1:{proxy.port}", token=token, session_id="s1")
    seen: list[SessionEvent] = []
    reader = threading.Thread(target=lambda: seen.extend(stream.events()), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(e.type == "run.awaiting" for e in seen), "the first turn on the stream")
        answer_in_inbox(console.url, approval["requestId"])
        wait_for(lambda: any(e.type == "run.completed" for e in seen), "the continuation on the stream")

        proxy.cut()  # the connection drops between turns: the client resumes after the last event it saw
        client_tool = api.ok(
            "POST", "/api/agents/helper/runs", {"message": "call get_user_location", "sessionId": "s1"}
        )
        [location] = client_tool["pendingRequests"]
        wait_for(lambda: sum(e.type == "external_tool.requested" for e in seen) == 1, "the client tool's request")
        body = {"requestId": location["requestId"], "result": {"city": "Paris"}}
        api.ok("POST", f"/api/runs/{client_tool['runId']}/responses", body)
        wait_for(lambda: sum(e.type == "run.completed" for e in seen) == 2, "the client tool's continuation")

        question = json.dumps({"task": f"call ask_user {json.dumps({'question': 'Which city?'})}"})
        delegated = api.ok(
            "POST", "/api/agents/helper/runs", {"message": f"call researcher {question}", "sessionId": "s1"}
        )
        [asked_city] = delegated["pendingRequests"]
        assert asked_city["kind"] == "question", delegated
        wait_for(lambda: sum(e.type == "user_input.requested" for e in seen) == 1, "the sub-agent's question")
        body = {"requestId": asked_city["requestId"], "text": "Paris"}
        api.ok("POST", f"/api/runs/{delegated['runId']}/responses", body)
        wait_for(lambda: sum(e.type == "run.completed" for e in seen) == 3, "the sub-agent's continuation")
        assert api("DELETE", "/api/sessions/s1")[0] == 204
        reader.join(30)
        assert not reader.is_alive(), "the stream did not end once the session was deleted"
    finally:
        proxy.close()
    assert stream.reconnects >= 1

    stored = [e for e in seen if not e.envelope.ephemeral]
    runs: dict[str, list[SessionEvent]] = {}
    for event in stored:
        runs.setdefault(event.envelope.runId, []).append(event)
    assert len(runs) == 6  # the approval, the client tool, the sub-agent's question, and their continuations
    for run_id, events in runs.items():
        history = api.ok("GET", f"/api/runs/{run_id}/events")["items"]
        assert [e.envelope.id for e in events] == [h["id"] for h in history]  # no gap, no duplicate, in order
        assert [e.envelope.parentId for e in events] == [None] + [e.envelope.id for e in events[:-1]]
    envelope_schema = Draft202012Validator(schema["envelope"])
    for event in seen:
        dumped = event.envelope.model_dump(mode="json", exclude_none=True)
        envelope_schema.validate({**dumped, "parentId": event.envelope.parentId})
        Draft202012Validator(schema["payloads"][event.type]).validate(event.envelope.data)
    # agentId exactly on the sub-agent's events: those between its subagent.started and subagent.completed.
    started = [e for e in seen if e.type == "subagent.started"]
    assert len(started) == 1 and sum(e.type == "subagent.completed" for e in seen) == 1
    agent_id = started[0].payload.agentId  # type: ignore[attr-defined]
    inside, tagged = False, []
    for event in seen:
        if event.type == "subagent.completed":
            inside = False
        if event.envelope.agentId is not None:
            assert inside and event.envelope.agentId == agent_id, event.envelope
            tagged.append(event.type)
        elif inside:
            # The parent's own events while its sub-agent waits: the turn's end, and the next one's start.
            assert event.type in {"run.awaiting", "session.idle", "run.started"}, event.type
        if event.type == "subagent.started":
            inside = True
    assert {"user.message", "user_input.requested", "user_input.completed", "assistant.message"} <= set(tagged)
    for before, after in itertools.pairwise(seen):
        if not before.envelope.ephemeral and before.type in TURN_ENDS:
            assert after.type == "session.idle", (before.type, after.type)
    assert sum(e.type == "session.idle" for e in seen) == 6
    deltas = [e for e in seen if e.type == "assistant.message_delta"]
    assert deltas, "the deltas stream live on the session stream"
    assert all(e.payload.messageId for e in deltas)  # type: ignore[attr-defined]
