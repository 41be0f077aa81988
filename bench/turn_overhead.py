"""Control-plane overhead of one scripted turn: the console's run API against bare pydantic-ai.

Both sides run the same one-tool turn (`call get_time`, the tool runs, the model answers) with the
same scripted model in this process. The console side goes through the whole request path: the
Django handler with every middleware, token auth, the run checks, the database writes (run, events,
session) and JSON out. `--http` also measures it over loopback HTTP against a daphne process.

The sides alternate in ten blocks, so a machine whose load changes during the run weighs on each alike.

`--provider` adds the floor with a provider's latency (issue 32 item 4): a one-call turn (`hello`, the model
answers) against a loopback OpenAI-compatible server (tests/fakes/openai_server.py) answering after
PROVIDER_MS, on bare pydantic-ai (`Agent.run` with its OpenAI model) and on the console over loopback HTTP
(daphne, keep-alive, one request at a time), alternating in blocks.

Usage: .venv/bin/python bench/turn_overhead.py [--turns 300] [--http] [--provider] [--provider-turns 60]
Tracked, not targets since issue 56 restated the performance goals against the peer (bench/peer_langgraph.py):
the console turn's median against the bare turn's (2.5x, issue 17), over loopback HTTP (1.6x, issue 17), and with
the provider over HTTP (1.05x, issue 32). Each line still says where the old goal stands.
"""

import argparse
import asyncio
import atexit
import http.client
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_env, setup_django  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402

DATA = Path(tempfile.mkdtemp(prefix="airlock-bench-"))
atexit.register(shutil.rmtree, DATA, ignore_errors=True)
KEY_ENV = "BENCH_OPENAI_KEY"  # the loopback connection's key, read by the daphne process too
setup_django({**bench_env(DATA), KEY_ENV: "sk-bench"})

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

from agents.definitions import DefinitionContent  # noqa: E402
from agents.engine.scripted import scripted_model  # noqa: E402
from agents.models import Agent as AgentDefinition  # noqa: E402
from agents.server_tools import get_time  # noqa: E402
from console.models import ApiToken, Connection, Membership, Tenant  # noqa: E402

MESSAGE = "call get_time"
BLOCKS = 10
OVER_HTTP = 1.6  # issue 17 item 4: HTTP in to result out against the bare turn
# The floor with a provider's latency (issue 32 item 4): a turn that is one model call answered after PROVIDER_MS.
PROVIDER_MS = 100
PROVIDER_OVER_HTTP = 1.05
PROVIDER_BLOCKS = 6
INSTRUCTIONS = "You greet."
REPLY = "Hello."


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Bare:
    """The same turn on bare pydantic-ai, on an event loop kept between turns; each turn times itself."""

    def __init__(self) -> None:
        self.agent = Agent(scripted_model(), tools=[get_time], instructions="You tell the time.")
        self.runner = asyncio.Runner()

    async def _turn(self) -> float:
        start = time.perf_counter()
        result = await self.agent.run(MESSAGE)
        elapsed = time.perf_counter() - start
        assert result.output.startswith("get_time: ")
        return elapsed

    def turns(self, count: int) -> list[float]:
        return [self.runner.run(self._turn()) for _ in range(count)]


class BareProvider:
    """The one-call turn on bare pydantic-ai: its OpenAI model against the loopback provider."""

    def __init__(self, provider: FakeOpenAI) -> None:
        self.provider = provider
        model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=provider.base_url, api_key="sk-bench"))
        self.agent = Agent(model, instructions=INSTRUCTIONS)
        self.runner = asyncio.Runner()

    async def _turn(self) -> float:
        start = time.perf_counter()
        result = await self.agent.run("hello")
        elapsed = time.perf_counter() - start
        assert result.output == REPLY, result.output
        return elapsed

    def turns(self, count: int) -> list[float]:
        for _ in range(count):
            self.provider.reply_text(REPLY, delay=PROVIDER_MS / 1000)
        return [self.runner.run(self._turn()) for _ in range(count)]


