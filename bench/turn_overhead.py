"""Control-plane overhead of one scripted turn: the console's run API against bare pydantic-ai.

Both sides run the same one-tool turn (`call get_time`, the tool runs, the model answers) with the
same scripted model in this process. The console side goes through the whole request path: the
Django handler with every middleware, token auth, the run checks, the database writes (run, events,
session) and JSON out. `--http` also measures it over loopback HTTP against a daphne process.

The two sides alternate in ten blocks, so a machine whose load changes during the run weighs on both alike.

Usage: .venv/bin/python bench/turn_overhead.py [--turns 300] [--http]
Target: the console turn's median at most 2.5x the bare turn's.
"""

import argparse
import asyncio
import atexit
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
from agents.models import Agent as AgentDefinition  # noqa: E402
from agents.scripted import scripted_model  # noqa: E402
from agents.tools import get_time  # noqa: E402
from console.models import ApiToken, Membership, Tenant  # noqa: E402

MESSAGE = "call get_time"
BLOCKS = 10


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def bare(turns: int) -> list[float]:
    agent = Agent(scripted_model(), tools=[get_time], instructions="You tell the time.")

    async def go() -> list[float]:
        times = []
        for _ in range(turns):
            start = time.perf_counter()
            result = await agent.run(MESSAGE)
            times.append(time.perf_counter() - start)
            assert result.output.startswith("get_time: ")
        return times

    return asyncio.run(go())


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


def console(turns: int, token: str) -> list[float]:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = json.dumps({"message": MESSAGE})
    times = []
    for _ in range(turns):
        start = time.perf_counter()
        response = client.post("/api/agents/clock/runs", body, content_type="application/json")
        times.append(time.perf_counter() - start)
        assert response.status_code == 200 and response.json()["output"].startswith("get_time: "), response.content
    return times


def over_http(turns: int, token: str) -> list[float]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        request = urllib.request.Request(
            url + "/api/agents/clock/runs",
            data=json.dumps({"message": MESSAGE}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        times = []
        for _ in range(turns):
            start = time.perf_counter()
            with urllib.request.urlopen(request, timeout=30) as response:
                payload = json.load(response)
            times.append(time.perf_counter() - start)
            assert payload["output"].startswith("get_time: ")
        return times
    finally:
        server.terminate()
        server.wait(timeout=10)


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
    warm = max(20, args.turns // 10)
    bare(warm), console(warm, token)  # imports, caches, first queries
    bare_times: list[float] = []
    console_times: list[float] = []
    for _ in range(BLOCKS):
        bare_times += bare(args.turns // BLOCKS)
        console_times += console(args.turns // BLOCKS, token)
    print("### Control-plane overhead per scripted turn (a)\n")
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, SQLite; "
        f"the one-tool turn `{MESSAGE}`, {BLOCKS} alternating blocks of each side\n"
    )
    print("| turn | n | median ms | p99 ms |\n|---|---|---|---|")
    bare_median, _ = report("bare pydantic-ai (agent.run)", bare_times)
    console_median, _ = report("console run API, in process (Django handler, SQLite)", console_times)
    if args.http:
        http_median, _ = report("console run API over loopback HTTP (daphne)", over_http(args.turns, token))
    ratio = console_median / bare_median
    verdict = "met" if ratio <= 2.5 else "missed"
    print(f"\nTarget: console turn at most 2.5x the bare turn (median) — {ratio:.2f}x: {verdict}.")
    if args.http:
        print(f"Over loopback HTTP (daphne, one request at a time): {http_median / bare_median:.2f}x the bare turn.")


if __name__ == "__main__":
    main()
