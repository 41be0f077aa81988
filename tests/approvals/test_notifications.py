"""Notifications (SPEC section 11): the tenant's webhook receives `request.opened` / `request.closed`, signed,
off the answer path (a real HTTP server on loopback receives them); members who opted in get e-mail digests
of the requests waiting longer than their minutes that they may answer."""

import hashlib
import hmac
import json
import logging
import queue
import socketserver
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core import mail
from django.core.management import call_command
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent, Run
from agents.queue import cancel
from approvals import digests, webhooks
from approvals.actions import escalate_due, expire_due
from approvals.digests import send_digests
from approvals.models import ApproverGroup, Digest, PendingRequest
from tests.conftest import grant, make_persona
from tests.helpers import EMAIL, ask_to_send, call_line, make_agent, run_ok

SECRET = "s3cret-for-the-events"


class Receiver:
    """A webhook receiver on loopback: records each POST (headers, body) and answers the next of `statuses`
    (then 200), after `delay` seconds."""

    def __init__(self, statuses: tuple[int, ...] = (), delay: float = 0) -> None:
        self.posts: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        statuses_left = list(statuses)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts.put((dict(self.headers), body))
                time.sleep(delay)
                self.send_response(statuses_left.pop(0) if statuses_left else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/events"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next_event(self, timeout: float = 5) -> dict[str, Any]:
        """The next event POSTed, its signature checked."""
        headers, body = self.posts.get(timeout=timeout)
        assert headers["Content-Type"] == "application/json"
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["X-Airlock-Signature"], expected)
        return json.loads(body)


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    """The receivers a test starts, closed after it."""
    started: list[Receiver] = []
    yield started
    for receiver in started:
        receiver.close()


def start(receivers: list[Receiver], *statuses: int, delay: float = 0) -> Receiver:
    receiver = Receiver(statuses, delay)
    receivers.append(receiver)
    return receiver


@pytest.fixture
def receiver(acme, receivers, monkeypatch) -> Receiver:
    """The receiver of acme's request events."""
    monkeypatch.setenv("AIRLOCK_EVENTS_SECRET", SECRET)
    monkeypatch.setattr(webhooks, "RETRY_DELAYS", (0.05, 0.05))
    receiver = start(receivers)
    acme.request_webhook = grant("events", "webhook", acme, url=receiver.url, secret_env="AIRLOCK_EVENTS_SECRET")
    acme.save()
    return receiver


def test_it_posts_signed_events_when_a_request_opens_and_when_it_is_answered(
    admin, operator, receiver, django_capture_on_commit_callbacks
):
    make_agent(admin)
    with django_capture_on_commit_callbacks(execute=True):
        asked = ask_to_send(admin)
    opened = receiver.next_event()
    request = PendingRequest.objects.get()
    assert opened["type"] == "request.opened"
    assert opened["tenant"] == "acme"
    assert opened["request"] == {
        "requestId": str(request.id),
        "runId": asked["runId"],
        "sessionId": "s1",
        "agent": "assistant",
        "kind": "approval",
        "toolName": "send_email",
        "approvers": None,
        "status": "pending",
        "approved": None,
        "answeredBy": None,
        "answeredVia": None,
        "closedBy": None,
        "openedAt": request.opened_at.isoformat(),
        "expiresAt": None,
        "answeredAt": None,
        "closedAt": None,
    }

    answer = {"requestId": str(request.id), "approved": False, "reason": "not today"}
    with django_capture_on_commit_callbacks(execute=True):
        assert operator.api("POST", f"/api/runs/{asked['runId']}/responses", answer).json()["status"] == "accepted"
    closed = receiver.next_event()
    assert closed["type"] == "request.closed"
    assert closed["id"] != opened["id"]
    request.refresh_from_db()
    assert closed["request"] | {"openedAt": None} == opened["request"] | {
        "status": "answered",
        "approved": False,
        "answeredBy": "otto",
        "answeredVia": "api",
        "openedAt": None,
        "answeredAt": request.answered_at.isoformat(),
        "closedAt": request.answered_at.isoformat(),
    }


