"""The decision log streamed (SPEC section 18): how fast `decisionlog.shipping` ships a backlog of receipts to a
loopback OTLP/HTTP logs receiver and to a loopback syslog server, and what a pass costs when nothing is behind.

A scratch installation (SQLite by default, `--database postgres` for `airlock_bench_decisionlog`) gets one tenant
with `--receipts` receipts (written by `approvals.receipts.record`, the chain's own writer, in chunks) and two
sinks granted to it. Catch-up: passes (`decisionlog.shipping.ship`, batches of 100, ten a pair a pass) back to back
until each sink's cursor is at the chain's end, as `manage.py serve` runs them after an outage; the receivers decode
every record (the OTLP one with opentelemetry-proto, the syslog one splitting octet-counted frames) in this process,
so their CPU counts against the rate. Idle: `--tenants` more tenants, every sink caught up, then passes timed one
by one (what each `serve` process spends every DECISION_LOG_SECONDS).

Targets: a backlog ships at 2,000 receipts a second or more to each kind of sink (ten times the busiest tenant's
decisions we know of, so an outage's backlog drains while decisions go on); an idle pass under 10 ms at p50 (each
`serve` runs one a second: at most 1% of a core).

Found by it: on PostgreSQL a batch costs about a commit (the cursor's move, its WAL flush), so the rate there is
bounded by the flush and grows with the batch; 100 keeps a repeat after a crash small.

Usage: .venv/bin/python bench/decision_log.py [--receipts 20000] [--tenants 50] [--database sqlite|postgres]
"""

import argparse
import socketserver
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    bench_env,
    database_label,
    median,
    percentile,
    pg_database,
    python_line,
    scratch_dir,
    setup_django,
    verdict,
)

TARGET_RATE = 2_000
TARGET_IDLE_MS = 10.0


class Counted:
    def __init__(self) -> None:
        self.records = 0
        self.lock = threading.Lock()

    def add(self, count: int) -> None:
        with self.lock:
            self.records += count


def otlp_receiver(counted: Counted) -> ThreadingHTTPServer:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            request = ExportLogsServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
            counted.add(sum(len(s.log_records) for r in request.resource_logs for s in r.scope_logs))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def syslog_receiver(counted: Counted) -> socketserver.ThreadingTCPServer:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            data = b"".join(iter(lambda: self.request.recv(65536), b""))
            frames, at = 0, 0
            while at < len(data):
                space = data.index(b" ", at)
                at = space + 1 + int(data[at:space])
                frames += 1
            counted.add(frames)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def write_chain(tenant: Any, count: int) -> None:
    from django.utils import timezone

    from approvals.receipts import digest, record

    now = timezone.now()
    for start in range(0, count, 1000):
        record(
            tenant.pk,
            [
                {
                    "requestId": str(uuid.uuid4()),
                    "runId": str(uuid.uuid4()),
                    "sessionId": f"session-{n // 20}",
                    "agent": "mailer",
                    "definitionVersion": 3,
                    "kind": "approval",
                    "toolName": "send_email",
                    "argumentsDigest": digest({"n": n}),
                    "originalArgumentsDigest": None,
                    "result": "approved",
                    "reason": None,
                    "decisionSource": "human",
                    "answeredBy": "otto",
                    "authMethod": "session",
                    "at": now.isoformat(),
                }
                for n in range(start, min(count, start + 1000))
            ],
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--receipts", type=int, default=20_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    started = time.perf_counter()
    with scratch_dir("airlock-bench-decisionlog-") as data:
        url = pg_database("airlock_bench_decisionlog", fresh=True) if args.database == "postgres" else None
        setup_django({**bench_env(data, database_url=url), "DECISION_LOG_SECONDS": "0"})
        from console.models import Connection, Tenant
        from decisionlog.models import SinkCursor
        from decisionlog.shipping import ship

        otlp_count, syslog_count = Counted(), Counted()
        otlp, syslog = otlp_receiver(otlp_count), syslog_receiver(syslog_count)
        tenant = Tenant.objects.create(slug="bench-log", name="Bench")
        write_chain(tenant, args.receipts)
        rows = []
        for kind, settings, counted in (
            ("otlp", {"url": f"http://127.0.0.1:{otlp.server_address[1]}"}, otlp_count),
            ("syslog", {"address": f"127.0.0.1:{syslog.server_address[1]}"}, syslog_count),
        ):
            sink = Connection.objects.create(name=f"bench-{kind}", kind=kind, **settings)
            sink.tenants.set([tenant])
            began = time.perf_counter()
            passes = 0
            while SinkCursor.objects.filter(connection=sink, sequence=args.receipts).count() == 0:
                ship()
                passes += 1
            seconds = time.perf_counter() - began
            while counted.records < args.receipts and time.perf_counter() - began < seconds + 5:
                time.sleep(0.01)
            rows.append((kind, seconds, passes, counted.records))
            print(f"[decision_log] {kind}: {seconds:.2f} s", file=sys.stderr, flush=True)

        for index in range(args.tenants):
            other = Tenant.objects.create(slug=f"idle-{index}", name=f"Idle {index}")
            write_chain(other, 3)
        Connection.objects.filter(name__startswith="bench-").update(all_tenants=True)
        while ship().shipped:
            pass
        idle = []
        for _ in range(args.passes):
            began = time.perf_counter()
            assert ship().shipped == 0
            idle.append((time.perf_counter() - began) * 1000)
        database = database_label()

    print("### The decision log streamed (SPEC 18): a backlog shipped, and an idle pass\n")
    print(
        f"`decision_log.py --receipts {args.receipts} --tenants {args.tenants} --database {args.database}`: {database};"
        f" one tenant's chain of {args.receipts:,} receipts to a loopback sink of each kind (passes back to back,"
        f" batches of 100, the receiver decoding in this process); then {args.tenants + 1} tenants caught up on two"
        f" sinks and {args.passes} idle passes; {python_line()}\n"
    )
    print("| sink | seconds | receipts/s | passes | records received |")
    print("|---|---|---|---|---|")
    for kind, seconds, passes, received in rows:
        print(f"| {kind} | {seconds:.2f} | {args.receipts / seconds:,.0f} | {passes} | {received:,} |")
    print(f"\nIdle pass: p50 {median(idle):.2f} ms, p99 {percentile(idle, 99):.2f} ms\n")
    slowest = min(args.receipts / seconds for _, seconds, _, _ in rows)
    complete = all(received == args.receipts for *_, received in rows)
    print(
        f"Target: a backlog ships at {TARGET_RATE:,} receipts/s or more to each sink, every receipt received —"
        f" slowest {slowest:,.0f}/s: {verdict(slowest >= TARGET_RATE and complete)}"
    )
    print(
        f"\nTarget: an idle pass under {TARGET_IDLE_MS:.0f} ms at p50 — {median(idle):.2f} ms: "
        f"{verdict(median(idle) < TARGET_IDLE_MS)}"
    )
    print(f"\nWall time: {time.perf_counter() - started:.0f} s (`bench/decision_log.py`).")


if __name__ == "__main__":
    main()
