"""(b) Inbox push latency: a request opens -> its fragment reaches N connected consoles.

Three server shapes, in one run: one daphne with the in-memory channel layer, one daphne with the Redis
layer, two daphnes with the Redis layer (clients split half/half across them). All daphnes share one
database (a temporary SQLite file by default, `--database-url` for PostgreSQL).

For each shape and each N, N authenticated operator sockets listen on /ws/console/ and N sockets on a
bare Channels group (bench/push_asgi.py); the next, larger N keeps them and opens only the ones it adds. Each
round opens one approval request through the run API of the first daphne (the push is rendered once and fanned
out through the channel layer) and then sends one bare `group_send` of a message of the same size from the same
process. Latency per socket: receive time
minus the time the push left (fragments rendered, pending count read) for the inbox, or the send time
for the bare broadcast; both clocks are this machine's. One unrecorded warm-up round precedes each N.
The sockets are minimal protocol clients (bench.common.RawWebSocket) that note the arrival time of each
message and read only its `sentAt`, so a thousand of them cost this process little of the CPU it shares
with the servers. The Redis URL carries `?socket_timeout=15`: see REDIS_DB below.

Targets: on one daphne the inbox stays within 1.2x of the bare broadcast at every N (median and p99);
at 1000 clients the inbox p99 over two daphnes is at most 0.6x of the one-daphne bare p99 (same layer).

Usage: .venv/bin/python bench/push_latency.py [--clients 1,50,200,1000] [--rounds 25] [--rounds-large 8]
       [--rounds-small 500] [--shapes memory,redis,redis2] [--database-url postgres://...]
"""

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    MAILER,
    REDIS_SERVER,
    Daphne,
    HttpConnection,
    RawWebSocket,
    bench_env,
    daphnes_starting,
    database_label,
    flush_redis,
    median,
    open_websocket,
    percentile,
    python_line,
    raise_nofile,
    scratch_dir,
    seed_operator,
    send_email_lines,
    setup_django,
    verdict,
)

# redis-py 8 reads with a 5 s socket timeout by default, the same 5 s channels_redis blocks in BZPOPMIN: an idle
# receive then fails and its consumer closes (1011) every ~5 s (django/channels_redis#422). The console's
# settings pass REDIS_URL through unchanged, so the benchmark gives the URL a longer read timeout.
REDIS_DB = f"{REDIS_SERVER}/7?socket_timeout=15"
SHAPES = {"memory": ("in-memory", 1), "redis": ("Redis", 1), "redis2": ("Redis", 2)}
WAVE = 40
INBOX_PREFIX = b'{"type": "requests_opened"'
BARE_PREFIX = b'{"type": "bench"'


def sent_at(raw: bytes) -> float:
    """The `sentAt` of a pushed JSON message, read without parsing the whole message (client CPU is shared)."""
    start = raw.index(b'"sentAt": ') + 10
    end = start
    while raw[end] not in b",}":
        end += 1
    return float(raw[start:end])


class Sink:
    """Latencies of one kind of socket; `done` is set when every socket got the current round's message."""

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.latencies: list[float] = []
        self.recording = False
        self.expected = 0
        self.received = 0
        self.size = 0
        self.done = asyncio.Event()

    def arm(self, count: int, recording: bool) -> None:
        self.expected, self.received, self.recording = count, 0, recording
        self.done.clear()

    def got(self, raw: bytes, arrived: float) -> None:
        if not raw.startswith(self.prefix):
            return
        if self.recording:
            self.latencies.append(arrived - sent_at(raw))
        self.size = len(raw)
        self.received += 1
        if self.received >= self.expected:
            self.done.set()


@dataclass
class Cell:
    layer: str
    servers: int
    clients: int
    inbox: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    seconds: float = 0.0


class Route:
    """Where a shape's sockets report: the sinks of the cell being measured. The sockets of one cell stay open for
    the next, larger one, which opens only the ones it adds (a thousand consoles took ~10 s to connect)."""

    def __init__(self) -> None:
        self.inbox, self.bare = Sink(INBOX_PREFIX), Sink(BARE_PREFIX)

    def to_inbox(self, raw: bytes, arrived: float) -> None:
        self.inbox.got(raw, arrived)

    def to_bare(self, raw: bytes, arrived: float) -> None:
        self.bare.got(raw, arrived)


