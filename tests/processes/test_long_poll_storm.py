"""Issue 48's finding 4, as it was found: a thousand external agents long-polling one served console at once
(`GET /api/requests/{id}?wait=N`, SPEC section 12). Meanwhile the console's threads stay within a fixed bound,
another tenant's API answers within half a second (p99; 20-40 ms median, the bound is for a 2-CPU machine that also
runs a thousand clients), every wait ends within three seconds of its N, the poll past
`LONG_POLLS_PER_PROCESS` is 429, and afterwards the console's memory is back within 10% of where it was."""

import asyncio
import http.client
import json
import os
import resource
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.processes.cluster import PYTHON, ROOT, Api, Process, new_cluster, scratch_database, unreachable

# One worker runs every test of this module (`--dist loadgroup`): each flushes its Redis DB as it starts, which
# would drop the groups and messages of one running beside it on another worker (a waiter never woken).
pytestmark = [pytest.mark.processes, pytest.mark.xdist_group("long-poll-storm-redis-10")]

POLLS = 1000
# The requests they wait on, each by as many agents (opening a thousand takes the console a minute).
REQUESTS = 100
WAIT = 15
# Connections opened together (daphne listens with a backlog of 50: more at once are dropped and retried).
WAVE = 50
# What the console may add to its threads while the polls arrive, wait and end: its long-poll readers
# (console.asgi.LONG_POLL_THREADS) and a few request threads for the other tenant's calls.
THREAD_BOUND = 12
OTHER_P99 = 0.5
# Its own Redis DB (test_long_poll_cluster uses 6, test_scaleout 5, the benchmarks 7 to 9).
REDIS_URL = os.environ.get("AIRLOCK_TEST_REDIS_LONG_POLL_STORM", "redis://127.0.0.1:6379/10")
DEPLOYER = {"name": "deployer", "runtime": "external", "tools": [{"name": "deploy", "description": "Deploy"}]}

# In one process (each one that sets Django up costs seconds): acme's operator ci and globex's admin gus, each with
# a token, and argv[1] requests of acme's external agent `deployer` (argv[2]), opened in one transaction (a hundred
# through the API would take most of the test's time); prints the two tokens and the requests' ids as JSON.
SEED = """
import io, json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
import django
django.setup()
from django.core.management import call_command
from django.db import transaction
from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.actions import open_request
from approvals.external_wire import OpenRequest
from console.models import Membership
call_command("create_user", "ci", "--tenant", "acme", "--role", "operator", "--password", "ci-password-7f3a")
call_command("create_tenant", "globex", "--name", "Globex")
call_command("create_user", "gus", "--tenant", "globex", "--role", "admin", "--password", "gus-password-7f3a")
tokens = []
for user, tenant in (("ci", "acme"), ("gus", "globex")):
    out = io.StringIO()
    call_command("create_token", user, "--tenant", tenant, stdout=out)
    tokens.append(out.getvalue().strip())
membership = Membership.objects.select_related("tenant", "user").get(user__username="ci", tenant__slug="acme")
Agent.create(membership.tenant, DefinitionContent.model_validate(json.loads(sys.argv[2])), membership.user)
body = OpenRequest.model_validate({"toolName": "deploy", "arguments": {}})
with transaction.atomic():
    opened = [open_request(membership, membership.user, "deployer", body) for _ in range(int(sys.argv[1]))]
print(json.dumps([*tokens, [str(o.request.id) for o in opened]]))
"""


