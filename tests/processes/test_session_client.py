"""The typed client (`airlock_events.SessionStream`) reads a whole session over the session stream of a real
console process, as the Copilot SDK's own events: a tool approval answered from the inbox, a client tool
answered through the API, and the continuations they start, on one SSE connection that a proxy cuts once in the
middle. No event is missed or repeated, every event is of an SDK type or a listed extension, the stored ones are
the session's history, chained by `parentId` across runs, and `session.idle` follows each turn's end."""

import contextlib
import itertools
import json
import re
import socket
import threading
import urllib.parse
import urllib.request

import pytest
from copilot.session_events import SessionEvent, SessionEventType
from jsonschema import Draft202012Validator

from agents.payloads import EXTENSION_TYPES, TURN_ENDS, is_stored
from airlock_events import SessionStream
from tests.processes.cluster import Api, login, wait_for

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
        wait_for(lambda: any(kind(e) == "run.awaiting" for e in seen), "the first turn on the stream")
        answer_in_inbox(console.url, approval["requestId"])
        wait_for(lambda: any(kind(e) == "run.completed" for e in seen), "the continuation on the stream")

        proxy.cut()  # the connection drops between turns: the client resumes after the last event it saw
        client_tool = api.ok(
            "POST", "/api/agents/helper/runs", {"message": "call get_user_location", "sessionId": "s1"}
        )
        [location] = client_tool["pendingRequests"]
        wait_for(lambda: sum(kind(e) == "external_tool.requested" for e in seen) == 1, "the client tool's request")
        body = {"requestId": location["requestId"], "result": {"city": "Paris"}}
        api.ok("POST", f"/api/runs/{client_tool['runId']}/responses", body)
        wait_for(lambda: sum(kind(e) == "run.completed" for e in seen) == 2, "the client tool's continuation")

        question = json.dumps({"task": f"call ask_user {json.dumps({'question': 'Which city?'})}"})
        delegated = api.ok(
            "POST", "/api/agents/helper/runs", {"message": f"call researcher {question}", "sessionId": "s1"}
        )
        [asked_city] = delegated["pendingRequests"]
        assert asked_city["kind"] == "question", delegated
        wait_for(lambda: sum(kind(e) == "user_input.requested" for e in seen) == 1, "the sub-agent's question")
        body = {"requestId": asked_city["requestId"], "text": "Paris"}
        api.ok("POST", f"/api/runs/{delegated['runId']}/responses", body)
        wait_for(lambda: sum(kind(e) == "run.completed" for e in seen) == 3, "the sub-agent's continuation")
        history = api.ok("GET", "/api/sessions/s1/events")["items"]
        assert api("DELETE", "/api/sessions/s1")[0] == 204
        reader.join(30)
        assert not reader.is_alive(), "the stream did not end once the session was deleted"
    finally:
        proxy.close()
    assert stream.reconnects >= 1

    types = [kind(e) for e in seen]
    assert all(e.type != SessionEventType.UNKNOWN or kind(e) in EXTENSION_TYPES for e in seen), set(types)
    stored = [e for e in seen if is_stored({"type": kind(e)})]
    assert len({h["runId"] for h in history}) == 6  # the approval, the client tool, the question, their continuations
    assert [str(e.id) for e in stored] == [h["id"] for h in history]  # no gap, no duplicate, in order
    ids = [e.id for e in stored]
    assert [e.parent_id for e in stored] == [None, *ids[:-1]]  # one chain across the session's runs
    envelope_schema = Draft202012Validator(schema["envelope"])
    for envelope in history:
        envelope_schema.validate(envelope)
        Draft202012Validator(schema["payloads"][envelope["type"]]).validate(envelope["data"])
    # agentId exactly on the sub-agent's events: those between its subagent.started and subagent.completed, and
    # it is the id of the call that started it.
    started = [e for e in seen if e.type == SessionEventType.SUBAGENT_STARTED]
    assert len(started) == 1 and types.count("subagent.completed") == 1
    agent_id = started[0].data.tool_call_id  # type: ignore[union-attr]
    inside, tagged = False, []
    for event in seen:
        if event.type == SessionEventType.SUBAGENT_COMPLETED:
            inside = False
        if event.agent_id is not None:
            assert inside and event.agent_id == agent_id, event
            tagged.append(kind(event))
        elif inside:
            # The parent's own events while its sub-agent waits: the turn's end, the next one's start, the call's
            # resumption.
            assert kind(event) in {
                "assistant.turn_end",
                "run.awaiting",
                "session.idle",
                "run.started",
                "assistant.turn_start",
            }, kind(event)
        if event.type == SessionEventType.SUBAGENT_STARTED:
            inside = True
    assert {"user.message", "user_input.requested", "user_input.completed", "assistant.message"} <= set(tagged)
    for before, after in itertools.pairwise(seen):
        if is_stored({"type": kind(before)}) and kind(before) in TURN_ENDS:
            assert after.type == SessionEventType.SESSION_IDLE, (kind(before), kind(after))
    assert types.count("session.idle") == 6
    deltas = [e for e in seen if e.type == SessionEventType.ASSISTANT_MESSAGE_DELTA]
    assert deltas, "the deltas stream live on the session stream"
    assert all(e.data.message_id for e in deltas)  # type: ignore[union-attr]


def kind(event: SessionEvent) -> str:
    """The event's type as sent (an extension's too: the SDK keeps it in `raw_type`)."""
    return str(event.to_dict()["type"])
