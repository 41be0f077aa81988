"""What a policy webhook may answer (issue 26: a 200 MB `reason` took a run 51 s, a 500 and 2.8 GB): an answer
over 64 KB is a fail-closed deny read no further, and the reason and message of any verdict are capped wherever
Airlock keeps them (the run's error, its `policy.verdict` events, its records, an inbox request's `policy`)."""

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agents.models import Run
from agents.policies import MESSAGE_LIMIT, REASON_LIMIT, VERDICT_LIMIT
from tests.conftest import grant
from tests.helpers import call_line, make_agent, run_ok, send_json, stored_events

TOOLS = [{"name": "send_email", "approval": "never"}, {"name": "get_time", "approval": "never"}]
HOOKS = {
    "declaration": "agent-hooks-declaration/1.0",
    "configuration": {"approval": {"resolver": "airlock-inbox"}},
    "bindings": [{"id": "receiver", "kind": "airlock.webhook", "config": {"connection": "receiver"}}],
}
FORTY_MB = 40 * 1024 * 1024


class Receiver(BaseHTTPRequestHandler):
    """A policy webhook: `answer(handler, context)` writes the answer of each POST (None: allow). `sent` counts
    what the oversized answers got out before their reader hung up; `done` is set when one ends."""

    protocol_version = "HTTP/1.1"  # chunked answers
    answer: Callable[["Receiver", dict[str, Any]], bool | None] = staticmethod(lambda handler, context: None)
    sent: list[int] = []
    done = threading.Event()

    def do_POST(self) -> None:
        context = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not Receiver.answer(self, context):
            self.verdict({"decision": "allow"})

    def verdict(self, verdict: dict[str, Any]) -> None:
        send_json(self, verdict)

    def oversized(self, size: int, *, chunked: bool) -> None:
        """A deny whose reason makes the body `size` bytes, sent in 64 KB pieces, with its length or chunked."""
        head, tail = b'{"decision": "deny", "reason": "', b'"}'
        piece, left, sent = b"x" * 65_536, size - len(head) - len(tail), 0
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header(*(("Transfer-Encoding", "chunked") if chunked else ("Content-Length", str(size))))
        self.end_headers()
        try:
            for part in (head, *[piece] * (left // len(piece)), piece[: left % len(piece)], tail):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                sent += len(part)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the reader hung up
        finally:
            self.close_connection = True  # a reader that hung up resets the connection: wait for no next request
            Receiver.sent.append(sent)
            Receiver.done.set()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver(acme) -> Iterator[type[Receiver]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Receiver.sent, Receiver.done = [], threading.Event()
    grant("receiver", "webhook", acme, url=f"http://127.0.0.1:{server.server_address[1]}/verdict")
    yield Receiver
    server.shutdown()
    server.server_close()
    Receiver.answer = staticmethod(lambda handler, context: None)


def at_input(reply: Callable[[Receiver], None]) -> Callable[[Receiver, dict[str, Any]], bool]:
    def answer(handler: Receiver, context: dict[str, Any]) -> bool:
        if context["interception_point"] != "input":
            return False
        reply(handler)
        return True

    return staticmethod(answer)  # type: ignore[return-value]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_it_denies_an_answer_over_the_limit_unread(admin, receiver, chunked):
    receiver.answer = at_input(lambda handler: handler.oversized(FORTY_MB, chunked=chunked))
    make_agent(admin, tools=TOOLS, hooks=HOOKS)

    started = time.monotonic()
    result = run_ok(admin, {"message": "hello"})

    assert time.monotonic() - started < 5
    assert result["status"] == "blocked"
    assert result["error"] == {
        "code": "policy_denied",
        "point": "input",
        "binding": "receiver",
        "reason": "host_error:interceptor_failed",
        "message": "VerdictTooLarge",
    }
    assert receiver.done.wait(10)
    # The reader hung up: the rest of the answer never left the receiver (what did sat in the socket's buffers).
    assert receiver.sent[0] < FORTY_MB // 2
    assert len(json.dumps(Run.objects.get(id=result["runId"]).records)) < 10_000


def test_it_refuses_an_announced_length_over_the_limit_before_reading(admin, receiver):
    """Headers saying the body is 40 MB, and no body: the deny comes at once, not at the webhook's timeout."""

    def announce(handler: Receiver) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(FORTY_MB))
        handler.end_headers()
        handler.wfile.flush()
        time.sleep(3)

    receiver.answer = at_input(announce)
    make_agent(admin, tools=TOOLS, hooks=HOOKS)

    result = run_ok(admin, {"message": "hello"})

    assert (result["status"], result["error"]["message"]) == ("blocked", "VerdictTooLarge")


def test_it_reads_an_answer_of_the_limit_exactly(admin, receiver):
    receiver.answer = at_input(lambda handler: handler.oversized(VERDICT_LIMIT, chunked=True))
    make_agent(admin, tools=TOOLS, hooks=HOOKS)

    result = run_ok(admin, {"message": "hello"})

    # The receiver's own deny, its reason capped.
    assert result["error"]["reason"] == "x" * (REASON_LIMIT - 1) + "…"


LONG_REASON, LONG_MESSAGE = "r" * 5_000, "m" * 50_000
CAPPED = {"reason": "r" * (REASON_LIMIT - 1) + "…", "message": "m" * (MESSAGE_LIMIT - 1) + "…"}


def capped(said: dict[str, Any]) -> bool:
    """Whether `said` has the long reason capped, and the long message cut (by Airlock, or shorter by the SDK, whose
    records keep a verdict's message to 256 characters)."""
    message = said["message"]
    return said["reason"] == CAPPED["reason"] and len(message) <= MESSAGE_LIMIT and message.endswith("m…")


def test_it_caps_the_reason_and_message_of_a_verdict_wherever_they_are_kept(admin, receiver):
    def answer(handler: Receiver, context: dict[str, Any]) -> bool:
        point = context["interception_point"]
        long = {"reason": LONG_REASON, "message": LONG_MESSAGE}
        if point == "agent_startup":
            handler.verdict({"decision": "allow", "warnings": [long]})
        elif point == "input":
            handler.verdict({"decision": "deny", **long})
        return point in ("agent_startup", "input")

    receiver.answer = staticmethod(answer)
    make_agent(admin, tools=TOOLS, hooks=HOOKS)

    result = run_ok(admin, {"message": "hello"})

    assert result["status"] == "blocked"
    error = result["error"]
    assert (error["code"], error["point"]) == ("policy_denied", "input") and capped(error)
    verdicts = [e.data for e in stored_events(result["runId"]) if e.type == "policy.verdict"]
    assert [v["decision"] for v in verdicts] == ["warn", "deny"] and all(capped(v) for v in verdicts)
    [blocked] = [e.data for e in stored_events(result["runId"]) if e.type == "run.blocked"]
    assert blocked["error"] == error
    records = admin.api("GET", f"/api/runs/{result['runId']}/records").json()["items"]
    [warning] = records[0]["verdict"]["warnings"]
    assert capped(warning) and capped(records[1]["verdict"])
    assert records[1]["verdicts"][0]["reason"] == CAPPED["reason"]


def test_it_caps_the_policy_an_escalation_puts_on_its_inbox_request(admin, receiver):
    def answer(handler: Receiver, context: dict[str, Any]) -> bool:
        if context["interception_point"] != "pre_tool_call":
            return False
        handler.verdict({"decision": "deny", "approval": {}, "reason": LONG_REASON, "message": LONG_MESSAGE})
        return True

    receiver.answer = staticmethod(answer)
    make_agent(admin, tools=TOOLS, hooks=HOOKS)

    result = run_ok(admin, {"message": call_line("get_time"), "sessionId": "s1"})

    assert result["status"] == "awaiting_approval"
    [asked] = result["pendingRequests"]
    assert asked["policy"] == {"binding": "receiver", **CAPPED}
    inbox = admin.api("GET", "/api/requests").json()["items"]
    assert [request["policy"] for request in inbox] == [{"binding": "receiver", **CAPPED}]
