"""Idle session streams: the CPU 100 of them cost a served console, and another tenant's `GET /api/agents` with 400.

One daphne (temporary SQLite, in-memory layer). Four tenants each hold a session with one finished turn; an
operator of each opens streams on it (`GET /api/sessions/{id}/events`, SSE), which then have nothing to say.
A fifth tenant's operator lists its agents over one keep-alive connection. The console's CPU is its process's
user + system time (/proc/PID/stat) over a quiet window, in cores; the streams' clients read nothing in it. The
window is as long as an idle stream's safety-net recheck (agents.api.stream_routes.SESSION_RECHECK_SECONDS), so each
stream looks at the database about once in it.
Four owners of 100 streams each, since one user may hold only 100 (`SESSION_STREAMS_PER_USER`).

Usage: .venv/bin/python bench/idle_streams.py [--window 10] [--requests 30]
"""

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Daphne,
    HttpConnection,
    bench_env,
    daphnes_starting,
    database_label,
    median,
    percentile,
    post_json,
    python_line,
    raise_nofile,
    scratch_dir,
    seed_operator,
    setup_django,
)

OWNERS = 4
PER_OWNER = 100
SETTLE_SECONDS = 3.0
STARTED = time.monotonic()


def note(step: str) -> None:
    print(f"  [{time.monotonic() - STARTED:.0f} s] {step}", file=sys.stderr)


# The latency side stops at whichever comes first: a console that takes seconds an answer must not take minutes.
LATENCY_BUDGET_SECONDS = 10.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def cores(pid: int, window: float) -> float:
    before, started = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(window)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started)


async def follow(port: int, key: str, token: str) -> tuple[asyncio.StreamWriter, asyncio.Task[None]]:
    """One stream, open once its headers came; its reader drains whatever comes (the first turn, then nothing)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET /api/sessions/{key}/events HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream"]
    writer.write(("\r\n".join([*lines, f"Authorization: Bearer {token}"]) + "\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"stream refused: {head.split(b'\r\n', 1)[0].decode()}")

    async def drain() -> None:
        while await reader.read(65536):
            pass

    return writer, asyncio.create_task(drain())


async def latencies(port: int, token: str, requests: int) -> list[float]:
    connection = HttpConnection(port)
    headers = {"Authorization": f"Bearer {token}"}
    await connection.request("GET", "/api/agents", headers=headers)  # the connection and the token's first use
    taken: list[float] = []
    deadline = time.monotonic() + LATENCY_BUDGET_SECONDS
    while len(taken) < requests and time.monotonic() < deadline:
        started = time.perf_counter()
        status, body = await connection.request("GET", "/api/agents", headers=headers)
        taken.append(time.perf_counter() - started)
        assert status == 200 and json.loads(body), body[:200]
    await connection.close()
    return taken


async def measure(server: Daphne, owners: list[dict[str, str]], other: str, window: float, requests: int) -> dict:
    figures: dict = {
        "idle": await cores(server.pid, 2.0),
        "alone": await latencies(server.port, other, requests),
    }
    note("no stream measured")
    streams = []
    try:
        for count, owner in enumerate(owners):
            streams += await asyncio.gather(
                *(follow(server.port, owner["key"], owner["token"]) for _ in range(PER_OWNER))
            )
            if count == 0:
                await asyncio.sleep(SETTLE_SECONDS)
                figures["cpu_100"] = await cores(server.pid, window)
                note("100 measured")
        await asyncio.sleep(SETTLE_SECONDS)
        note("400 open")
        figures["cpu_400"] = await cores(server.pid, window)
        figures["beside_400"] = await latencies(server.port, other, requests)
        figures["ended"] = sum(1 for _, task in streams if task.done())
    finally:
        for writer, task in streams:
            writer.close()
            task.cancel()
        await asyncio.gather(*(task for _, task in streams), return_exceptions=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--window", type=float, default=10.0, help="seconds of CPU measured with 100 and 400 streams")
    parser.add_argument("--requests", type=int, default=30, help="GET /api/agents per side (or 10 s)")
    args = parser.parse_args()
    raise_nofile()
    started = time.perf_counter()
    with scratch_dir("airlock-idle-streams-") as data:
        env = bench_env(data)
        # The console starts while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(env, 1) as ready:
            setup_django(env)
            from django.core.management import call_command
            from django.db import connections

            call_command("migrate", verbosity=0)
            note("migrated")
            agent = {"streamer": {"name": "streamer"}}
            owners = [{"token": seed_operator(f"owner{i}", agent)["token"], "key": f"idle-{i}"} for i in range(OWNERS)]
            other = seed_operator("other", agent)["token"]
            database = database_label()
            connections.close_all()
            note("seeded")
            [server] = ready()
            note("started")
            for owner in owners:
                post_json(
                    server.base,
                    "/api/agents/streamer/runs",
                    {"message": "hi", "sessionId": owner["key"]},
                    owner["token"],
                )
            note("served")
            figures = asyncio.run(measure(server, owners, other, args.window, args.requests))

    alone, beside = figures["alone"], figures["beside_400"]
    print("### Idle session streams: the console's CPU, and another tenant's API beside them\n")
    print(f"`idle_streams.py --window {args.window:g} --requests {args.requests}`: one daphne, in-memory layer,")
    print(f"{database}; {python_line()}. Streams of sessions whose only turn has ended; CPU of the daphne process")
    print("(user + system) in cores; `GET /api/agents` of another tenant over one keep-alive connection.\n")
    print("| measure | value |\n|---|---|")
    print(f"| console CPU, no stream | {figures['idle']:.3f} cores |")
    print(f"| console CPU, 100 idle streams | {figures['cpu_100']:.3f} cores |")
    print(f"| console CPU, 400 idle streams | {figures['cpu_400']:.3f} cores |")
    for name, side in (("no stream", alone), ("400 idle streams", beside)):
        p50, p99 = median(side) * 1000, percentile(side, 99) * 1000
        print(
            f"| `GET /api/agents` of another tenant, {name} | p50 {p50:.1f} ms, p99 {p99:.1f} ms"
            f" ({len(side)} requests) |"
        )
    if figures["ended"]:
        print(f"\n{figures['ended']} streams ended before the measurement was over.")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