async def connect(
    servers: list[Daphne], headers: dict[str, str], opened: int, clients: int, route: Route
) -> list[RawWebSocket]:
    """Inbox and bare sockets `opened` to `clients` - 1 (the first `opened` pairs are open already), split evenly
    over the servers, opened in waves of WAVE pairs: a burst of a few hundred simultaneous connects exhausts the
    Redis layer's pool of 100 connections per process."""
    sockets: list[RawWebSocket] = []
    for first in range(opened, clients, WAVE):
        opening = []
        for index in range(first, min(clients, first + WAVE)):
            server = servers[index % len(servers)]
            # Each console checks the handshake's Origin against its own (console/origins.py).
            own = {**headers, "Origin": server.base}
            opening.append(open_websocket(server.port, "/ws/console/", own, route.to_inbox))
            opening.append(open_websocket(server.port, "/bench/ws/", own, route.to_bare))
        done = await asyncio.gather(*opening, return_exceptions=True)
        sockets += [ws for ws in done if isinstance(ws, RawWebSocket)]
        failed = [error for error in done if isinstance(error, BaseException)]
        if failed:
            for ws in sockets:
                ws.close()
            raise RuntimeError(f"{len(failed)} of {len(opening)} sockets did not connect: {failed[0]!r}")
    return sockets


async def wait_all(sink: Sink, sockets: list[RawWebSocket], what: str) -> None:
    try:
        await asyncio.wait_for(sink.done.wait(), timeout=120)
    except TimeoutError:
        closed = [ws.closed.result() for ws in sockets if ws.closed.done()]
        raise RuntimeError(
            f"{what}: {sink.received} of {sink.expected} sockets got the message; {len(closed)} closed "
            f"(codes {sorted(set(closed))})"
        ) from None


async def close_all(sockets: list[RawWebSocket]) -> None:
    for ws in sockets:
        ws.close()
    sockets.clear()
    await asyncio.sleep(0.2)


