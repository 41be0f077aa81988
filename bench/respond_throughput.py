"""(c) Answer throughput and races: many pending approvals answered at once over HTTP, each one twice.

On PostgreSQL (a scratch database `airlock_bench_respond`), runs of the scripted model that call
`send_email` PER_RUN times in parallel end `awaiting_approval` with PER_RUN pending requests each (seeded
through the real run API, in process). A daphne process serves the console; CLIENTS client pairs answer
the requests over loopback HTTP keep-alive connections with `POST /api/runs/{runId}/responses`: both
clients of a pair send the same request's answer at the same moment (two operators of the tenant), so
every request is raced. Requests are taken run by run, so the pairs also race on the last answers of a
run, the one that starts the continuation run (today inside the answering request).

Reported: distinct requests resolved per second (wall time from the first answer sent to the last
reply), HTTP answers per second, latency of one answer (p50/p99; apart, the answers that started a
continuation), and the races: a request `accepted` twice, a request nobody got `accepted` for, a run
continued twice; the database is checked as well (each request answered once, one continuation per run).

The daphne process takes its PostgreSQL connections from the console's pool (console/settings.py).

Target: at least 500 answers/s and 0 double resolutions. Issue 17 (item 1) adds two, against the same
server's floor: requests resolved per second at least 0.3x its `GET /healthz` rate, and the answers' p50
under load at most 20x the `/healthz` p50 under the same number of connections.

With `--daphnes N` (N > 1) N console processes share the Redis channel layer and the client pairs spread over
them; `--json` prints only the figures bench/scale.py draws (without the `/healthz` floor, which it does not draw).

Usage: .venv/bin/python bench/respond_throughput.py [--requests 1000] [--per-run 10] [--clients 8]
       [--respond-async] [--daphnes 1] [--json]
"""

import argparse
import asyncio
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    MAILER,
    REDIS_SERVER,
    HttpConnection,
    bench_env,
    daphnes_starting,
    database_label,
    flush_redis,
    median,
    percentile,
    pg_database,
    python_line,
    scratch_dir,
    seed_operator,
    send_email_lines,
    setup_django,
    verdict,
)

DATABASE = "airlock_bench_respond"
HEALTHZ_SHARE = 0.3  # resolved requests per second against /healthz per second (issue 17 item 1)
P50_OVER_HEALTHZ = 20  # answer p50 under load against /healthz p50 under load
REDIS_DB = f"{REDIS_SERVER}/8?socket_timeout=15"  # several daphnes share pushes through it


@dataclass
class Tally:
    accepted: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    continuing: list[float] = field(default_factory=list)
    continuations: dict[str, int] = field(default_factory=dict)


