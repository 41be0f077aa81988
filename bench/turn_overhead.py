"""Control-plane overhead of one scripted turn: the console's run API against bare pydantic-ai.

Both sides run the same one-tool turn (`call get_time`, the tool runs, the model answers) with the
same scripted model in this process. The console side goes through the whole request path: the
Django handler with every middleware, token auth, the run checks, the database writes (run, events,
session) and JSON out. `--http` also measures it over loopback HTTP against a daphne process.

The sides alternate in ten blocks, so a machine whose load changes during the run weighs on each alike.

Usage: .venv/bin/python bench/turn_overhead.py [--turns 300] [--http]
Targets: the console turn's median at most 2.5x the bare turn's; over loopback HTTP at most 1.6x (issue 17).
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

DATA = Path(tempfile.mkdtemp(prefix="airlock-bench-"))
atexit.register(shutil.rmtree, DATA, ignore_errors=True)
setup_django(bench_env(DATA))

from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from pydantic_ai import Agent  # noqa: E402

from agents.definitions import DefinitionContent  # noqa: E402
from agents.engine.scripted import scripted_model  # noqa: E402
from agents.models import Agent as AgentDefinition  # noqa: E402
from agents.tools import get_time  # noqa: E402
from console.models import ApiToken, Membership, Tenant  # noqa: E402

MESSAGE = "call get_time"
BLOCKS = 10
OVER_HTTP = 1.6  # issue 17 item 4: HTTP in to result out against the bare turn


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


def setup() -> str:
    call_command("migrate", verbosity=0)
    tenant = Tenant.objects.create(slug="bench", name="Bench")
    from django.contrib.auth.models import User

    user = User.objects.create_user("bench")
    membership = Membership.objects.create(user=user, tenant=tenant, role="operator")
    content = DefinitionContent.model_validate(
        {"name": "clock", "instructions": "You tell the time.", "tools": [{"name": "get_time"}]}
    )
    AgentDefinition.create(tenant, content, user)
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


class OverHttp:
    """The console turn over loopback HTTP: a daphne process and one keep-alive connection to it, as an API
    client would hold (a connection per turn would time the client's TCP handshake, not the console)."""

    def __init__(self, token: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.server = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "bench.served_asgi:application"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.body = json.dumps({"message": MESSAGE}).encode()
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def turns(self, count: int) -> list[float]:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            self.connection.request("POST", "/api/agents/clock/runs", self.body, self.headers)
            response = self.connection.getresponse()
            payload = json.loads(response.read())
            times.append(time.perf_counter() - start)
            assert response.status == 200 and payload["output"].startswith("get_time: "), payload
        return times

    def stop(self) -> None:
        self.connection.close()
        self.server.terminate()
        self.server.wait(timeout=10)


def report(label: str, times: list[float]) -> tuple[float, float]:
    median, p99 = statistics.median(times) * 1000, percentile(times, 99) * 1000
    print(f"| {label} | {len(times)} | {median:.2f} | {p99:.2f} |")
    return median, p99


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--http", action="store_true")
    args = parser.parse_args()
    token = setup()
    sides: dict[str, Any] = {"bare": Bare(), "console": InProcess(token)}
    if args.http:
        sides["http"] = OverHttp(token)
    times: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for side in sides.values():
            side.turns(max(20, args.turns // 10))  # imports, caches, first queries
        # The sides take turns in blocks, so load that comes and goes weighs on all of them alike. (Not turn by
        # turn: a console turn between two bare turns leaves the caches cold for the bare one, slowing it by
        # a fifth or more on these machines, which would flatter the ratio.)
        for _ in range(BLOCKS):
            for name, side in sides.items():
                times[name] += side.turns(args.turns // BLOCKS)
    finally:
        if args.http:
            sides["http"].stop()
    print("### Control-plane overhead per scripted turn (a)\n")
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, SQLite; "
        f"the one-tool turn `{MESSAGE}`, {BLOCKS} alternating blocks of each side\n"
    )
    print("| turn | n | median ms | p99 ms |\n|---|---|---|---|")
    bare_median, _ = report("bare pydantic-ai (agent.run)", times["bare"])
    console_median, _ = report("console run API, in process (Django handler, SQLite)", times["console"])
    if args.http:
        http_median, _ = report("console run API over loopback HTTP (daphne, keep-alive)", times["http"])
    ratio = console_median / bare_median
    verdict = "met" if ratio <= 2.5 else "missed"
    print(f"\nTarget: console turn at most 2.5x the bare turn (median) — {ratio:.2f}x: {verdict}.")
    if args.http:
        over_http = http_median / bare_median
        print(
            f"Target (issue 17): console turn over loopback HTTP (daphne, one request at a time) at most {OVER_HTTP}x "
            f"the bare turn (median) — {over_http:.2f}x: {'met' if over_http <= OVER_HTTP else 'missed'}."
        )


if __name__ == "__main__":
    main()
