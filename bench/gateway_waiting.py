"""MCP calls waiting for a person through the gateway (SPEC section 15): what N calls waiting at once cost one console
process, and that they all come back once approved.

One daphne serving the console as `manage.py serve` does (`bench/served_asgi.py`), PostgreSQL
(`airlock_bench_gateway_waiting`, the pool of 20) and the Redis channel layer (DB 9), with a gateway agent over the
built-in `meetings` server (stdio) in approval `always`. From this process, N MCP clients (the project's `mcp` SDK,
handshake-era `--mode legacy` by default: a session each, one shared HTTP connection pool) each call `ping`; every
call opens an inbox request and waits on the layer. Once all N requests are open and their groups are in Redis
(and a few seconds passed), the console's threads (/proc/PID/status), open file descriptors (/proc/PID/fd: the
sockets of its accepted connections apart, which are the clients' own), RSS and the PostgreSQL connections it holds
(pg_stat_activity rows on its sockets) are read against the same figures before (after a warm-up: one call, then
WARM at once, approved), and the thread peak while the calls arrived is sampled every 20 ms. Then another member
answers every request through `POST /api/requests/{id}/responses` (ANSWERERS connections at once); each call must
return upstream's `pong`; the figures are read again once they did.

Targets: no thread per waiting call (the bench asserts it: threads and the peak within THREAD_BOUND of before,
whatever N); no database connection per waiting call (at most the pool's); file descriptors other than the clients'
sockets flat (within FD_BOUND); every call back within LATE_SECONDS of the last answer (woken by it, not found by
its own reread).

Usage: .venv/bin/python bench/gateway_waiting.py [--calls 200] [--mode legacy]
"""

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    REDIS_SERVER,
    Daphne,
    HttpConnection,
    bench_env,
    daphnes_starting,
    database_label,
    flush_redis,
    median,
    percentile,
    pg_connections_of,
    pg_database,
    python_line,
    raise_nofile,
    rss_kb,
    scratch_dir,
    seed_operator,
    setup_django,
    thread_count,
    verdict,
)

DATABASE = "airlock_bench_gateway_waiting"
REDIS_DB = f"{REDIS_SERVER}/9"
AGENT = "desk"
GATEWAY: dict[str, Any] = {"name": AGENT, "runtime": "gateway", "mcpServers": [{"connection": "meetings"}]}
WARM = 8
SETTLE_SECONDS = 3.0
POOL_SIZE = 20  # DATABASE_POOL_SIZE's default (console/settings.py)
# The default executor of daphne's loop (the gate's token check, opening a request, recording a call: min(32, cores
# + 4) threads) and a few of the console's request threads.
THREAD_BOUND = 12
FD_BOUND = 12
ANSWERERS = 4
# A call back later than this after the last answer was not woken by its answer (a waiting call reads its request
# again every gateway.calls.REREAD_SECONDS).
LATE_SECONDS = 10.0
STARTED = time.monotonic()


def note(step: str) -> None:
    print(f"  [{time.monotonic() - STARTED:.0f} s] {step}", file=sys.stderr, flush=True)


def fds(pid: int, port: int) -> dict[str, int]:
    """The process's open file descriptors, and how many are sockets of connections it accepted on `port`."""
    inodes: list[str] = []
    total = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        total += 1
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.append(target[8:-1])
    accepted = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                local_port, state = int(fields[1].rsplit(":", 1)[1], 16), fields[3]
                if local_port == port and state != "0A":  # 0A: the listening socket
                    accepted.add(fields[9])
    clients = sum(1 for inode in inodes if inode in accepted)
    return {"fds": total, "client_sockets": clients, "other_fds": total - clients}


def figures(server: Daphne) -> dict[str, int]:
    return {
        "threads": thread_count(server.pid),
        "rss": rss_kb(server.pid),
        "db": pg_connections_of(server.pid, DATABASE),
        **fds(server.pid, server.port),
    }


