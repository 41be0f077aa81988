"""(f) Memory per idle console websocket: the daphne process's RSS before and after N more idle connections.

One daphne process serves the console (a temporary SQLite database; the in-memory channel layer, then the
Redis layer). WARM authenticated operator sockets are opened first and kept (imports, caches and pools that
the first connections fill are not a per-connection cost); then the server's RSS (VmRSS of
/proc/PID/status) is read, N more sockets connect to /ws/console/ (each one authenticated, joined to its
tenant's group and given its heartbeat) and stay idle for a few seconds, and the RSS is read again.
Per connection: the difference divided by N.

Target: under 100 KB per idle connection.

Usage: .venv/bin/python bench/ws_memory.py [--connections 1000] [--layers memory,redis]
"""

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    REDIS_SERVER,
    Daphne,
    RawWebSocket,
    bench_env,
    daphnes,
    daphnes_starting,
    database_label,
    flush_redis,
    open_websocket,
    python_line,
    raise_nofile,
    rss_kb,
    scratch_dir,
    seed_operator,
    setup_django,
    verdict,
)

# See push_latency.py: redis-py 8's 5 s read timeout would close idle consumers without it.
REDIS_DB = f"{REDIS_SERVER}/8?socket_timeout=15"
WARM = 50
WAVE = 40
SETTLE_SECONDS = 3.0


class Heartbeats:
    def __init__(self) -> None:
        self.count = 0

    def got(self, payload: bytes, arrived: float) -> None:
        if payload.startswith(b'{"type": "heartbeat"'):
            self.count += 1


async def open_idle(server: Daphne, session: str, count: int, beats: Heartbeats) -> list[RawWebSocket]:
    """`count` sockets, in waves, each one through its heartbeat (authenticated, joined, counted)."""
    headers = {"Cookie": f"sessionid={session}", "Origin": server.base}
    sockets: list[RawWebSocket] = []
    target = beats.count + count
    for first in range(0, count, WAVE):
        wave = min(WAVE, count - first)
        opened = await asyncio.gather(
            *(open_websocket(server.port, "/ws/console/", headers, beats.got) for _ in range(wave)),
            return_exceptions=True,
        )
        sockets += [ws for ws in opened if isinstance(ws, RawWebSocket)]
        failed = [error for error in opened if isinstance(error, BaseException)]
        if failed:
            raise RuntimeError(f"{len(failed)} sockets did not connect: {failed[0]!r}")
    deadline = time.monotonic() + 60
    while beats.count < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {beats.count - target + count} of {count} sockets got their heartbeat")
        await asyncio.sleep(0.05)
    return sockets


async def measure(server: Daphne, session: str, count: int) -> dict[str, float]:
    beats = Heartbeats()
    sockets: list[RawWebSocket] = []
    try:
        sockets += await open_idle(server, session, WARM, beats)
        await asyncio.sleep(SETTLE_SECONDS)
        before = rss_kb(server.pid)
        sockets += await open_idle(server, session, count, beats)
        await asyncio.sleep(SETTLE_SECONDS)
        after = rss_kb(server.pid)
        closed = sum(1 for ws in sockets if ws.closed.done())
        if closed:
            raise RuntimeError(f"{closed} idle sockets were closed by the server")
    finally:
        for ws in sockets:
            ws.close()
        await asyncio.sleep(0.5)
    return {"before": before, "after": after, "per": (after - before) / count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--layers", default="memory,redis", help="memory and/or redis")
    args = parser.parse_args()
    raise_nofile()
    started = time.perf_counter()
    results: dict[str, dict[str, float]] = {}
    with scratch_dir("airlock-ws-memory-") as data:
        first, *others = args.layers.split(",")
        if first == "redis":
            flush_redis(REDIS_DB)
        # The first layer's console starts while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(bench_env(data, redis_url=REDIS_DB if first == "redis" else None), 1) as ready:
            setup_django(bench_env(data))
            from django.core.management import call_command
            from django.db import connections

            call_command("migrate", verbosity=0)
            session = seed_operator("bench")["session"]
            database = database_label()
            connections.close_all()
            results[first] = asyncio.run(measure(ready()[0], session, args.connections))
        for layer in others:
            redis = REDIS_DB if layer == "redis" else None
            if redis:
                flush_redis(redis)
            with daphnes(bench_env(data, redis_url=redis), 1) as servers:
                results[layer] = asyncio.run(measure(servers[0], session, args.connections))

    print("### Memory per idle console websocket (f)\n")
    print(
        f"`ws_memory.py --connections {args.connections}`: one daphne process, {database}; {WARM} sockets opened "
        f"first and kept, then the RSS (VmRSS) before and {SETTLE_SECONDS:.0f} s after {args.connections} more "
        f"authenticated idle sockets on /ws/console/; {python_line()}; {time.perf_counter() - started:.0f} s.\n"
    )
    print("| channel layer | RSS before MB | RSS after MB | per connection KB |\n|---|---|---|---|")
    names = {"memory": "in-memory", "redis": "Redis (channels_redis)"}
    for layer, r in results.items():
        print(f"| {names[layer]} | {r['before'] / 1024:.1f} | {r['after'] / 1024:.1f} | {r['per']:.1f} |")
    print()
    worst = max(r["per"] for r in results.values())
    print(f"Target: under 100 KB per idle connection — {verdict(worst < 100)} (at most {worst:.1f} KB)")


if __name__ == "__main__":
    main()