def setup(provider_url: str | None = None) -> str:
    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug="bench", name="Bench")
    from django.contrib.auth.models import User

    user = User.objects.create_user("bench")
    membership = Membership.objects.create(user=user, tenant=tenant, role="operator")
    content = DefinitionContent.model_validate(
        {"name": "clock", "instructions": "You tell the time.", "tools": [{"name": "get_time"}]}
    )
    AgentDefinition.create(tenant, content, user)
    if provider_url:
        Connection.objects.create(
            name="loopback", kind="openai", all_tenants=True, base_url=provider_url, api_key_env=KEY_ENV
        )
        remote = {"name": "remote", "instructions": INSTRUCTIONS, "model": {"connection": "loopback", "name": "m"}}
        AgentDefinition.create(tenant, DefinitionContent.model_validate(remote), user)
    return ApiToken.issue(membership, "bench")[1]


class InProcess:
    """The console turn through Django's handler in this process (the test client: no sockets)."""

    def __init__(self, token: str, agent: str = "clock") -> None:
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
        self.body = json.dumps({"message": MESSAGE})
        self.path = f"/api/agents/{agent}/runs"

    def turns(self, count: int) -> list[float]:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            response = self.client.post(self.path, self.body, content_type="application/json")
            times.append(time.perf_counter() - start)
            assert response.status_code == 200 and response.json()["output"].startswith("get_time: "), response.content
        return times


class ProviderOverHttp:
    """The one-call turn on the console over loopback HTTP; the provider's replies planned per block."""

    def __init__(self, token: str, provider: FakeOpenAI, server: "Served") -> None:
        self.provider = provider
        self.http = OverHttp(token, server, agent="remote", message="hello", expect=REPLY)

    def turns(self, count: int) -> list[float]:
        for _ in range(count):
            self.provider.reply_text(REPLY, delay=PROVIDER_MS / 1000)
        return self.http.turns(count)

    def stop(self) -> None:
        self.http.stop()


