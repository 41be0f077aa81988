"""Long polls of external agents (SPEC section 12, `GET /api/requests/{id}?wait=N`): what a thousand waiters cost a
console process, and how soon an answer reaches them, against a bare group_send to as many websockets.

One daphne serving the console as `manage.py serve` does (collector tuning included; bench/push_asgi.py, which adds
the bare broadcast of push_latency beside it) on PostgreSQL (`airlock_bench_long_polls`) and the Redis channel
layer (DB 9). An external agent opens N requests (in process, before), then N keep-alive connections each send
`GET /api/requests/{id}?wait=60` with an operator's token, from this process (asyncio streams). Once every waiter
listens on the layer (its request's group in Redis) and a few seconds passed, the console's RSS (VmRSS), its
threads (/proc/PID/status) and the PostgreSQL connections it holds (pg_stat_activity rows on its sockets) are read
against the same figures before (after a warm-up of WARM short polls); the thread peak while the polls arrive is
sampled too, and another tenant's inbox (`GET /api/requests`, its own token, one call after another) is timed
from the first poll's arrival until they all wait.

Then the requests are answered in batches (`--batch`, default all at once): this process stores each answer as
`approvals.actions.answer_request` does (`approvals.decisions.decide`, its conditional update: the full answer path
costs ~75 ms a request in process here, and a thousand of them would outlast the 60 s wait), then sends the
batch's wakes back to back as `approvals.waiting.wake` does (what the answer's `notify_requests_closed` calls:
each wake carries its request's JSON); each waiter's latency is the time from its wake's send to its response's
last byte. So the time measured is the console's (wake -> the woken handler's answer -> socket), not the
answer's own.

Baseline: as many bare websockets on the same daphne, each round one plain `group_send` of a message as long as a
poll's response (push_latency's bare broadcast), latency from the send to the arrival.

Targets (issue 48 item 4): the console's threads within a fixed bound (no more than THREAD_BOUND over the
baseline, peak included) and no database connection per waiter; another tenant's p99 under 200 ms meanwhile; the
console's RSS back within 10% of the baseline once they were answered; the waiters' p50 and p99 within 1.5x of the
bare group_send's at the same N.

Usage: .venv/bin/python bench/long_polls.py [--waiters 1000] [--batch 1000] [--rounds 5]
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    REDIS_SERVER,
    Daphne,
    RawWebSocket,
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
from bench.idle_streams import cpu_seconds
from bench.push_latency import BARE_PREFIX, Sink, wait_all

DATABASE = "airlock_bench_long_polls"
REDIS_DB = f"{REDIS_SERVER}/9"
WAIT = 60
WARM = 64
WAVE = 50
SETTLE_SECONDS = 3.0
RATIO = 1.5
POOL_SIZE = 20  # DATABASE_POOL_SIZE's default (console/settings.py)
# The long polls' reader threads (console.asgi.LONG_POLL_THREADS) and a few request threads for the other tenant.
THREAD_BOUND = 12
OTHER_P99_MS = 200
MEMORY_BACK = 1.10
DEPLOYER: dict[str, Any] = {
    "name": "deployer",
    "runtime": "external",
    "tools": [{"name": "deploy", "description": "Deploy a service", "parameters": {"type": "object"}}],
}
STARTED = time.monotonic()


def note(step: str) -> None:
    print(f"  [{time.monotonic() - STARTED:.0f} s] {step}", file=sys.stderr, flush=True)


class Waiter:
    """One `GET /api/requests/{id}?wait=N` on a connection of its own; `arrived` is the time.time() of the last byte."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.arrived = 0.0
        self.status = 0
        self.body: dict[str, Any] = {}
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def start(self, port: int, token: str, seconds: int) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        lines = [
            f"GET /api/requests/{self.request_id}?wait={seconds} HTTP/1.1",
            f"Host: 127.0.0.1:{port}",
            f"Authorization: Bearer {token}",
        ]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.lower() == "content-length":
                length = int(value)
        body = await reader.readexactly(length)
        self.arrived = time.time()
        self.status = int(head.split(b" ", 2)[1])
        self.body = json.loads(body)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()


