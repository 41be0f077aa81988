"""Inbox push latency: a request opens -> its fragment reaches N connected consoles, on one daphne.

For each N, N authenticated operator sockets listen on /ws/console/ and N sockets on a bare Channels
group (bench/push_asgi.py). Each round opens one approval request through the run API (the push is
rendered once and fanned out through the channel layer) and, beside it, sends one bare `group_send`
of a message of the same size. Latency per socket: receive time minus the time the push left (its
fragments rendered once, the pending count read) for the inbox, or the send time for the bare
broadcast; both clocks are this machine's. The one-off cost of rendering a push's fragments is
measured apart (`render ms`).

Usage: .venv/bin/python bench/push_latency.py [--clients 1,50,200] [--rounds 20]
"""

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(tempfile.mkdtemp(prefix="airlock-push-bench-"))
ENV = {
    **os.environ,
    "AIRLOCK_DATA_DIR": str(DATA),
    "DEBUG": "0",
    "SECRET_KEY": "bench-" + "y" * 60,
    "ALLOWED_HOSTS": "127.0.0.1",
    "SECURE_SSL_REDIRECT": "0",
    "LOG_LEVEL": "WARNING",
    "PYTHONPATH": str(ROOT),
}
os.environ.update({k: v for k, v in ENV.items() if k != "PYTHONPATH"})
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
sys.path.insert(0, str(ROOT))

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.core.management import call_command  # noqa: E402

from agents.definitions import DefinitionContent  # noqa: E402
from agents.models import Agent  # noqa: E402
from console.models import ApiToken, Membership, Tenant  # noqa: E402


def setup() -> tuple[str, str]:
    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug="bench", name="Bench")
    user = User.objects.create_user("bench-operator", password="unused-password-1")
    membership = Membership.objects.create(user=user, tenant=tenant, role="operator")
    Agent.create(
        tenant,
        DefinitionContent.model_validate({"name": "mailer", "tools": [{"name": "send_email", "approval": "always"}]}),
        user,
    )
    session = SessionStore()
    session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(user.pk), settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session["tenant_id"] = tenant.pk
    session.create()
    return ApiToken.issue(membership, "bench")[1], session.session_key or ""


def render_cost(rounds: int = 50) -> float:
    """Median time to render one push's fragments (both role variants), in ms."""
    from approvals.models import PendingRequest
    from approvals.push import render_request

    request = PendingRequest.objects.select_related("agent", "run", "session").first()
    assert request is not None
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        render_request(request, can_answer=True) + render_request(request, can_answer=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Sockets:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.expected = 0
        self.done = asyncio.Event()
        self.received = 0

    def got(self, latency: float) -> None:
        self.latencies.append(latency)
        self.received += 1
        if self.received >= self.expected:
            self.done.set()

    def arm(self, count: int) -> None:
        self.expected, self.received = count, 0
        self.done.clear()


async def listen(
    url: str, headers: dict[str, str], sink: Sockets, kind: str, ready: asyncio.Event, count: list[int], total: int
) -> None:
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        count[0] += 1
        if count[0] == total:
            ready.set()
        async for raw in ws:
            now = time.time()
            message = json.loads(raw)
            if (kind == "inbox" and message.get("type") == "requests_opened") or (
                kind == "bare" and message.get("type") == "bench"
            ):
                sink.got(now - message["sentAt"])


def post(url: str, body: dict | None, token: str | None = None) -> bytes:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else b""
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as response:
        return response.read()


async def measure(
    base: str, ws_base: str, token: str, session: str, clients: int, rounds: int
) -> dict[str, list[float]]:
    inbox, bare = Sockets(), Sockets()
    headers = {"Cookie": f"sessionid={session}", "Origin": base}
    ready_inbox, ready_bare = asyncio.Event(), asyncio.Event()
    counts_inbox, counts_bare = [0], [0]
    tasks = [
        asyncio.create_task(
            listen(f"{ws_base}/ws/console/", headers, inbox, "inbox", ready_inbox, counts_inbox, clients)
        )
        for _ in range(clients)
    ]
    tasks += [
        asyncio.create_task(listen(f"{ws_base}/bench/ws/", headers, bare, "bare", ready_bare, counts_bare, clients))
        for _ in range(clients)
    ]
    await asyncio.wait_for(asyncio.gather(ready_inbox.wait(), ready_bare.wait()), timeout=120)
    size = 0
    for n in range(rounds):
        inbox.arm(clients)
        body = {
            "message": 'call send_email {"to": "a@b.c", "subject": "s", "body": "b"}',
            "sessionId": f"b{clients}-{n}",
        }
        await asyncio.to_thread(post, f"{base}/api/agents/mailer/runs", body, token)
        await asyncio.wait_for(inbox.done.wait(), timeout=60)
        size = size or 1500
        bare.arm(clients)
        await asyncio.to_thread(post, f"{base}/bench/broadcast?size={size}", None)
        await asyncio.wait_for(bare.done.wait(), timeout=60)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"inbox": inbox.latencies, "bare": bare.latencies}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="1,50,200")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    token, session = setup()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "bench.push_asgi:application"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base, ws_base = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        machine = f"{platform.node()} {platform.machine()} {os.cpu_count()} cores"
        print(f"machine: {machine}, Python {platform.python_version()}")
        print("| clients | inbox p50 ms | inbox p99 ms | bare p50 ms | bare p99 ms | p50 ratio | p99 ratio |")
        print("|---|---|---|---|---|---|---|")
        for clients in [int(c) for c in args.clients.split(",")]:
            result = asyncio.run(measure(base, ws_base, token, session, clients, args.rounds))
            i50, i99 = statistics.median(result["inbox"]) * 1000, percentile(result["inbox"], 99) * 1000
            b50, b99 = statistics.median(result["bare"]) * 1000, percentile(result["bare"], 99) * 1000
            print(f"| {clients} | {i50:.1f} | {i99:.1f} | {b50:.1f} | {b99:.1f} | {i50 / b50:.2f} | {i99 / b99:.2f} |")
        print(f"\nrender ms (both variants of one push, once per push): {render_cost():.2f}")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