def seed(runs: int, per_run: int) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The operator tokens and the (run id, request id) of every pending request, run by run."""
    from django.contrib.auth.models import User
    from django.test import Client

    from approvals.models import PendingRequest
    from console.models import ApiToken, Membership

    persona = seed_operator("bench", {"mailer": MAILER})
    second = User.objects.create_user("bench-operator-2")
    membership = Membership.objects.create(user=second, tenant=persona["tenant"], role="operator")
    tokens = {"first": persona["token"], "second": ApiToken.issue(membership, "bench")[1]}
    client = Client()
    message = send_email_lines(per_run)
    for n in range(runs):
        response = client.post(
            "/api/agents/mailer/runs",
            data=json.dumps({"message": message, "sessionId": f"respond-{n}"}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {tokens['first']}",
        )
        assert response.status_code == 200 and response.json()["status"] == "awaiting_approval", response.content
    pending = PendingRequest.objects.filter(tenant=persona["tenant"], status="pending").order_by("run_id", "opened_at")
    return tokens, [(str(run_id), str(request_id)) for run_id, request_id in pending.values_list("run_id", "id")]


async def answer_pair(
    port: int, tokens: dict[str, str], work: asyncio.Queue[tuple[str, str]], tally: Tally, prefer_async: bool
) -> None:
    connections = (HttpConnection(port), HttpConnection(port))
    headers = [{"Authorization": f"Bearer {tokens[who]}", "Content-Type": "application/json"} for who in tokens]
    if prefer_async:
        for h in headers:
            h["Prefer"] = "respond-async"

    async def one(index: int, run_id: str, body: bytes) -> None:
        start = time.perf_counter()
        status, data = await connections[index].request("POST", f"/api/runs/{run_id}/responses", body, headers[index])
        elapsed = time.perf_counter() - start
        if status != 200:
            tally.errors.append(f"{status}: {data[:200]!r}")
            return
        outcome = json.loads(data)
        tally.statuses[outcome["status"]] = tally.statuses.get(outcome["status"], 0) + 1
        tally.latencies.append(elapsed)
        if outcome["status"] == "accepted":
            tally.accepted[outcome["requestId"]] = tally.accepted.get(outcome["requestId"], 0) + 1
        if outcome.get("continuationRunId"):
            tally.continuing.append(elapsed)
            tally.continuations[run_id] = tally.continuations.get(run_id, 0) + 1

    try:
        while not work.empty():
            run_id, request_id = work.get_nowait()
            body = json.dumps({"requestId": request_id, "approved": True}).encode()
            await asyncio.gather(one(0, run_id, body), one(1, run_id, body))
    finally:
        for connection in connections:
            await connection.close()


async def hammer(
    ports: list[int], tokens: dict[str, str], requests: list[tuple[str, str]], clients: int, prefer_async: bool
) -> tuple[Tally, float]:
    work: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for item in requests:
        work.put_nowait(item)
    tally = Tally()
    start = time.perf_counter()
    # The pairs spread over the servers (a load balancer's round robin); a pair's two clients share one.
    await asyncio.gather(
        *(answer_pair(ports[n % len(ports)], tokens, work, tally, prefer_async) for n in range(clients))
    )
    return tally, time.perf_counter() - start


async def floor(port: int, connections: int, count: int = 1200) -> tuple[float, float]:
    """Requests per second of `GET /healthz` (one SELECT 1, one channel-layer round trip) over the same number
    of keep-alive connections, and its p50 latency under that load: what one daphne process serves at best
    on this machine."""
    left = count
    latencies: list[float] = []

    async def worker() -> None:
        nonlocal left
        connection = HttpConnection(port)
        try:
            while left > 0:
                left -= 1
                start = time.perf_counter()
                await connection.request("GET", "/healthz")
                latencies.append(time.perf_counter() - start)
        finally:
            await connection.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return count / (time.perf_counter() - start), median(latencies)


def database_check(requests: list[tuple[str, str]]) -> dict[str, int]:
    from django.db.models import Count

    from agents.models import Run
    from approvals.models import PendingRequest

    ids = [request_id for _, request_id in requests]
    rows = PendingRequest.objects.filter(id__in=ids)
    runs = {uuid.UUID(run_id) for run_id, _ in requests}
    continued = Run.objects.filter(previous_run_id__in=runs).values("previous_run_id").annotate(n=Count("id"))
    return {
        "answered": rows.exclude(answer__isnull=True).count(),
        "unanswered": rows.filter(answer__isnull=True).count(),
        "runs": len(runs),
        "continued": sum(1 for row in continued if row["n"] >= 1),
        "continued_twice": sum(1 for row in continued if row["n"] > 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="pending requests to answer")
    parser.add_argument("--per-run", type=int, default=10, help="approvals each seeded run asks for")
    parser.add_argument("--clients", type=int, default=8, help="client pairs (each request answered by both)")
    parser.add_argument("--respond-async", action="store_true", help="send `Prefer: respond-async` with answers")
    parser.add_argument(
        "--daphnes",
        default="1",
        help="console processes (more than one: the Redis layer); with --json, several counts (1,2,4) in turn",
    )
    parser.add_argument("--json", action="store_true", help="print only the figures bench/scale.py draws, as JSON")
    args = parser.parse_args()
    counts = [int(count) for count in args.daphnes.split(",")]
    if len(counts) > 1 and not args.json:
        parser.error("several --daphnes counts go with --json")
    started = time.perf_counter()
    url = pg_database(DATABASE, fresh=False)
    points = []
    with scratch_dir("airlock-respond-bench-") as data:
        # bench/scale.py's counts in one process: Django set up once, the database emptied before each (`flush`).
        for daphnes in counts:
            redis = REDIS_DB if daphnes > 1 else None
            env = bench_env(data, database_url=url, redis_url=redis)
            if redis:
                flush_redis(redis)
            # The consoles start while this process sets Django up and seeds (see daphnes_starting).
            with daphnes_starting(env, daphnes) as ready:
                if not points:
                    setup_django(env)
                from django.core.management import call_command
                from django.db import connections

                call_command("migrate", verbosity=0)
                call_command("flush", verbosity=0, interactive=False)
                database = database_label()
                runs = max(1, args.requests // args.per_run)
                seed_start = time.perf_counter()
                tokens, requests = seed(runs, args.per_run)
                seed_seconds = time.perf_counter() - seed_start
                connections.close_all()
                servers = ready()
                ports = [server.port for server in servers]
                tally, seconds = asyncio.run(hammer(ports, tokens, requests, args.clients, args.respond_async))
                # bench/scale.py draws the answers alone: the floor (5-9 s of 1,200 requests) is for this bench's table.
                healthz, healthz_p50 = (
                    (0.0, 0.0) if args.json else asyncio.run(floor(servers[0].port, 2 * args.clients))
                )
                if tally.errors:
                    print(f"--- daphne log ---\n{servers[0].log_tail(80)}", file=sys.stderr)
            check = database_check(requests)
            connections.close_all()
            doubles = sum(1 for count in tally.accepted.values() if count > 1)
            lost = len(requests) - len(tally.accepted)
            rate = len(requests) / seconds
            sound = doubles == 0 and lost == 0 and check["continued_twice"] == 0
            points.append({"daphnes": daphnes, "resolved_per_second": rate, "sound": sound})

    if args.json:
        print(json.dumps(points if len(points) > 1 else points[0]))
        return
    http_rate = (len(tally.latencies) + len(tally.errors)) / seconds
    prefer = " --respond-async" if args.respond_async else ""
    command = f"respond_throughput.py --requests {args.requests} --per-run {args.per_run} --clients {args.clients}"
    print("### Answer throughput and races (c): `POST /api/runs/{runId}/responses`, every request answered twice\n")
    print(
        f"`{command}{prefer}`: {database} (pooled connections), "
        f"{'in-memory layer, one daphne' if daphnes == 1 else f'Redis layer, {daphnes} daphnes'}; "
        f"{len(requests)} pending approvals in {runs} runs (seeded through the run API in {seed_seconds:.0f} s), "
        f"{args.clients} client pairs over loopback keep-alive HTTP, both clients of a pair answering the same "
        f"request at the same moment; {python_line()}; "
        f"{time.perf_counter() - started:.0f} s.\n"
    )
    print("| measure | value |\n|---|---|")
    print(f"| requests resolved per second (distinct requests / wall) | {rate:.0f} |")
    print(f"| HTTP answers per second (both clients) | {http_rate:.0f} |")
    print(f"| wall time | {seconds:.2f} s |")
    print(f"| floor: `GET /healthz` per second, same server and connections | {healthz:.0f} |")
    print(f"| floor: `GET /healthz` p50 ms under that load | {healthz_p50 * 1000:.1f} |")
    if tally.latencies:
        p50, p99 = median(tally.latencies) * 1000, percentile(tally.latencies, 99) * 1000
        print(f"| one answer, p50 / p99 ms (all {len(tally.latencies)}) | {p50:.1f} / {p99:.1f} |")
    if tally.continuing:
        c50, c99 = median(tally.continuing) * 1000, percentile(tally.continuing, 99) * 1000
        label = f"one answer that started the continuation, p50 / p99 ms ({len(tally.continuing)})"
        print(f"| {label} | {c50:.1f} / {c99:.1f} |")
    outcomes = ", ".join(f"{status} {count}" for status, count in sorted(tally.statuses.items()))
    print(f"| outcomes | {outcomes} |")
    print(f"| requests `accepted` twice (double resolutions) | {doubles} |")
    print(f"| requests `accepted` for nobody | {lost} |")
    print(f"| HTTP errors | {len(tally.errors)} |")
    print(
        f"| runs continued twice (replies / database) | {sum(1 for n in tally.continuations.values() if n > 1)} / "
        f"{check['continued_twice']} |"
    )
    print(f"| database: requests answered / unanswered | {check['answered']} / {check['unanswered']} |")
    print(f"| database: runs continued / runs | {check['continued']} / {check['runs']} |")
    if tally.errors:
        print(f"\nFirst HTTP error: `{tally.errors[0]}`")
    print()
    sound = doubles == 0 and check["continued_twice"] == 0 and check["unanswered"] == 0 and lost == 0
    print(
        f"Target: at least 500 answers/s — {verdict(rate >= 500)} ({rate:.0f}/s); "
        f"0 double resolutions — {verdict(sound)} ({doubles} doubles, {lost} lost, "
        f"{check['continued_twice']} double continuations)"
    )
    if daphnes == 1 and tally.latencies:
        share, slower = rate / healthz, median(tally.latencies) / healthz_p50
        print(
            f"Target (issue 17): requests resolved per second, continuations included, at least {HEALTHZ_SHARE}x the "
            f"same server's `/healthz` rate — {rate:.0f} against {healthz:.0f}/s, {share:.2f}x: "
            f"{verdict(share >= HEALTHZ_SHARE)}; answer p50 under this load at most {P50_OVER_HEALTHZ:.0f}x the "
            f"`/healthz` p50 under its own — {slower:.1f}x: {verdict(slower <= P50_OVER_HEALTHZ)}."
        )


if __name__ == "__main__":
    main()