async def waiting_on_the_layer() -> int:
    """How many requests have a waiter in their group (channels_redis's group keys)."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(REDIS_DB)
    try:
        return sum([1 async for _ in client.scan_iter(match="asgi:group:request.*", count=1000)])
    finally:
        await client.aclose()


async def start_all(server: Daphne, token: str, ids: list[str], seconds: int) -> tuple[list[Waiter], int]:
    """Waiters for `ids`, opened in waves (daphne's listen backlog), until each one listens on the layer; also the
    most threads the console had meanwhile."""
    peak = thread_count(server.pid)
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, thread_count(server.pid))
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    waiters = [Waiter(rid) for rid in ids]
    try:
        for first in range(0, len(waiters), WAVE):
            await asyncio.gather(*(w.start(server.port, token, seconds) for w in waiters[first : first + WAVE]))
        deadline = time.monotonic() + 60
        while (listening := await waiting_on_the_layer()) < len(ids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {listening} of {len(ids)} waiters listen on the layer")
            await asyncio.sleep(0.2)
    finally:
        sampling = False
        await sampler
    return waiters, peak


async def other_tenant(server: Daphne, token: str, until: asyncio.Event) -> list[float]:
    """Another tenant's inbox read one call after another (50 ms apart) until `until`; each call's seconds."""
    from bench.common import HttpConnection

    http = HttpConnection(server.port)
    latencies: list[float] = []
    try:
        while not until.is_set():
            started = time.perf_counter()
            status, _ = await http.request("GET", "/api/requests?limit=5", headers={"Authorization": f"Bearer {token}"})
            latencies.append(time.perf_counter() - started)
            assert status == 200, status
            await asyncio.sleep(0.05)
    finally:
        await http.close()
    return latencies


def figures(server: Daphne) -> dict[str, int]:
    return {
        "rss": rss_kb(server.pid),
        "threads": thread_count(server.pid),
        "db": pg_connections_of(server.pid, DATABASE),
    }


def store_answers(persona: dict[str, Any], ids: list[str]) -> None:
    """Store an approval for each of `ids` as `answer_request` stores it (`approvals.decisions.decide`: its
    conditional update and receipt), without the rest of the answer's work and without its wake."""
    from django.utils import timezone

    from approvals.decisions import Actor, Decision, Via, decide
    from approvals.models import PendingRequest

    now = timezone.now()
    approved = Decision(Actor.person(persona["user"], Via.API), {"approved": True})
    for pending in PendingRequest.objects.filter(id__in=ids):
        assert decide(pending, approved, now, announce=False), pending.id


def send_wakes(request_ids: list[str]) -> dict[str, float]:
    """The wakes of `request_ids` (`approvals.waiting.messages`: each with its request's JSON), one group_send
    after another on one event loop of this thread (as many answers, each waking its own request, would send
    them); the time.time() each one left."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from approvals import waiting

    layer = get_channel_layer()
    assert layer is not None
    sent: dict[str, float] = {}
    sends = waiting.messages(request_ids)

    async def each() -> None:
        for rid, message in sends.items():
            sent[rid] = time.time()
            await layer.group_send(waiting.group(rid), message)

    async_to_sync(each)()
    return sent


def wake_call_seconds(count: int) -> float:
    """How long one `approvals.waiting.wake` of `count` requests takes (groups nobody waits in)."""
    import uuid

    from approvals import waiting

    started = time.perf_counter()
    waiting.wake([str(uuid.uuid4()) for _ in range(count)])
    return time.perf_counter() - started


async def wake_batches(server: Daphne, persona: dict[str, Any], waiters: list[Waiter], batch: int) -> dict[str, Any]:
    """Answer the waiters' requests in batches, each batch's wakes sent back to back; latencies from each wake to
    its waiter's response, and the console's CPU per woken waiter."""
    from django.db import connections

    latencies: list[float] = []
    cpu = 0.0
    spans: list[float] = []
    for first in range(0, len(waiters), batch):
        group = waiters[first : first + batch]
        held = [w.request_id for w in group]
        await asyncio.to_thread(store_answers, persona, held)
        early = [w for w in group if w.task is not None and w.task.done()]
        if early:
            raise RuntimeError(f"{len(early)} waiters came back before their wake: {early[0].body}")
        before = cpu_seconds(server.pid)
        waking = asyncio.ensure_future(asyncio.to_thread(send_wakes, held))
        tasks = [w.task for w in group if w.task is not None]
        _, pending = await asyncio.wait(tasks, timeout=WAIT)
        sent = await waking
        cpu += cpu_seconds(server.pid) - before
        if pending:
            raise RuntimeError(f"{len(pending)} of {len(group)} waiters got no response within {WAIT} s")
        for w in group:
            assert w.task is not None
            assert w.task.exception() is None, w.task.exception()
            if w.status != 200 or not w.body.get("decision"):
                raise RuntimeError(f"a woken waiter got {w.status}: {w.body}")
            latencies.append(w.arrived - sent[w.request_id])
        spans.append(max(sent.values()) - min(sent.values()))
    await asyncio.to_thread(connections.close_all)
    return {
        "latencies": latencies,
        "cpu_ms": cpu / len(waiters) * 1000,
        "size": len(json.dumps(waiters[0].body)),
        "send_span": max(spans),
    }


async def bare_baseline(server: Daphne, count: int, rounds: int, size: int) -> list[float]:
    """push_latency's bare broadcast: `count` websockets in one group, `rounds` plain group_sends (after a warm-up)."""
    from bench.common import HttpConnection, open_websocket

    sink = Sink(BARE_PREFIX)
    sockets: list[RawWebSocket] = []
    http = HttpConnection(server.port)
    try:
        for first in range(0, count, WAVE):
            wave = min(WAVE, count - first)
            opening = (open_websocket(server.port, "/bench/ws/", {}, sink.got) for _ in range(wave))
            sockets += await asyncio.gather(*opening)
        await asyncio.sleep(1.0)
        for n in range(rounds + 1):
            sink.arm(count, recording=n > 0)
            status, _ = await http.request("POST", f"/bench/broadcast?size={max(1, size - 60)}")
            assert status == 204, status
            await wait_all(sink, sockets, "bare broadcast")
    finally:
        await http.close()
        for ws in sockets:
            ws.close()
        await asyncio.sleep(0.2)
    return sink.latencies


async def measure(
    server: Daphne, persona: dict[str, Any], other: dict[str, Any], ids: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """`ids`: WARM requests for the warm-up (left open), then one for each waiter; `other`: another tenant."""
    result: dict[str, Any] = {}
    warm, _ = await start_all(server, persona["token"], ids[:WARM], 1)
    await asyncio.gather(*(w.task for w in warm if w.task is not None))
    for w in warm:
        w.close()
    assert all(w.status == 200 and w.body["decision"] is None for w in warm), "a warm-up poll was not pending"
    await asyncio.sleep(SETTLE_SECONDS)
    result["before"] = figures(server)
    note(f"warmed: {result['before']}")
    opening = time.monotonic()
    done = asyncio.Event()
    probing = asyncio.ensure_future(other_tenant(server, other["token"], done))
    try:
        waiters, result["peak_threads"] = await start_all(server, persona["token"], ids[WARM:], WAIT)
    finally:
        done.set()
        result["other"] = await probing
    result["open_seconds"] = time.monotonic() - opening
    note(f"{len(waiters)} waiting after {result['open_seconds']:.1f} s")
    try:
        await asyncio.sleep(SETTLE_SECONDS)
        result["during"] = figures(server)
        note(f"while they wait: {result['during']}")
        result.update(await wake_batches(server, persona, waiters, args.batch))
        note("woken")
        await asyncio.sleep(SETTLE_SECONDS)
        result["after"] = figures(server)
    finally:
        for w in waiters:
            w.close()
    result["bare"] = await bare_baseline(server, min(args.batch, len(waiters)), args.rounds, result["size"])
    note("baseline")
    return result


def open_requests(persona: dict[str, Any], count: int) -> list[str]:
    from django.db import connection, transaction

    from approvals.actions import open_request
    from approvals.external_wire import OpenRequest

    body = OpenRequest.model_validate({"toolName": "deploy", "arguments": {"service": "billing"}})
    with transaction.atomic():  # one commit, not one per request: seeding took 30 s of the benchmark's 70
        ids = [
            str(open_request(persona["membership"], persona["user"], "deployer", body).request.id) for _ in range(count)
        ]
        # Nobody listens yet (no console runs): the commit's hooks would send each request's wakes and inbox pushes
        # to empty groups, one async_to_sync call after another (13 s of the seeding).
        connection.run_on_commit.clear()
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1000, help="answers whose wakes leave together")
    parser.add_argument("--rounds", type=int, default=5, help="bare broadcasts (after one warm-up)")
    args = parser.parse_args()
    raise_nofile()
    started = time.perf_counter()
    with scratch_dir("airlock-long-polls-") as data:
        env = bench_env(data, database_url=pg_database(DATABASE, fresh=True), redis_url=REDIS_DB)
        flush_redis(REDIS_DB)
        # The console starts while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(env, 1, app="bench.push_asgi:application") as ready:
            setup_django(env)
            from django.core.management import call_command
            from django.db import connections

            call_command("migrate", verbosity=0)
            persona = seed_operator("bench", {"deployer": DEPLOYER})
            other = seed_operator("other")
            ids = open_requests(persona, WARM + args.waiters)
            database = database_label()
            connections.close_all()
            note(f"seeded {len(ids)} requests")
            [server] = ready()
            r = asyncio.run(measure(server, persona, other, ids, args))
        r["wake_call"] = wake_call_seconds(min(args.batch, args.waiters))

    n = args.waiters
    before, during, after = r["before"], r["during"], r["after"]
    per_waiter_kb = (during["rss"] - before["rss"]) / n
    polls, bare = r["latencies"], r["bare"]
    p50, p99 = median(polls) * 1000, percentile(polls, 99) * 1000
    b50, b99 = median(bare) * 1000, percentile(bare, 99) * 1000
    b = min(args.batch, n)
    print(f"### Long polls of external agents: {n} waiters on one console, and the wake against a bare group_send\n")
    print(
        f"`long_polls.py --waiters {n} --batch {args.batch} --rounds {args.rounds}`: one daphne (`console.asgi` as "
        f"`manage.py serve` runs it), {database} (`{DATABASE}`, its pool of {POOL_SIZE}), Redis layer (DB 9); {n} "
        f"keep-alive connections each waiting on `GET /api/requests/{{id}}?wait={WAIT}` of an open external request "
        f"(opened in {r['open_seconds']:.1f} s, after {WARM} warm-up polls of 1 s); answers stored (`decide`) "
        f"{b} at a time, then their wakes sent back to back ({r['send_span'] * 1000:.0f} ms from the first to the "
        f"last of {b}); {python_line()}; {time.perf_counter() - started:.0f} s.\n"
    )
    print("| console process | before | while the waiters wait | per waiter | after they were answered |")
    print("|---|---|---|---|---|")
    print(
        f"| RSS MB | {before['rss'] / 1024:.1f} | {during['rss'] / 1024:.1f} | {per_waiter_kb:.1f} KB | "
        f"{after['rss'] / 1024:.1f} |"
    )
    print(
        f"| threads | {before['threads']} | {during['threads']} (peak {r['peak_threads']} while they arrived) | "
        f"{(during['threads'] - before['threads']) / n:.3f} | {after['threads']} |"
    )
    print(
        f"| PostgreSQL connections held | {before['db']} | {during['db']} | {(during['db'] - before['db']) / n:.3f} | "
        f"{after['db']} |"
    )
    print()
    print("| from its wake (or the send) to the response | n | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|")
    print(f"| long polls, {b} woken back to back | {len(polls)} | {p50:.1f} | {p99:.1f} | {max(polls) * 1000:.1f} |")
    print(
        f"| bare group_send to {b} websockets ({args.rounds} rounds) | {len(bare)} | {b50:.1f} | {b99:.1f} | "
        f"{max(bare) * 1000:.1f} |"
    )
    print(f"\nConsole CPU per woken waiter (the JSON its wake carried, sent): {r['cpu_ms']:.2f} ms.")
    print(
        f"One `approvals.waiting.wake` of {b} requests (what `notify_requests_closed` sends; groups nobody waits in): "
        f"{r['wake_call'] * 1000:.0f} ms.\n"
    )
    # A fixed bound whatever the number of waiters; no more connections than the pool's.
    bounded = max(during["threads"], r["peak_threads"]) - before["threads"] <= THREAD_BOUND
    no_db = during["db"] <= POOL_SIZE
    print(
        f"Target: threads within {THREAD_BOUND} of the baseline and no database connection per waiter — threads "
        f"{before['threads']} -> {during['threads']} (peak {r['peak_threads']} while they arrived), connections "
        f"{before['db']} -> {during['db']} (the pool's size: {POOL_SIZE}): {verdict(bounded and no_db)}"
    )
    other_p99 = percentile(r["other"], 99) * 1000
    print(
        f"Target: another tenant's inbox under {OTHER_P99_MS} ms p99 while the {n} arrived — p50 "
        f"{median(r['other']) * 1000:.1f} ms, p99 {other_p99:.1f} ms, max {max(r['other']) * 1000:.1f} ms "
        f"({len(r['other'])} calls): {verdict(other_p99 < OTHER_P99_MS)}"
    )
    print(
        f"Target: RSS back within {MEMORY_BACK - 1:.0%} once they were answered — {before['rss'] / 1024:.1f} -> "
        f"{after['rss'] / 1024:.1f} MB: {verdict(after['rss'] <= before['rss'] * MEMORY_BACK)}"
    )
    x50, x99 = p50 / b50, p99 / b99
    print(
        f"Target: the waiters within {RATIO}x of the bare group_send to {b} sockets (p50 and p99) — {x50:.2f}x / "
        f"{x99:.2f}x: {verdict(x50 <= RATIO and x99 <= RATIO)}"
    )


if __name__ == "__main__":
    main()