class Served:
    """A daphne process serving the console (`bench.served_asgi`): started at once, waited for by `port()`. One
    serves both the scripted turns and the provider's (a second one only cost the run its 3-7 s start)."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.server = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "bench.served_asgi:application"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.ready = False

    def wait_ready(self) -> int:
        for _ in range(200 if not self.ready else 0):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1)
                self.ready = True
                break
            except OSError:
                time.sleep(0.1)
        return self.port

    def stop(self) -> None:
        self.server.terminate()
        self.server.wait(timeout=10)


class OverHttp:
    """The console turn over loopback HTTP: a daphne process and one keep-alive connection to it, as an API
    client would hold (a connection per turn would time the client's TCP handshake, not the console)."""

    def __init__(
        self, token: str, server: Served, agent: str = "clock", message: str = MESSAGE, expect: str = "get_time: "
    ) -> None:
        self.path, self.expect = f"/api/agents/{agent}/runs", expect
        self.connection = http.client.HTTPConnection("127.0.0.1", server.wait_ready(), timeout=30)
        self.body = json.dumps({"message": message}).encode()
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def turns(self, count: int) -> list[float]:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            self.connection.request("POST", self.path, self.body, self.headers)
            response = self.connection.getresponse()
            payload = json.loads(response.read())
            times.append(time.perf_counter() - start)
            assert response.status == 200 and payload["output"].startswith(self.expect), payload
        return times

    def stop(self) -> None:
        self.connection.close()


def report(label: str, times: list[float]) -> tuple[float, float]:
    median, p99 = statistics.median(times) * 1000, percentile(times, 99) * 1000
    print(f"| {label} | {len(times)} | {median:.2f} | {p99:.2f} |")
    return median, p99


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--provider", action="store_true", help="also the one-call turn against a loopback provider")
    parser.add_argument("--provider-turns", type=int, default=60, help="turns per side with the provider")
    args = parser.parse_args()
    # The daphne starts while this process makes the agents (its database is the migrated template's copy).
    server = Served() if args.http or args.provider else None
    try:
        with FakeOpenAI() as provider:
            token = setup(provider.base_url if args.provider else None)
            scripted(token, args.turns, server if args.http else None)
            if server is not None and args.provider:
                with_provider(token, provider, args.provider_turns, server)
    finally:
        if server is not None:
            server.stop()


def alternate(sides: dict[str, Any], turns: int, blocks: int) -> dict[str, list[float]]:
    """Warm each side up, then run them in `blocks` alternating blocks; each side's turn times."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for side in sides.values():
        side.turns(max(10, turns // blocks))  # imports, caches, first queries, the first connections
    # The sides take turns in blocks, so load that comes and goes weighs on all of them alike. (Not turn by
    # turn: a console turn between two bare turns leaves the caches cold for the bare one, slowing it by
    # a fifth or more on these machines, which would flatter the ratio.)
    for _ in range(blocks):
        for name, side in sides.items():
            times[name] += side.turns(turns // blocks)
    return times


def scripted(token: str, turns: int, server: Served | None) -> None:
    http = server is not None
    sides: dict[str, Any] = {"bare": Bare(), "console": InProcess(token)}
    if server is not None:
        sides["http"] = OverHttp(token, server)
    try:
        times = alternate(sides, turns, BLOCKS)
    finally:
        if http:
            sides["http"].stop()
    print("### Control-plane overhead per scripted turn (a)\n")
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, SQLite; "
        f"the one-tool turn `{MESSAGE}`, {BLOCKS} alternating blocks of each side\n"
    )
    print("| turn | n | median ms | p99 ms |\n|---|---|---|---|")
    bare_median, _ = report("bare pydantic-ai (agent.run)", times["bare"])
    console_median, _ = report("console run API, in process (Django handler, SQLite)", times["console"])
    if http:
        http_median, _ = report("console run API over loopback HTTP (daphne, keep-alive)", times["http"])
    ratio = console_median / bare_median
    verdict = "met" if ratio <= 2.5 else "missed"
    print(f"\nTracked (issue 17's goal 2.5x): console turn against the bare turn (median) — {ratio:.2f}x: {verdict}.")
    if http:
        over_http = http_median / bare_median
        print(
            f"Tracked (issue 17's goal {OVER_HTTP}x): console turn over loopback HTTP (daphne, one request at a time) "
            f"against the bare turn (median) — {over_http:.2f}x: {'met' if over_http <= OVER_HTTP else 'missed'}."
        )


def with_provider(token: str, provider: FakeOpenAI, turns: int, server: Served) -> None:
    sides: dict[str, Any] = {"bare": BareProvider(provider), "http": ProviderOverHttp(token, provider, server)}
    try:
        times = alternate(sides, turns, PROVIDER_BLOCKS)
    finally:
        sides["http"].stop()
    print("\n### The console turn against a provider's latency (issue 32): one model call answered after 100 ms\n")
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, SQLite; the turn `hello` "
        f"is one model call to a loopback OpenAI-compatible server (tests/fakes/openai_server.py) answering after "
        f"{PROVIDER_MS} ms; {PROVIDER_BLOCKS} alternating blocks of each side\n"
    )
    print("| turn | n | median ms | p99 ms |\n|---|---|---|---|")
    bare_median, _ = report("bare pydantic-ai (Agent.run, its OpenAI model)", times["bare"])
    http_median, _ = report("console run API over loopback HTTP (daphne, keep-alive)", times["http"])
    ratio = http_median / bare_median
    print(
        f"\nTracked (issue 32's goal {PROVIDER_OVER_HTTP}x): console turn over loopback HTTP with the provider "
        f"against the bare turn (medians) — {ratio:.3f}x (+{http_median - bare_median:.1f} ms): "
        f"{'met' if ratio <= PROVIDER_OVER_HTTP else 'missed'}."
    )


if __name__ == "__main__":
    main()
