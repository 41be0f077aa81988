"""(h) Session stream delivery: a 2,000-delta reply reaches N readers of `GET /api/sessions/{id}/events` (SSE).

One daphne, in-memory channel layer, a temporary SQLite file. For each N, N clients follow a session's stream
(from after its first turn, `Last-Event-ID`), then a run of the session starts with SSE and the scripted model
streams a reply of 2,000 words (one delta each); every delta is published to the session's group
(agents.live) and each stream writes it to its client. The floor: the same number of deltas, sent on the
schedule the reply kept, through a bare Channels group to N bare SSE responses (bench/stream_asgi.py).
Latency per delta: receive time minus the envelope's `timestamp` (set as the delta was emitted), this
machine's clock on both sides. Clients are minimal asyncio readers that parse only the timestamp.

At N = 1 the sides alternate over 5 rounds (one reader's figures move by tens of percent between replies) and
each figure is the median of the rounds'.

Target: at N = 1 and N = 100, the session stream's p50 and p99 per-delta latency within 1.3x of the bare
stream's.

Usage: .venv/bin/python bench/session_stream.py [--clients 1,100] [--words 2000]
"""

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    bench_env,
    daphnes_starting,
    database_label,
    median,
    percentile,
    python_line,
    raise_nofile,
    scratch_dir,
    seed_operator,
    setup_django,
    verdict,
)

TARGET = 1.3
DELTA = b'"type": "assistant.message_delta"'
STAMP = b'"timestamp": "'


@dataclass
class Sink:
    """The per-delta latencies of every client of one measurement, and how many deltas each got."""

    expected: int = 0
    latencies: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    stamps: list[float] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def finished(self, clients: int) -> bool:
        return len(self.counts) == clients and all(count >= self.expected for count in self.counts)


async def follow(port: int, path: str, headers: dict[str, str], sink: Sink, index: int, opened: asyncio.Event) -> None:
    """Read server-sent events from `path`, noting each delta's latency, until cancelled."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Accept: text/event-stream"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await reader.readuntil(b"\r\n\r\n")
    opened.set()
    buffer = b""
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            now = time.time()
            buffer += chunk
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                if DELTA not in frame:
                    continue
                start = frame.index(STAMP) + len(STAMP)
                stamp = datetime.fromisoformat(frame[start : frame.index(b'"', start)].decode()).timestamp()
                sink.latencies.append(now - stamp)
                sink.counts[index] += 1
                if sink.finished(len(sink.counts)):
                    sink.done.set()
    finally:
        writer.close()


async def clients(port: int, path: str, headers: dict[str, str], sink: Sink, count: int) -> list[asyncio.Task[None]]:
    sink.counts = [0] * count
    opened = [asyncio.Event() for _ in range(count)]
    tasks = [asyncio.create_task(follow(port, path, headers, sink, i, opened[i])) for i in range(count)]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in opened)), 60)
    # Each stream subscribed to its group before its headers went out; then it reads the database once (a
    # session stream) before it listens. One stream does that in milliseconds; a hundred queue for the
    # database's threads, so they get the second they always had.
    await asyncio.sleep(0.25 if count == 1 else 1.0)
    return tasks


async def post(port: int, path: str, body: dict, headers: dict[str, str]) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode()
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(data)}"]
    lines += ["Content-Type: application/json", "Connection: close"] + [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    response = await reader.read()
    writer.close()
    return response


async def measure_session(port: int, token: str, n: int, words: int) -> tuple[Sink, list[float]]:
    auth = {"Authorization": f"Bearer {token}"}
    key = f"bench-{n}-{time.monotonic_ns()}"
    first = await post(port, "/api/agents/streamer/runs", {"message": "hello", "sessionId": key}, auth)
    assert b'"completed"' in first, first[-300:]
    sink = Sink()
    # From after the first turn (run 0): its events are not the measurement.
    history = await post_get(port, f"/api/sessions/{key}/events", auth)
    cursor = f"0.{len(json.loads(history)['items'])}"
    tasks = await clients(port, f"/api/sessions/{key}/events", {**auth, "Last-Event-ID": cursor}, sink, n)
    message = " ".join(["word"] * words)
    streamed = await post(
        port,
        "/api/agents/streamer/runs",
        {"message": message, "sessionId": key},
        {**auth, "Accept": "text/event-stream"},
    )
    stamps = []
    for frame in streamed.split(b"\n\n"):
        if DELTA in frame:
            start = frame.index(STAMP) + len(STAMP)
            stamps.append(datetime.fromisoformat(frame[start : frame.index(b'"', start)].decode()).timestamp())
    sink.expected = len(stamps)
    if sink.finished(n):
        sink.done.set()
    try:
        await asyncio.wait_for(sink.done.wait(), 120)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return sink, [stamp - stamps[0] for stamp in stamps]


async def post_get(port: int, path: str, headers: dict[str, str]) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        decoded, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            decoded, rest = decoded + rest[:size], rest[size + 2 :]
        return decoded
    return body


async def measure_bare(port: int, n: int, offsets: list[float]) -> Sink:
    sink = Sink(expected=len(offsets))
    tasks = await clients(port, "/bench/sse/", {}, sink, n)
    await post(port, "/bench/sse-send", {"offsets": offsets}, {})
    try:
        await asyncio.wait_for(sink.done.wait(), 120)
    finally:
        await post(port, "/bench/sse-send", {"offsets": []}, {})
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return sink


# One reader's figures move by tens of percent from one reply to the next on these machines: at N = 1 the sides
# alternate over several rounds and each figure is the median of the rounds'.
ROUNDS = {1: 5}


@dataclass
class Row:
    clients: int
    deltas: int
    session: list[list[float]]  # per round, the latencies of every delta to every reader
    bare: list[list[float]]
    reply_seconds: float

    def figure(self, side: list[list[float]], point: float) -> float:
        """The median over the rounds of each round's `point` percentile, in ms."""
        return median([percentile(latencies, point) for latencies in side]) * 1000