def status_of(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


def raise_open_files() -> None:
    """A thousand sockets on each side: lift this process's soft limit (the console inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class Poll:
    """One `GET /api/requests/{id}?wait=N` on a connection of its own (plain asyncio streams: a thousand clients
    of a heavier library would cost this process more than the console)."""

    def __init__(self, request_id: str, seconds: int) -> None:
        self.path = f"/api/requests/{request_id}?wait={seconds}"
        self.sent_at = self.answered_at = 0.0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body: Any = None
        self.reader: asyncio.StreamReader
        self.writer: asyncio.StreamWriter

    async def send(self, port: int, token: str) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        self.sent_at = time.monotonic()
        self.writer.write(
            f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
        )

    async def answered(self) -> "Poll":
        try:
            lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            self.status = int(lines[0].split(" ", 2)[1])
            for line in lines[1:]:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
            if "content-length" not in self.headers:
                raise AssertionError(f"{lines} {await self.reader.read()!r}")
            self.body = json.loads(await self.reader.readexactly(int(self.headers["content-length"])))
            self.answered_at = time.monotonic()
        finally:
            self.writer.close()
        return self

    @property
    def took(self) -> float:
        return self.answered_at - self.sent_at


async def storm(port: int, token: str, ids: list[str], seconds: int, extra: str | None = None) -> list[Poll]:
    """A poll of each of `ids` at once; with `extra`, one more poll of it once they are all sent (the last of
    the list returned)."""
    polls = [Poll(rid, seconds) for rid in ids]
    for first in range(0, len(polls), WAVE):
        await asyncio.gather(*(poll.send(port, token) for poll in polls[first : first + WAVE]))
    if extra is not None:
        await asyncio.sleep(1)  # all read by the console
        polls.append(Poll(extra, seconds))
        await polls[-1].send(port, token)
    return list(await asyncio.gather(*(poll.answered() for poll in polls)))


class Watch(threading.Thread):
    """Until stopped: the console's most threads (sampled every 20 ms), and the time of each of another tenant's
    calls of its inbox, one after another."""

    def __init__(self, pid: int, other: Api) -> None:
        super().__init__(daemon=True)
        self.pid, self.token = pid, other.token
        self.host, port = other.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        self.peak_threads = 0
        self.latencies: list[float] = []
        self.failures: list[Any] = []
        self.stopping = threading.Event()
        self.sampler = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stopping.is_set():
            self.peak_threads = max(self.peak_threads, status_of(self.pid, "Threads"))
            time.sleep(0.02)

    def run(self) -> None:
        self.sampler.start()
        # One connection kept open, as a dashboard holds one: a new connection for each call would, while the storm
        # fills daphne's listen backlog, now and then be dropped and wait a second for its SYN to be sent again.
        # That backlog (50) is the storm's admission: accepting the thousand at once raised this p99 from 50-140 ms
        # to 170-400 ms on a loaded 2-CPU machine (the note of issue 56, 2026-12-06).
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            while not self.stopping.is_set():
                started = time.monotonic()
                try:
                    connection.request(
                        "GET", "/api/requests?limit=5", headers={"Authorization": f"Bearer {self.token}"}
                    )
                    response = connection.getresponse()
                    body = response.read()
                except (OSError, http.client.HTTPException) as error:
                    self.failures.append(error)
                    connection.close()  # opened again by the next request
                    continue
                self.latencies.append(time.monotonic() - started)
                if response.status != 200:
                    self.failures.append((response.status, body))
                time.sleep(0.05)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        self.sampler.join(5)

    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """SQLite and the in-memory layer (the one-process default), or PostgreSQL and the Redis layer."""
    if request.param == "sqlite":
        yield {}
        return
    problem = unreachable(REDIS_URL)
    if problem is not None:
        pytest.skip(f"PostgreSQL and Redis are needed: {problem}")  # a failure under CI (tests/conftest.py)
    redis.Redis.from_url(REDIS_URL).flushdb()
    with scratch_database("airlock_long_poll_storm") as database:
        yield {"DATABASE_URL": database, "REDIS_URL": REDIS_URL}


def served(tmp_path: Path, backend: dict[str, str]) -> tuple[Process, str, Api, list[str], Any]:
    """A console capped at POLLS long polls; the token of acme's operator ci, globex's API, acme's open requests,
    and the cluster (to stop)."""
    cluster = new_cluster(tmp_path, **backend)
    seeded = subprocess.run(
        [PYTHON, "-c", SEED, str(REQUESTS), json.dumps(DEPLOYER)],
        cwd=ROOT,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    token, other_token, ids = json.loads(seeded.stdout.splitlines()[-1])
    console = cluster.serve(LONG_POLLS_PER_PROCESS=str(POLLS))
    return console, token, Api(console.url, other_token), [ids[n % REQUESTS] for n in range(POLLS)], cluster


def test_it_holds_a_thousand_long_polls_in_bounded_threads_and_memory(tmp_path, backend):
    raise_open_files()
    console, token, other, ids, cluster = served(tmp_path, backend)
    port = int(console.url.rsplit(":", 1)[1])
    try:
        # A warm-up storm: what the first thousand polls held at once leave loaded (and the allocator's growth)
        # is the baseline's.
        warm = asyncio.run(storm(port, token, ids, WAIT))
        assert [p.status for p in warm] == [200] * POLLS, {p.status for p in warm}
        time.sleep(2)
        threads_before, rss_before = status_of(console.pid, "Threads"), status_of(console.pid, "VmRSS")

        watch = Watch(console.pid, other)
        watch.start()
        try:
            polls = asyncio.run(storm(port, token, ids, WAIT, extra=ids[0]))
        finally:
            watch.stop()
        time.sleep(2)
        rss_after = status_of(console.pid, "VmRSS")
        after = asyncio.run(storm(port, token, ids[:1], 1))
    finally:
        cluster.stop_all()

    held, refused = polls[:POLLS], polls[POLLS]
    took = sorted(p.took for p in held)
    print(
        f"threads {threads_before} -> peak {watch.peak_threads}; other tenant p99 {watch.p99() * 1000:.0f} ms "
        f"(max {max(watch.latencies) * 1000:.0f} ms, {len(watch.latencies)} calls); waits of {WAIT} s took "
        f"{took[0]:.2f}-{took[-1]:.2f} s; RSS {rss_before / 1024:.1f} -> {rss_after / 1024:.1f} MB"
    )  # shown with -s
    assert watch.peak_threads - threads_before <= THREAD_BOUND, (threads_before, watch.peak_threads)
    assert not watch.failures, watch.failures[:3]
    assert watch.p99() < OTHER_P99, f"another tenant's p99 was {watch.p99() * 1000:.0f} ms"
    assert [p.status for p in held] == [200] * POLLS, {p.status for p in held}
    assert all(p.body["status"] == "pending" and p.body["decision"] is None for p in held)
    # Three seconds: the last of a thousand came back 1.5 s late while CI's other worker ran browser tests on the same
    # two CPUs.
    assert took[-1] <= WAIT + 3, f"a wait of {WAIT} s took {took[-1]:.2f} s"
    assert refused.status == 429 and refused.headers["content-type"] == "application/problem+json", refused.body
    assert refused.body["code"] == "too_many_long_polls" and int(refused.headers["retry-after"]) > 0
    assert after[0].status == 200  # the cap counts the polls held now, not those before
    assert rss_after <= rss_before * 1.10, f"RSS {rss_before / 1024:.1f} MB before, {rss_after / 1024:.1f} after"
