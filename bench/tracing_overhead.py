"""What tracing costs a turn (SPEC section 18, issue 55): the one-tool scripted turn (`call get_time`) through the run
API over loopback HTTP, on two daphne processes serving `console.asgi` on one SQLite file: one with no `OTEL_*`
variable (tracing unset), one exporting its spans over OTLP/HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`, batched as in
production) to a loopback receiver in this process, which answers each export as a collector does. The sides
alternate in blocks; each turn's time is from the request sent to the result read, on one keep-alive connection.

Target: the traced turn's median at most 1.05x the untraced one's. Unset, tracing adds only the checks that find it
off (a module global read in each hook a turn passes); they are timed here one by one, and their sum per turn is
given as a share of the untraced turn.

    .venv/bin/python bench/tracing_overhead.py --turns 200
"""

import argparse
import asyncio
import json
import os
import platform
import sys
import threading
import timeit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    Daphne,
    HttpConnection,
    bench_env,
    daphnes_starting,
    median,
    percentile,
    scratch_dir,
    seed_operator,
    setup_django,
    verdict,
)

MESSAGE = "call get_time"
TIMER: dict[str, Any] = {"name": "timer", "tools": [{"name": "get_time", "approval": "never"}]}
TARGET = 1.05
BLOCKS = 10


class Collector(ThreadingHTTPServer):
    """A loopback OTLP/HTTP receiver: keeps each export's body and answers 200 with an empty response, as a
    collector does (decoding is the collector's work, done here only at the end, to count the spans)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        super().__init__(("127.0.0.1", 0), _Receive)

    def span_count(self) -> int:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        count = 0
        for body in self.bodies:
            export = ExportTraceServiceRequest.FromString(body)
            count += sum(len(scope.spans) for spans in export.resource_spans for scope in spans.scope_spans)
        return count


class _Receive(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        self.server.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Side:
    """One console process and a keep-alive connection to it."""

    def __init__(self, server: Daphne, token: str) -> None:
        self.server = server
        self.server.wait_ready()
        self.connection = HttpConnection(self.server.port)
        self.body = json.dumps({"message": MESSAGE}).encode()
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.loop = asyncio.new_event_loop()

    def turns(self, count: int) -> list[float]:
        return self.loop.run_until_complete(self._turns(count))

    async def _turns(self, count: int) -> list[float]:
        times = []
        for _ in range(count):
            started = self.loop.time()
            status, body = await self.connection.request("POST", "/api/agents/timer/runs", self.body, self.headers)
            times.append(self.loop.time() - started)
            assert status == 200 and json.loads(body)["status"] == "completed", (status, body[:300])
        return times

    def stop(self) -> None:
        self.loop.run_until_complete(self.connection.close())
        self.loop.close()
        self.server.stop()


def unset_checks() -> list[tuple[str, float, int]]:
    """What tracing costs a turn while unset: each check a turn passes, its time (ns) and how often a turn passes it."""
    from agents.engine import spans
    from console import telemetry

    scope = {"type": "http", "headers": [(b"traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]}

    def caller_trace() -> None:
        with telemetry.CallerTrace(scope):
            pass

    checks = [
        ("the request's traceparent (`CallerTrace`, in the ASGI handler)", caller_trace, 1),
        ("the run's (`caller_traceparent`, in `new_run`)", telemetry.caller_traceparent, 1),
        ("the run's span (`tracing`, in `execute`)", telemetry.tracing, 1),
        ("the engine's agent (`tracing_key`, `call_spans`, in `agent_for`)", spans.tracing_key, 2),
    ]
    timed = []
    for label, check, per_turn in checks:
        number = 200_000
        seconds = min(timeit.repeat(check, number=number, repeat=5))
        timed.append((label, seconds / number * 1e9, per_turn))
    return timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200, help="turns per side")
    args = parser.parse_args()
    collector = Collector()
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    with scratch_dir("airlock-bench-tracing-") as folder:
        env = bench_env(folder)
        for name in [name for name in env if name.startswith("OTEL_")]:
            del env[name]
        traced_env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}"}
        # Both consoles start together while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(env) as unset_ready, daphnes_starting(traced_env) as traced_ready:
            setup_django(env)
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            token = seed_operator("tracing", {"timer": TIMER})["token"]
            sides = {"unset": Side(unset_ready()[0], token), "traced": Side(traced_ready()[0], token)}
            try:
                for side in sides.values():
                    side.turns(max(10, args.turns // BLOCKS))  # imports, caches, the first connections
                exported_before = len(collector.bodies)
                times: dict[str, list[float]] = {name: [] for name in sides}
                for _ in range(BLOCKS):
                    for name, side in sides.items():
                        times[name] += side.turns(args.turns // BLOCKS)
            finally:
                for side in sides.values():
                    side.stop()  # the traced console flushes its last batch as it stops
        checks = unset_checks()
    spans = collector.span_count()
    collector.shutdown()

    unset, traced = median(times["unset"]), median(times["traced"])
    print("### Tracing overhead per turn (issue 55)\n")
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, SQLite; the one-tool turn "
        f"`{MESSAGE}` through the run API over loopback HTTP (daphne, keep-alive), {BLOCKS} alternating blocks of "
        f"each side; traced: OTLP/HTTP to a loopback receiver, BatchSpanProcessor defaults\n"
    )
    print("| turn | n | median ms | p99 ms |\n|---|---|---|---|")
    for label, name in (("tracing unset", "unset"), ("traced, exported over OTLP/HTTP", "traced")):
        values = times[name]
        print(f"| {label} | {len(values)} | {median(values) * 1000:.2f} | {percentile(values, 99) * 1000:.2f} |")
    turns = sum(len(values) for values in times.values()) // 2 + max(10, args.turns // BLOCKS)
    print(
        f"\nExported: {spans} spans in {len(collector.bodies)} exports ({exported_before} before the measured "
        f"blocks), {spans / turns:.1f} a traced turn (`invoke_agent`, `chat` twice, `execute_tool`)."
    )
    ratio = traced / unset
    print(
        f"\nTarget: traced turn at most {TARGET}x the untraced turn (median) — {ratio:.3f}x: "
        f"{verdict(ratio <= TARGET)}."
    )
    print("\nUnset, the checks a turn passes (each timed alone, 200,000 calls, best of 5):\n")
    print("| check | ns a call | calls a turn |\n|---|---|---|")
    total = 0.0
    for label, nanoseconds, per_turn in checks:
        total += nanoseconds * per_turn
        print(f"| {label} | {nanoseconds:.0f} | {per_turn} |")
    share = total / (unset * 1e9)
    print(
        f"\nTarget: nothing measurable with tracing unset — {total / 1000:.2f} µs a turn, {share:.5%} of the untraced "
        f"turn: {verdict(share < 0.001)}."
    )


if __name__ == "__main__":
    main()