def test_it_says_how_a_request_closed_without_an_answer(admin, receiver, django_capture_on_commit_callbacks):
    make_agent(admin)
    with django_capture_on_commit_callbacks(execute=True):
        asked = ask_to_send(admin, session="s1")
        PendingRequest.objects.update(expires_at=timezone.now())
        expire_due(timezone.now() + timedelta(seconds=1))
    assert [receiver.next_event()["type"] for _ in range(2)] == ["request.opened", "request.closed"]

    with django_capture_on_commit_callbacks(execute=True):
        second = ask_to_send(admin, session="s2")
        assert cancel(Run.objects.get(id=second["runId"]), admin.user) == "cancelled"
    receiver.next_event()
    closed = receiver.next_event()
    assert (closed["request"]["runId"], closed["request"]["status"]) == (second["runId"], "cancelled")
    assert closed["request"]["closedBy"] == "ada"
    assert closed["request"]["answeredBy"] is None
    assert asked["runId"] != second["runId"]


def test_an_answer_a_cancel_voids_before_a_run_carried_it_closes_the_request_again(
    admin, operator, receiver, django_capture_on_commit_callbacks
):
    make_agent(admin)
    two_calls = f"{call_line('send_email', EMAIL)}\n{call_line('get_user_location', {})}"
    with django_capture_on_commit_callbacks(execute=True):
        asked = run_ok(admin, {"message": two_calls, "sessionId": "s1"})
    assert [receiver.next_event()["type"] for _ in range(2)] == ["request.opened"] * 2
    approval = next(r["requestId"] for r in asked["pendingRequests"] if r["kind"] == "approval")
    with django_capture_on_commit_callbacks(execute=True):
        answer = {"requestId": approval, "approved": True}
        assert operator.api("POST", f"/api/runs/{asked['runId']}/responses", answer).json()["status"] == "accepted"
    answered = receiver.next_event()["request"]
    assert (answered["requestId"], answered["status"], answered["answeredBy"]) == (approval, "answered", "otto")

    with django_capture_on_commit_callbacks(execute=True):
        assert cancel(Run.objects.get(id=asked["runId"]), admin.user) == "cancelled"
    closed = {event["request"]["requestId"]: event["request"] for event in (receiver.next_event() for _ in range(2))}
    location = str(PendingRequest.objects.get(kind="client_tool").pk)
    assert {rid: request["status"] for rid, request in closed.items()} == {approval: "cancelled", location: "cancelled"}
    assert (closed[approval]["answeredBy"], closed[approval]["approved"], closed[approval]["closedBy"]) == (
        "otto",
        True,
        "ada",
    )


def test_a_slow_receiver_never_slows_the_answer(
    admin, operator, acme, receiver, receivers, django_capture_on_commit_callbacks
):
    slow = start(receivers, delay=2)
    acme.request_webhook.url = slow.url
    acme.request_webhook.save()
    make_agent(admin)
    with django_capture_on_commit_callbacks(execute=True):
        asked = ask_to_send(admin)
    answer = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}

    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.api("POST", f"/api/runs/{asked['runId']}/responses", answer)
    assert time.monotonic() - started < 1.5
    assert response.json()["status"] == "accepted"
    assert slow.next_event(timeout=10)["type"] == "request.opened"
    assert slow.next_event(timeout=10)["type"] == "request.closed"


def test_it_tries_again_after_a_failure_and_logs_what_it_gives_up(
    admin, acme, receiver, receivers, caplog, django_capture_on_commit_callbacks
):
    flaky = start(receivers, 500, 503)
    acme.request_webhook.url = flaky.url
    acme.request_webhook.save()
    make_agent(admin)
    with django_capture_on_commit_callbacks(execute=True):
        ask_to_send(admin, session="s1")
    attempts = [flaky.next_event() for _ in range(3)]
    assert len({event["id"] for event in attempts}) == 1  # the same event, the third time accepted

    acme.request_webhook.url = "http://127.0.0.1:9/closed-port"
    acme.request_webhook.save()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="approvals.webhooks"):
        with django_capture_on_commit_callbacks(execute=True):
            ask_to_send(admin, session="s2")  # the caller sees nothing of the failures
        assert webhooks.SENDER.wait(5)  # what a process waits for as it exits
    assert "given up" in caplog.text
    assert caplog.text.count("failed (attempt") == 3