async def groups_on_the_layer() -> int:
    """How many requests have a waiter in their group (channels_redis's group keys)."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(REDIS_DB)
    try:
        return sum([1 async for _ in client.scan_iter(match="asgi:group:request.*", count=1000)])
    finally:
        await client.aclose()


def pending_ids() -> list[str]:
    from django.db import connections

    from approvals.models import PendingRequest, RequestStatus

    try:
        found = PendingRequest.objects.filter(agent__name=AGENT, status=RequestStatus.PENDING)
        return [str(pk) for pk in found.values_list("id", flat=True)]
    finally:
        connections.close_all()


async def call(http: Any, url: str, mode: str) -> tuple[str, float]:
    """One client's session and its `ping`; upstream's text and the time.monotonic() its result arrived."""
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool("ping", {})
    text = " ".join(block.text for block in result.content if block.type == "text")
    return ("pong" if not result.is_error and text == "pong" else f"error: {text}"), time.monotonic()


async def arrive(server: Daphne, calls: list["asyncio.Task[tuple[str, float]]"], count: int) -> int:
    """Wait until `count` calls wait on the layer, their requests open; the most threads the console had meanwhile."""
    peak = thread_count(server.pid)
    deadline = time.monotonic() + 120
    while True:
        for _ in range(10):
            peak = max(peak, thread_count(server.pid))
            await asyncio.sleep(0.02)
        failed = [c for c in calls if c.done()]
        if failed:
            raise RuntimeError(f"{len(failed)} calls came back before any answer: {failed[0].result()}")
        if await groups_on_the_layer() >= count and len(await asyncio.to_thread(pending_ids)) >= count:
            return peak
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {await groups_on_the_layer()} of {count} calls wait on the layer after 120 s")


async def answer_all(server: Daphne, token: str, ids: list[str]) -> list[float]:
    """Approve every request through the API, ANSWERERS connections at once; each answer's seconds."""
    queue = list(ids)
    seconds: list[float] = []
    body = json.dumps({"approved": True}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    async def answerer() -> None:
        http = HttpConnection(server.port)
        try:
            while queue:
                rid = queue.pop()
                started = time.perf_counter()
                status, data = await http.request("POST", f"/api/requests/{rid}/responses", body, headers)
                seconds.append(time.perf_counter() - started)
                if status != 200 or json.loads(data)["status"] != "accepted":
                    raise RuntimeError(f"answering {rid}: {status} {data[:300]!r}")
        finally:
            await http.close()

    await asyncio.gather(*(answerer() for _ in range(ANSWERERS)))
    return seconds


async def round_of(server: Daphne, url: str, tokens: tuple[str, str], count: int, mode: str) -> dict[str, Any]:
    """`count` calls at once, waiting, then answered; what the console had meanwhile."""
    import httpx2

    caller, answerer = tokens
    limits = httpx2.Limits(max_connections=4 * count + 10, max_keepalive_connections=4 * count + 10)
    result: dict[str, Any] = {}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {caller}"}, timeout=300, limits=limits) as http:
        opened = time.monotonic()
        calls = [asyncio.ensure_future(call(http, url, mode)) for _ in range(count)]
        try:
            result["peak_threads"] = await arrive(server, calls, count)
            result["open_seconds"] = time.monotonic() - opened
            await asyncio.sleep(SETTLE_SECONDS)
            result["during"] = figures(server)
            still = [c for c in calls if c.done()]
            if still:
                raise RuntimeError(f"{len(still)} calls came back before any answer")
            ids = await asyncio.to_thread(pending_ids)
            answering = time.monotonic()
            result["answers"] = await answer_all(server, answerer, ids)
            answered = time.monotonic()
            results = await asyncio.wait_for(asyncio.gather(*calls), 120)
        finally:
            for c in calls:
                c.cancel()
        wrong = [text for text, _ in results if text != "pong"]
        if wrong:
            raise RuntimeError(f"{len(wrong)} calls did not return pong: {wrong[0]}")
        result["back_seconds"] = max(arrived for _, arrived in results) - answering
        result["answering_seconds"] = answered - answering
        # When each call came back, counted from the last answer (negative: before it).
        result["after_last"] = sorted(arrived - answered for _, arrived in results)
    return result


async def measure(server: Daphne, tokens: tuple[str, str], args: argparse.Namespace) -> dict[str, Any]:
    url = f"{server.base}/mcp/{AGENT}"
    # One call alone first: the gateway starts its agent's session manager on first use, and requests that arrive
    # together while it starts can be handed it unstarted (500 "Task group is not initialized": gateway/server.py
    # `Managers.of`, reported), which is not what this measures.
    await round_of(server, url, tokens, 1, args.mode)
    await round_of(server, url, tokens, WARM, args.mode)
    await asyncio.sleep(SETTLE_SECONDS)
    r: dict[str, Any] = {"before": figures(server)}
    note(f"warmed: {r['before']}")
    r.update(await round_of(server, url, tokens, args.calls, args.mode))
    note(f"while {args.calls} waited: {r['during']}; all back {r['back_seconds']:.1f} s after the first answer")
    await asyncio.sleep(SETTLE_SECONDS)
    r["after"] = figures(server)
    note(f"after: {r['after']}")
    return r


def answerer_token(persona: dict[str, Any]) -> str:
    """Another member of the caller's tenant (an admin), who answers: the requester does not approve their own."""
    from django.contrib.auth.models import User

    from console.models import ApiToken, Membership

    user = User.objects.create_user("bench-approver")
    membership = Membership.objects.create(user=user, tenant=persona["tenant"], role="admin")
    return ApiToken.issue(membership, "bench")[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls waiting at once")
    parser.add_argument("--mode", default="legacy", choices=["legacy", "auto"], help="the mcp client's mode")
    args = parser.parse_args()
    raise_nofile()
    started = time.perf_counter()
    with scratch_dir("airlock-gateway-waiting-") as data:
        env = bench_env(data, database_url=pg_database(DATABASE, fresh=True), redis_url=REDIS_DB)
        flush_redis(REDIS_DB)
        # The console starts while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(env, 1) as ready:
            setup_django(env)
            from django.core.management import call_command
            from django.db import connections

            call_command("migrate", verbosity=0)
            persona = seed_operator("bench", {AGENT: GATEWAY})
            tokens = (persona["token"], answerer_token(persona))
            database = database_label()
            connections.close_all()
            [server] = ready()
            r = asyncio.run(measure(server, tokens, args))
    report(args, r, database, time.perf_counter() - started)


def report(args: argparse.Namespace, r: dict[str, Any], database: str, seconds: float) -> None:
    n = args.calls
    before, during, after = r["before"], r["during"], r["after"]
    answers = r["answers"]
    print(f"### MCP gateway: {n} calls waiting for approval on one console (SPEC section 15)\n")
    print(
        f"`gateway_waiting.py --calls {n} --mode {args.mode}`: one daphne (`console.asgi` as `manage.py serve` runs "
        f"it), {database} (`{DATABASE}`, its pool of {POOL_SIZE}), Redis layer (DB 9); a gateway over the built-in "
        f"`meetings` server in approval `always`; {n} `mcp` SDK clients in `{args.mode}` mode, a session each, call "
        f"`ping` at once (all waiting on the layer {r['open_seconds']:.1f} s after the first, after {WARM} warm-up "
        f"calls approved); another member approves each through `POST /api/requests/{{id}}/responses` "
        f"({ANSWERERS} at once); {python_line()}; {seconds:.0f} s.\n"
    )
    print("| console process | before | while the calls wait | per waiting call | after they were approved |")
    print("|---|---|---|---|---|")
    rows = [
        ("threads", "threads", f" (peak {r['peak_threads']} while they arrived)"),
        ("open file descriptors, the clients' sockets apart", "other_fds", ""),
        ("the clients' sockets (accepted connections)", "client_sockets", ""),
        ("PostgreSQL connections held", "db", ""),
    ]
    for label, key, extra in rows:
        per = (during[key] - before[key]) / n
        print(f"| {label} | {before[key]} | {during[key]}{extra} | {per:.3f} | {after[key]} |")
    per_kb = (during["rss"] - before["rss"]) / n
    print(
        f"| RSS MB | {before['rss'] / 1024:.1f} | {during['rss'] / 1024:.1f} | {per_kb:.1f} KB | "
        f"{after['rss'] / 1024:.1f} |"
    )
    print(
        f"\nAnswers: p50 {median(answers) * 1000:.0f} ms, p95 {percentile(answers, 95) * 1000:.0f} ms each; every "
        f"call back with upstream's `pong` {r['back_seconds']:.1f} s after the first answer (the answers took "
        f"{r['answering_seconds']:.1f} s).\n"
    )
    late = [s for s in r["after_last"] if s > LATE_SECONDS]
    print(
        f"Calls back by the last answer: {sum(1 for s in r['after_last'] if s <= 0)} of {n}; within {LATE_SECONDS:.0f} "
        f"s after it: {n - len(late)}; later: {len(late)}"
        + (f" (from {min(late):.1f} to {max(late):.1f} s after it)" if late else "")
        + ".\n"
    )
    threads_ok = max(during["threads"], r["peak_threads"]) - before["threads"] <= THREAD_BOUND
    db_ok = during["db"] <= POOL_SIZE
    back_ok = not late
    fds_ok = during["other_fds"] - before["other_fds"] <= FD_BOUND
    print(
        f"Target: no thread per waiting call (within {THREAD_BOUND} of before, peak included) — {before['threads']} "
        f"-> {during['threads']} (peak {r['peak_threads']}) -> {after['threads']}: {verdict(threads_ok)}"
    )
    print(
        f"Target: no database connection per waiting call (at most the pool's {POOL_SIZE}) — {before['db']} -> "
        f"{during['db']} -> {after['db']}: {verdict(db_ok)}"
    )
    print(
        f"Target: no file descriptor per waiting call besides its client's own sockets (within {FD_BOUND}) — "
        f"{before['other_fds']} -> {during['other_fds']} -> {after['other_fds']}: {verdict(fds_ok)}"
    )
    print(
        f"Target: every call back within {LATE_SECONDS:.0f} s of the last answer (woken, not found by its reread) — "
        f"{n - len(late)} of {n}: {verdict(back_ok)}"
    )
    sys.stdout.flush()
    assert threads_ok, (
        f"a thread per waiting call: {before['threads']} -> {during['threads']} (peak {r['peak_threads']})"
    )


if __name__ == "__main__":
    main()