async def measure(
    servers: list[Daphne], persona: dict[str, str], cell: Cell, rounds: int, pool: list[RawWebSocket], route: Route
) -> None:
    """One cell on the shape's open sockets (`pool`, grown to the cell's N pairs)."""
    started = time.perf_counter()
    route.inbox, route.bare = inbox, bare = Sink(INBOX_PREFIX), Sink(BARE_PREFIX)
    headers = {"Cookie": f"sessionid={persona['session']}", "Origin": servers[0].base}
    http = HttpConnection(servers[0].port)
    try:
        if len(pool) > 2 * cell.clients:  # fewer clients than the cell before
            await close_all(pool)
        pool += await connect(servers, headers, len(pool) // 2, cell.clients, route)
        await asyncio.sleep(0.5)  # let the connection heartbeats pass
        run_headers = {"Authorization": f"Bearer {persona['token']}", "Content-Type": "application/json"}
        for n in range(rounds + 1):
            recording = n > 0  # the first round warms up
            inbox.arm(cell.clients, recording)
            body = {"message": send_email_lines(1), "sessionId": f"{cell.layer}-{cell.servers}-{cell.clients}-{n}"}
            status, text = await http.request("POST", "/api/agents/mailer/runs", json.dumps(body).encode(), run_headers)
            if status != 200:
                raise RuntimeError(f"run API answered {status}: {text[:300]!r}")
            await wait_all(inbox, pool, "inbox push")
            bare.arm(cell.clients, recording)
            # The bare message is as long as the inbox one (its filler makes up the rest).
            status, _ = await http.request("POST", f"/bench/broadcast?size={max(1, inbox.size - 60)}")
            await wait_all(bare, pool, "bare broadcast")
    finally:
        await http.close()
    cell.inbox, cell.bare = inbox.latencies, bare.latencies
    cell.seconds = time.perf_counter() - started


def rounds_for(clients: int, args: argparse.Namespace) -> int:
    """Enough rounds for a p99 that is not just the slowest sample, within the time a round of N takes."""
    if clients < 10:
        return args.rounds_small
    return args.rounds if clients < 500 else args.rounds_large


def render_cost(rounds: int = 50) -> float:
    """Median time to render one push's fragments (both role variants), in ms (in this process)."""
    from approvals.models import PendingRequest
    from approvals.push import render_request

    request = PendingRequest.objects.select_related("agent", "run__version", "session").first()
    assert request is not None
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        render_request(request, can_answer=True) + render_request(request, can_answer=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def ms(values: list[float], p: float | None = None) -> float:
    return (median(values) if p is None else percentile(values, p)) * 1000


def report(cells: list[Cell], args: argparse.Namespace, database: str, render_ms: float, seconds: float) -> None:
    command = (
        f"push_latency.py --clients {args.clients} --rounds {args.rounds} --rounds-large {args.rounds_large} "
        f"--rounds-small {args.rounds_small}"
    )
    print("### Inbox push latency (b): request opened -> card received, against a bare group_send\n")
    print(
        f"`{command}`: {database} (one database shared by the daphnes); in-memory layer, or Redis at "
        f"`{REDIS_DB}` (channels_redis); each cell pools the latencies of every socket over its rounds "
        f"({args.rounds}; {args.rounds_small} below 10 clients, {args.rounds_large} from 500; after one warm-up "
        f"round), inbox push and bare "
        f"broadcast alternating in the same run, N inbox and N bare sockets connected throughout; "
        f"{python_line()}; {seconds:.0f} s.\n"
    )
    print("| layer | daphnes | clients | inbox p50 ms | inbox p99 ms | bare p50 ms | bare p99 ms | p50 x | p99 x |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        i50, i99, b50, b99 = ms(c.inbox), ms(c.inbox, 99), ms(c.bare), ms(c.bare, 99)
        print(
            f"| {c.layer} | {c.servers} | {c.clients} | {i50:.1f} | {i99:.1f} | {b50:.1f} | {b99:.1f} "
            f"| {i50 / b50:.2f} | {i99 / b99:.2f} |"
        )
    print(f"\nRendering one push's fragments (both role variants, once per push): {render_ms:.2f} ms.\n")
    single = [c for c in cells if c.servers == 1]
    misses = [
        f"{c.layer} N={c.clients} ({ms(c.inbox) / ms(c.bare):.2f}x / {ms(c.inbox, 99) / ms(c.bare, 99):.2f}x)"
        for c in single
        if ms(c.inbox) > 1.2 * ms(c.bare) or ms(c.inbox, 99) > 1.2 * ms(c.bare, 99)
    ]
    if single:
        detail = f"over at {', '.join(misses)}" if misses else "every cell within"
        target = "Target: one daphne, inbox within 1.2x of bare at every N (p50 and p99)"
        print(f"{target} — {verdict(not misses)} ({detail})")
    top = max(c.clients for c in cells)
    two = next((c for c in cells if c.servers == 2 and c.clients == top), None)
    one = next((c for c in cells if c.servers == 1 and c.layer == "Redis" and c.clients == top), None)
    if two and one and top >= 1000:
        ratio = ms(two.inbox, 99) / ms(one.bare, 99)
        print(
            f"Target: {top} clients, inbox p99 on two daphnes at most 0.6x the one-daphne bare p99 (Redis): "
            f"{ms(two.inbox, 99):.1f} / {ms(one.bare, 99):.1f} ms = {ratio:.2f}x — {verdict(ratio <= 0.6)}"
        )
        memory = next((c for c in cells if c.servers == 1 and c.layer == "in-memory" and c.clients == top), None)
        if memory:
            print(
                f"(Against the in-memory one-daphne bare p99, {ms(memory.bare, 99):.1f} ms: "
                f"{ms(two.inbox, 99) / ms(memory.bare, 99):.2f}x.)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,50,200,1000")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--rounds-large", type=int, default=8, help="rounds at 500 clients and more")
    parser.add_argument("--rounds-small", type=int, default=500, help="rounds below 10 clients")
    parser.add_argument("--shapes", default="memory,redis,redis2", help="any of memory, redis, redis2")
    parser.add_argument("--database-url", default=None, help="shared database (default: a temporary SQLite file)")
    args = parser.parse_args()
    raise_nofile()
    started = time.perf_counter()
    cells: list[Cell] = []

    def shape_env(shape: str) -> dict[str, str]:
        layer = SHAPES[shape][0]
        return bench_env(data, database_url=args.database_url, redis_url=REDIS_DB if layer == "Redis" else None)

    async def shape_cells(shape: str, servers: list[Daphne]) -> None:
        layer, count = SHAPES[shape]
        pool: list[RawWebSocket] = []
        route = Route()
        try:
            for clients in [int(c) for c in args.clients.split(",")]:
                cell = Cell(layer, count, clients)
                await measure(servers, persona, cell, rounds_for(clients, args), pool, route)
                print(f"  {layer} x{count} N={clients}: {cell.seconds:.1f} s", file=sys.stderr)
                cells.append(cell)
        finally:
            await close_all(pool)

    with scratch_dir("airlock-push-bench-") as data, contextlib.ExitStack() as stack:
        env = bench_env(data, database_url=args.database_url)
        shapes = args.shapes.split(",")
        # Every shape's consoles start at once, while this process sets Django up and seeds (see daphnes_starting);
        # a shape's wait, idle, until its turn, and stop when it is done (their connections' ends are work).
        starting = [
            stack.enter_context(daphnes_starting(shape_env(shape), SHAPES[shape][1], app="bench.push_asgi:application"))
            for shape in shapes
        ]
        setup_django(env)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        seeded = seed_operator("bench", {"mailer": MAILER})
        persona = {"token": seeded["token"], "session": seeded["session"]}
        database = database_label()
        servers = [ready() for ready in starting]
        for shape, shape_servers in zip(shapes, servers, strict=True):
            if SHAPES[shape][0] == "Redis":
                flush_redis(REDIS_DB)  # what an earlier shape left there
            asyncio.run(shape_cells(shape, shape_servers))
            for server in shape_servers:
                server.stop()
        render_ms = render_cost()
        from django.db import connections

        connections.close_all()
    report(cells, args, database, render_ms, time.perf_counter() - started)


if __name__ == "__main__":
    main()