def test_it_sends_nothing_to_a_webhook_no_longer_granted(
    admin, acme, globex, receiver, django_capture_on_commit_callbacks
):
    make_agent(admin)
    hook = acme.request_webhook
    hook.tenants.set([globex])  # the installation took the grant back
    with django_capture_on_commit_callbacks(execute=True):
        ask_to_send(admin, session="revoked")
    hook.tenants.set([acme])
    with django_capture_on_commit_callbacks(execute=True):
        ask_to_send(admin, session="granted")
    # The sender keeps the order: had the first been sent, it would come first.
    assert receiver.next_event()["request"]["sessionId"] == "granted"


# --- digests -------------------------------------------------------------------------------------


def opt_in(persona, minutes: int = 10) -> Digest:
    persona.user.email = f"{persona.user.username}@example.com"
    persona.user.save()
    return Digest.objects.create(membership=persona.membership, after_minutes=minutes)


def waited(minutes: int, session: str, persona) -> PendingRequest:
    asked = ask_to_send(persona, session=session)
    request = PendingRequest.objects.get(id=asked["pendingRequests"][0]["requestId"])
    request.opened_at = timezone.now() - timedelta(minutes=minutes)
    request.save(update_fields=["opened_at"])
    return request


def test_a_digest_lists_what_waited_longer_than_the_members_minutes_once(admin, operator):
    make_agent(admin)
    old = waited(11, "s1", admin)
    waited(5, "s2", admin)  # not long enough yet
    opt_in(operator, minutes=10)

    assert send_digests() == 1
    [sent] = mail.outbox
    assert sent.to == ["otto@example.com"]
    assert sent.subject == "[Airlock] 1 request waiting in Acme"
    assert f"http://127.0.0.1:8000/inbox/?agent=assistant#request-{old.id}" in sent.body
    assert "assistant: send_email" in sent.body
    assert send_digests() == 0  # at most one every 10 minutes

    later = timezone.now() + timedelta(minutes=10)
    assert send_digests(later) == 1
    assert f"#request-{old.id}" not in mail.outbox[1].body  # in one digest only
    assert "1 request in Acme has waited longer than 10 minutes" in mail.outbox[1].body
    assert send_digests(later + timedelta(minutes=30)) == 0  # nothing new


def test_a_digest_lists_only_what_the_member_may_answer(admin, operator, reader, acme):
    group = ApproverGroup.objects.create(tenant=acme, name="finance")
    make_agent(admin, tools=[{"name": "send_email", "approval": "always", "approvers": "finance"}])
    stranger = make_persona("sam", acme, "operator")
    waited(20, "s1", admin)
    group.members.add(operator.user)
    for persona in (admin, operator, reader, stranger):
        opt_in(persona)

    assert send_digests() == 2
    assert sorted(message.to[0] for message in mail.outbox) == ["ada@example.com", "otto@example.com"]