def report(rows: list[Row], database: str, seconds: float) -> None:
    print("### Session stream: a 2,000-delta reply to N SSE readers\n")
    print(f"One daphne, in-memory channel layer, {database}; {python_line()}. Per-delta latency (receive time minus")
    print("the delta's emit time), all clients pooled; the floor is a bare Channels group fanning the same number")
    print("of deltas, on the reply's own schedule, to bare SSE responses. Where rounds > 1 the sides alternated and")
    print("each figure is the median of the rounds' figures.\n")
    print(
        "| N | rounds | deltas | reply streamed in | session p50 | bare p50 | ratio | session p99 | bare p99 | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    met = True
    for row in rows:
        s50, b50 = row.figure(row.session, 50), row.figure(row.bare, 50)
        s99, b99 = row.figure(row.session, 99), row.figure(row.bare, 99)
        r50, r99 = s50 / b50 if b50 else float("inf"), s99 / b99 if b99 else float("inf")
        met = met and r50 <= TARGET and r99 <= TARGET
        print(
            f"| {row.clients} | {len(row.session)} | {row.deltas} | {row.reply_seconds:.2f} s"
            f" | {s50:.2f} ms | {b50:.2f} ms | {r50:.2f}x | {s99:.2f} ms | {b99:.2f} ms | {r99:.2f}x |"
        )
    print(f"\nTarget: p50 and p99 within {TARGET}x of the bare stream at every N: {verdict(met)}.")
    print(f"\n({seconds:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,100")
    parser.add_argument("--words", type=int, default=2000)
    args = parser.parse_args()
    raise_nofile()
    started = time.perf_counter()
    with scratch_dir("airlock-stream-bench-") as data:
        env = bench_env(data)
        # The console starts while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(env, 1, app="bench.stream_asgi:application") as ready:
            setup_django(env)
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            seeded = seed_operator("bench", {"streamer": {"name": "streamer"}})
            database = database_label()
            rows = []
            [server] = ready()
            for n in [int(c) for c in args.clients.split(",")]:
                row = Row(n, 0, [], [], 0.0)
                for _ in range(ROUNDS.get(n, 1)):
                    session, offsets = asyncio.run(measure_session(server.port, seeded["token"], n, args.words))
                    bare = asyncio.run(measure_bare(server.port, n, offsets))
                    row.session.append(session.latencies)
                    row.bare.append(bare.latencies)
                    row.deltas, row.reply_seconds = session.expected, offsets[-1]
                rows.append(row)
                print(f"  N={n}: {row.deltas} deltas, {len(row.session)} rounds", file=sys.stderr)
        from django.db import connections

        connections.close_all()
    report(rows, database, time.perf_counter() - started)


if __name__ == "__main__":
    main()