def test_a_digest_goes_out_over_smtp(admin, operator, settings):
    """A real SMTP exchange on loopback (a few lines of socketserver: no SMTP package is installed)."""
    received: queue.Queue[bytes] = queue.Queue()

    class Sink(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.wfile.write(b"220 sink\r\n")
            while line := self.rfile.readline():
                if line.upper().startswith(b"DATA"):
                    self.wfile.write(b"354 go on\r\n")
                    received.put(b"".join(iter(self.rfile.readline, b".\r\n")))
                self.wfile.write(b"221 bye\r\n" if line.upper().startswith(b"QUIT") else b"250 ok\r\n")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    backend = "django.core.mail.backends.smtp.EmailBackend"
    settings.MAILERS = {
        "default": {"BACKEND": backend, "OPTIONS": {"host": "127.0.0.1", "port": server.server_address[1]}}
    }
    make_agent(admin)
    waited(30, "s1", admin)
    opt_in(operator)

    assert send_digests() == 1
    message = received.get(timeout=5).decode()
    assert "Subject: [Airlock] 1 request waiting in Acme" in message
    assert "To: otto@example.com" in message
    server.shutdown()
    server.server_close()


def test_send_digests_sends_what_is_due(admin, operator):
    make_agent(admin)
    waited(15, "s1", admin)
    opt_in(operator)
    call_command("send_digests")
    assert len(mail.outbox) == 1


# --- escalation (SPEC section 14): the groups a step adds hear of the request as of a new one -----------------


ESCALATED = {
    "name": "deploy",
    "approval": "always",
    "approvers": "sre",
    "escalation": [{"after": "15m", "to": ["leads"]}],
}


def escalating(admin, operator) -> dict[str, Any]:
    """otto of sre, lena of leads; an external agent whose `deploy` escalates from sre to leads after 15 minutes
    and whose `page` is for leads from the start."""
    lena = make_persona("lena", admin.tenant, "operator")
    ApproverGroup.objects.create(tenant=admin.tenant, name="sre").members.add(operator.user)
    ApproverGroup.objects.create(tenant=admin.tenant, name="leads").members.add(lena.user)
    tools = [ESCALATED, {"name": "page", "approval": "always", "approvers": "leads"}]
    content = DefinitionContent.model_validate({"name": "releaser", "runtime": "external", "tools": tools})
    Agent.create(admin.tenant, content, admin.user)
    return {"lena": lena, "otto": operator}


def open_external(persona, tool: str) -> PendingRequest:
    opened = persona.api("post", "/api/agents/releaser/requests", {"toolName": tool, "arguments": {}})
    assert opened.status_code == 201, opened.content
    return PendingRequest.objects.get(id=opened.json()["requestId"])


def test_an_escalation_step_announces_the_request_to_the_webhook_again_with_its_groups(
    admin, operator, receiver, django_capture_on_commit_callbacks
):
    escalating(admin, operator)
    with django_capture_on_commit_callbacks(execute=True):
        deploy = open_external(admin, "deploy")
    first = receiver.next_event()
    assert (first["type"], first["request"]["approvers"]) == ("request.opened", "sre")
    with django_capture_on_commit_callbacks(execute=True):
        assert escalate_due(deploy.opened_at + timedelta(minutes=15)) == [deploy]
    again = receiver.next_event()
    assert again["type"] == "request.opened" and again["id"] != first["id"]
    assert again["request"]["requestId"] == str(deploy.id)
    assert (again["request"]["approvers"], again["request"]["status"]) == (["sre", "leads"], "pending")


def test_a_request_escalated_to_a_group_is_in_its_members_next_digest_once(admin, operator):
    """lena's digest went out after `deploy` opened (it listed `page`, opened later); `deploy` reaches her group 15
    minutes after its opening: her digest lists it once it has waited her minute from then. otto of sre had it in his
    digest already: not again."""
    people = escalating(admin, operator)
    deploy = open_external(admin, "deploy")
    page = open_external(admin, "page")
    opened = deploy.opened_at
    opt_in(people["lena"], minutes=1)
    opt_in(people["otto"], minutes=1)

    assert send_digests(opened + timedelta(minutes=5)) == 2
    said = {message.to[0]: message.body for message in mail.outbox}
    assert f"#request-{page.id}" in said["lena@example.com"] and f"#request-{deploy.id}" not in said["lena@example.com"]
    assert f"#request-{deploy.id}" in said["otto@example.com"]

    escalate_due(opened + timedelta(minutes=15))
    assert send_digests(opened + timedelta(minutes=15, seconds=30)) == 0  # it reached lena less than a minute ago
    assert send_digests(opened + timedelta(minutes=16, seconds=30)) == 1
    [escalated] = mail.outbox[2:]
    assert escalated.to == ["lena@example.com"]
    assert f"#request-{deploy.id}" in escalated.body and f"#request-{page.id}" not in escalated.body
    assert send_digests(opened + timedelta(minutes=30)) == 0  # in one digest of each only


def test_a_full_digest_and_an_escalated_request_each_list_the_rest_later(admin, operator, monkeypatch):
    """Two requests a digest at most: lena's first lists the first two `page`s; after `deploy` escalates to her group
    her next lists the third and `deploy`, and nothing is listed twice."""
    monkeypatch.setattr(digests, "MOST_LISTED", 2)
    people = escalating(admin, operator)
    deploy = open_external(admin, "deploy")
    pages = [open_external(admin, "page") for _ in range(3)]
    opened = deploy.opened_at
    opt_in(people["lena"], minutes=1)

    assert send_digests(opened + timedelta(minutes=5)) == 1
    escalate_due(opened + timedelta(minutes=15))
    assert send_digests(opened + timedelta(minutes=17)) == 1
    assert send_digests(opened + timedelta(minutes=30)) == 0
    listed = [[r for r in [*pages, deploy] if f"#request-{r.id}" in message.body] for message in mail.outbox]
    assert listed == [pages[:2], [pages[2], deploy]]
