"""The peer a user would pick: the same approval-gated one-tool turn on Airlock and on LangGraph, same PostgreSQL.

The turn: a message asks for `get_time`, a person approves the call, the tool runs, the turn ends with its
result. Each side has a fresh database of its own on the PostgreSQL at 127.0.0.1:5432.

- LangGraph, in this process: a StateGraph model → tool → answer whose tool node calls `interrupt()` before
  the tool, checkpointed by `PostgresSaver` on a psycopg pool (autocommit, dict rows, no prepared statements,
  as its docs ask) with `durability="sync"` (each step's checkpoint is written before the next step runs, as
  Airlock commits each step). The person's answer is `Command(resume=True)`.
- Airlock, served as `make run` serves it (`manage.py serve`: daphne with the in-process worker threads), over
  loopback HTTP with an API token: the run starts queued (`Prefer: respond-async`, the scripted model's
  `call get_time` on an agent whose get_time asks approval), the client follows the session's stream
  (`GET /api/sessions/{id}/events`, SSE, opened on the 202; it replays the session from its start, so nothing
  is missed) to `run.awaiting`, answers with `POST /api/runs/{id}/responses`, and reads the same stream to the
  continuation's `run.completed`.

Measured at 1 and at 8 concurrent clients (asyncio tasks for Airlock, threads for LangGraph), the sides
alternating in blocks: start→waiting and approve→done p50/p99, conversations per second (start, approve,
done), CPU per conversation of each side's own process (Airlock's server from /proc, its worker threads
included; LangGraph's this process's, which runs nothing else during its blocks; PostgreSQL's backends on
neither side), and what each side stores per conversation (rows and pg_total_relation_size, deltas of its database
over the measured conversations). Statements per conversation: LangGraph's counted by a psycopg cursor that
counts its executes; Airlock's server is another process and this PostgreSQL has no pg_stat_statements, so
they are counted in this process apart (Django's CaptureQueriesContext) for the same steps: the start request,
the worker's first turn, the answer, the worker's continuation.

Targets (issue 56): approve→done p50 at most 4x LangGraph's at 1 client and 5x at 8; start→waiting p50 at most
3x at both; conversations/s at least 0.3x LangGraph's at 1 client and 0.25x at 8; CPU per conversation at most 3x
LangGraph's at 1 client.

Usage: .venv/bin/python bench/peer_langgraph.py [--rounds 3] [--per-client 10,4] [--long]
"""

import argparse
import asyncio
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    ROOT,
    Daphne,
    HttpConnection,
    bench_env,
    database_label,
    free_port,
    median,
    percentile,
    pg_database,
    python_line,
    scratch_dir,
    seed_operator,
    setup_django,
    verdict,
)
from bench.idle_streams import cpu_seconds

AIRLOCK_DB = "airlock_bench_peer"
LANGGRAPH_DB = "airlock_bench_peer_lg"
CLIENTS = (1, 8)
# Issue 56's targets, Airlock's against LangGraph's at each client count: p50 ratios at most, rate ratio at least.
DONE_TARGET = {1: 4.0, 8: 5.0}
WAIT_TARGET = {1: 3.0, 8: 3.0}
RATE_TARGET = {1: 0.3, 8: 0.25}
CPU_TARGET = 3.0  # CPU per conversation at 1 client
AGENT = {"name": "clock", "tools": [{"name": "get_time", "approval": "always"}]}
MESSAGE = "call get_time"
STATEMENT_CONVERSATIONS = 3  # counted per step, after a first one that warms the caches
REQUEST_ID = re.compile(rb'"requestId": "([^"]+)"')


@dataclass
class Block:
    """One side's conversations of one block: (start→waiting, approve→done) each, and the block's wall time."""

    waits: list[float] = field(default_factory=list)
    dones: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu: float = 0.0  # seconds of CPU of the side's own process over the block
    # Airlock only: how long its start (202) and answer (200) requests took, parts of `waits` and `dones`.
    start_requests: list[float] = field(default_factory=list)
    answer_requests: list[float] = field(default_factory=list)

    def rate(self) -> float:
        return len(self.dones) / self.seconds


# --- LangGraph -----------------------------------------------------------------------------------


class Turn(TypedDict, total=False):
    message: str
    tool: str
    result: str
    output: str


def langgraph_side(url: str) -> tuple[Callable[[str], float], Callable[[str], float], Callable[[], int], Any]:
    """The compiled graph on a PostgresSaver; returns start(thread), resume(thread), statements() and the pool."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    from agents.server_tools import get_time

    counted = [0]
    lock = threading.Lock()

    class CountingCursor(psycopg.Cursor):  # type: ignore[type-arg]
        """Every statement the checkpointer sends (executemany: one per parameter set)."""

        def execute(self, *args: Any, **kwargs: Any) -> Any:
            with lock:
                counted[0] += 1
            return super().execute(*args, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            params_seq = list(params_seq)
            with lock:
                counted[0] += len(params_seq)
            return super().executemany(query, params_seq, **kwargs)

    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "cursor_factory": CountingCursor}
    pool = ConnectionPool(url, min_size=max(CLIENTS), max_size=max(CLIENTS), kwargs=kwargs, open=True)
    saver = PostgresSaver(pool)  # type: ignore[arg-type]
    saver.setup()

    def model(state: Turn) -> Turn:
        # The scripted model's first answer: `call TOOL` is a call to TOOL.
        return {"tool": state["message"].split()[1]}

    def tool(state: Turn) -> Turn:
        approved = interrupt({"tool": state["tool"], "arguments": {}})
        return {"result": get_time() if approved else "denied"}

    def answer(state: Turn) -> Turn:
        return {"output": f"{state['tool']}: {state['result']}"}

    graph = StateGraph(Turn)
    graph.add_node("model", model)
    graph.add_node("tool", tool)
    graph.add_node("answer", answer)
    graph.add_edge(START, "model")
    graph.add_edge("model", "tool")
    graph.add_edge("tool", "answer")
    graph.add_edge("answer", END)
    app = graph.compile(checkpointer=saver)

    def start(thread: str) -> float:
        began = time.perf_counter()
        state = app.invoke({"message": MESSAGE}, {"configurable": {"thread_id": thread}}, durability="sync")
        elapsed = time.perf_counter() - began
        assert "__interrupt__" in state, state
        return elapsed

    def resume(thread: str) -> float:
        began = time.perf_counter()
        state = app.invoke(Command(resume=True), {"configurable": {"thread_id": thread}}, durability="sync")
        elapsed = time.perf_counter() - began
        assert state["output"].startswith("get_time: 20"), state
        return elapsed

    return start, resume, lambda: counted[0], pool


def langgraph_block(start: Callable[[str], float], resume: Callable[[str], float], clients: int, each: int) -> Block:
    block = Block()

    def client() -> None:
        for _ in range(each):
            thread = uuid.uuid4().hex
            block.waits.append(start(thread))
            block.dones.append(resume(thread))

    began, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(clients) as threads:
        for future in [threads.submit(client) for _ in range(clients)]:
            future.result()
    block.seconds, block.cpu = time.perf_counter() - began, time.process_time() - cpu
    return block


# --- Airlock -------------------------------------------------------------------------------------


class Served(Daphne):
    """The console as `make run` serves it: `manage.py serve` (daphne, its worker threads and keeper)."""

    def __init__(self, env: dict[str, str], log_dir: Path, python_args: Sequence[str] = ()) -> None:
        """`python_args`: what the Python command takes before `manage.py` (bench/served_calls.py's counter)."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ws_base = f"ws://127.0.0.1:{self.port}"
        self.log = log_dir / f"serve-{self.port}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, *python_args, "manage.py", "serve", "--port", str(self.port)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )


class SessionStream:
    """A session's SSE stream, read frame by frame (chunked transfer decoded)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.body = reader, writer, b""

    @classmethod
    async def open(cls, port: int, session: str, headers: dict[str, str]) -> "SessionStream":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        lines = [f"GET /api/sessions/{session}/events HTTP/1.1", f"Host: 127.0.0.1:{port}"]
        lines += ["Accept: text/event-stream", *(f"{k}: {v}" for k, v in headers.items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = await reader.readuntil(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0] and b"chunked" in head.lower(), head
        return cls(reader, writer)

    async def until(self, event: bytes) -> bytes:
        """Read up to the frame of type `event`; returns everything read up to the end of that frame."""
        marker, seen = b"event: " + event + b"\n", b""
        while True:
            end = self.body.find(b"\n\n", self.body.find(marker)) if marker in self.body else -1
            if end >= 0:
                seen, self.body = seen + self.body[: end + 2], self.body[end + 2 :]
                return seen
            size = int((await self.reader.readuntil(b"\r\n"))[:-2], 16)
            self.body += (await self.reader.readexactly(size + 2))[:-2]

    def close(self) -> None:
        self.writer.close()


async def airlock_conversation(port: int, connection: HttpConnection, token: str, block: Block) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    session = uuid.uuid4().hex
    body = json.dumps({"message": MESSAGE, "sessionId": session}).encode()
    began = time.perf_counter()
    queued = {**auth, "Content-Type": "application/json", "Prefer": "respond-async"}
    status, data = await connection.request("POST", "/api/agents/clock/runs", body, queued)
    assert status == 202, data
    block.start_requests.append(time.perf_counter() - began)
    run_id = json.loads(data)["runId"]
    stream = await SessionStream.open(port, session, auth)
    try:
        asked = await stream.until(b"run.awaiting")
        waiting = time.perf_counter()
        found = REQUEST_ID.search(asked[asked.index(b"event: permission.requested") :])
        assert found, asked[-500:]
        answer = json.dumps({"requestId": found.group(1).decode(), "approved": True}).encode()
        status, data = await connection.request(
            "POST", f"/api/runs/{run_id}/responses", answer, {**auth, "Content-Type": "application/json"}
        )
        assert status == 200 and json.loads(data)["status"] == "accepted", data
        block.answer_requests.append(time.perf_counter() - waiting)
        completed = await stream.until(b"run.completed")
        done = time.perf_counter()
        assert b"get_time: 20" in completed, completed[-500:]
    finally:
        stream.close()
    block.waits.append(waiting - began)
    block.dones.append(done - waiting)


async def airlock_block(server: Daphne, token: str, clients: int, each: int) -> Block:
    block = Block()

    async def client(connection: HttpConnection) -> None:
        try:
            for _ in range(each):
                await airlock_conversation(server.port, connection, token, block)
        finally:
            await connection.close()

    connections = [HttpConnection(server.port) for _ in range(clients)]
    began, cpu = time.perf_counter(), cpu_seconds(server.pid)
    await asyncio.gather(*(client(connection) for connection in connections))
    block.seconds, block.cpu = time.perf_counter() - began, cpu_seconds(server.pid) - cpu
    return block


def airlock_statements(token: str) -> dict[str, float]:
    """Airlock's statements per conversation, counted in this process for each step (before the server starts,
    so no worker of it takes the queued runs)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from agents.claiming import drain

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    steps = {"start request": 0, "first turn (worker)": 0, "answer request": 0, "continuation (worker)": 0}

    def counted(step: str, call: Callable[[], Any]) -> Any:
        with CaptureQueriesContext(connection) as queries:
            result = call()
        steps[step] += len(queries)
        return result

    for n in range(STATEMENT_CONVERSATIONS + 1):
        if n == 1:  # the first conversation warmed the caches: count from the second
            steps = dict.fromkeys(steps, 0)
        session = uuid.uuid4().hex
        body = json.dumps({"message": MESSAGE, "sessionId": session})
        started = counted(
            "start request",
            lambda body=body: client.post(
                "/api/agents/clock/runs", body, content_type="application/json", HTTP_PREFER="respond-async"
            ),
        )
        assert started.status_code == 202, started.content
        assert counted("first turn (worker)", drain) == 1
        run = client.get(f"/api/runs/{started.json()['runId']}").json()
        assert run["status"] == "awaiting_approval", run
        answer = json.dumps({"requestId": run["pendingRequests"][0]["requestId"], "approved": True})
        answered = counted(
            "answer request",
            lambda run=run, answer=answer: client.post(
                f"/api/runs/{run['runId']}/responses", answer, content_type="application/json"
            ),
        )
        assert answered.json()["status"] == "accepted", answered.content
        assert counted("continuation (worker)", drain) == 1
    return {step: count / STATEMENT_CONVERSATIONS for step, count in steps.items()}


# --- storage -------------------------------------------------------------------------------------


def stored(url: str) -> tuple[int, int]:
    """Rows and bytes (pg_total_relation_size: heap, indexes, TOAST) of every table of the database at `url`."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT quote_ident(schemaname) || '.' || quote_ident(relname) FROM pg_stat_user_tables"
            )
        ]
        rows = size = 0
        for name in tables:
            (count,) = conn.execute(f"SELECT count(*) FROM {name}").fetchone() or (0,)
            (total,) = conn.execute("SELECT pg_total_relation_size(%s::regclass)", [name]).fetchone() or (0,)
            rows, size = rows + count, size + total
    return rows, size


# --- report --------------------------------------------------------------------------------------


@dataclass
class Side:
    blocks: dict[int, list[Block]] = field(default_factory=lambda: {n: [] for n in CLIENTS})
    conversations: int = 0
    rows: int = 0
    size: int = 0

    def pooled(self, clients: int, which: str) -> list[float]:
        return [value for block in self.blocks[clients] for value in getattr(block, which)]

    def p(self, clients: int, which: str, point: float) -> float:
        return percentile(self.pooled(clients, which), point) * 1000

    def rate(self, clients: int) -> float:
        """Conversations per second: the median of the blocks'."""
        return median([block.rate() for block in self.blocks[clients]])

    def cpu(self, clients: int) -> float:
        """CPU per conversation in ms, over all of the blocks."""
        blocks = self.blocks[clients]
        return sum(block.cpu for block in blocks) / sum(len(block.dones) for block in blocks) * 1000


def report(
    airlock: Side,
    langgraph: Side,
    statements: tuple[dict[str, float], dict[str, float]],
    rounds: int,
    database: str,
    seconds: float,
) -> None:
    print("### The peer: Airlock against LangGraph with its PostgreSQL checkpointer\n")
    print(
        f"{database}, a fresh database for each side; {python_line()}. The same turn with an approval before the "
        'tool: LangGraph (`interrupt()` in the tool node, `PostgresSaver` on a psycopg pool, `durability="sync"`, '
        "`Command(resume=True)`) in this process; Airlock served by `manage.py serve` as `make run` serves it, over "
        "loopback HTTP (queued start, the session's SSE stream followed to `run.awaiting`, the answer posted to "
        f"`/api/runs/{{id}}/responses`, the stream read to `run.completed`). {rounds} rounds of alternating blocks "
        "at each client count; latencies pooled over the rounds, conversations/s the median of the blocks'.\n"
    )
    print(
        "| clients | side | conversations | start→waiting p50 | p99 | approve→done p50 | p99 | conversations/s "
        "| CPU per conversation |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = {}
    for n in CLIENTS:
        for name, side in (("LangGraph", langgraph), ("Airlock", airlock)):
            print(
                f"| {n} | {name} | {len(side.pooled(n, 'dones'))} | {side.p(n, 'waits', 50):.1f} ms"
                f" | {side.p(n, 'waits', 99):.1f} ms | {side.p(n, 'dones', 50):.1f} ms"
                f" | {side.p(n, 'dones', 99):.1f} ms | {side.rate(n):.1f} | {side.cpu(n):.1f} ms |"
            )
        ratios[n] = (
            airlock.p(n, "waits", 50) / langgraph.p(n, "waits", 50),
            airlock.p(n, "dones", 50) / langgraph.p(n, "dones", 50),
            airlock.rate(n) / langgraph.rate(n),
            airlock.cpu(n) / langgraph.cpu(n),
        )
    print("\n| clients | start→waiting p50, Airlock / LangGraph | approve→done p50 | conversations/s | CPU |")
    print("|---|---|---|---|---|")
    for n, (wait, done, rate, cpu) in ratios.items():
        print(f"| {n} | {wait:.1f}x | {done:.1f}x | {rate:.2f}x | {cpu:.1f}x |")
    parts = [
        f"at {n} client{'s' if n > 1 else ''} the start request {airlock.p(n, 'start_requests', 50):.1f} ms and the "
        f"answer request {airlock.p(n, 'answer_requests', 50):.1f} ms"
        for n in CLIENTS
    ]
    print(f"\nOf Airlock's figures, its own requests (p50): {'; '.join(parts)}; the rest is the worker's turn, the")
    print("continuation's wait for a worker and the session stream (opened on the 202, read to the events).")
    airlock_statements, langgraph_statements = statements
    print("\nPer conversation, what each side stores (deltas of its database over its measured conversations) and")
    print("the statements it issues (Airlock's counted in process with CaptureQueriesContext, step by step;")
    print("LangGraph's by a counting psycopg cursor):\n")
    print("| side | rows | bytes (tables, indexes, TOAST) | statements |")
    print("|---|---|---|---|")
    sides = (("LangGraph", langgraph, langgraph_statements), ("Airlock", airlock, airlock_statements))
    for name, side, counts in sides:
        steps = " + ".join(f"{count:.0f} {step}" for step, count in counts.items())
        print(
            f"| {name} | {side.rows / side.conversations:.1f} | {side.size / side.conversations / 1024:.1f} KiB"
            f" | {sum(counts.values()):.0f} ({steps}) |"
        )
    print()
    for n, (wait, done, rate, _) in ratios.items():
        at = f"at {n} client{'s' if n > 1 else ''}"
        print(
            f"Target (issue 56): approve→done p50 {at} at most {DONE_TARGET[n]:g}x LangGraph's — {done:.1f}x: "
            f"{verdict(done <= DONE_TARGET[n])}."
        )
        print(
            f"Target (issue 56): start→waiting p50 {at} at most {WAIT_TARGET[n]:g}x LangGraph's — {wait:.1f}x: "
            f"{verdict(wait <= WAIT_TARGET[n])}."
        )
        print(
            f"Target (issue 56): conversations/s {at} at least {RATE_TARGET[n]:g}x LangGraph's — {rate:.2f}x: "
            f"{verdict(rate >= RATE_TARGET[n])}."
        )
    cpu = ratios[1][3]
    print(
        f"Target (issue 56): CPU per conversation at 1 client at most {CPU_TARGET:g}x LangGraph's — "
        f"{airlock.cpu(1):.1f} against {langgraph.cpu(1):.1f} ms, {cpu:.1f}x: {verdict(cpu <= CPU_TARGET)}."
    )
    print(f"\n({seconds:.0f} s)")


def langgraph_statements(
    start: Callable[[str], float], resume: Callable[[str], float], sent: Callable[[], int]
) -> dict[str, float]:
    """LangGraph's statements per conversation, by step (after a warm-up block)."""
    steps = {"start": 0.0, "resume": 0.0}
    for _ in range(STATEMENT_CONVERSATIONS):
        thread = uuid.uuid4().hex
        for step, call in (("start", start), ("resume", resume)):
            before = sent()
            call(thread)
            steps[step] += (sent() - before) / STATEMENT_CONVERSATIONS
    return steps


def alternate(
    airlock: Side,
    langgraph: Side,
    server: Daphne,
    token: str,
    graph: tuple[Any, Any],
    rounds: int,
    each: dict[int, int],
    began: float,
) -> None:
    """The measured blocks: at each client count, `rounds` rounds of one block of each side, which side goes first
    alternating so that a trend in the machine's load weighs on both."""
    for n in CLIENTS:
        for r in range(rounds):
            for name in ("langgraph", "airlock") if r % 2 == 0 else ("airlock", "langgraph"):
                if name == "langgraph":
                    langgraph.blocks[n].append(langgraph_block(*graph, n, each[n]))
                else:
                    airlock.blocks[n].append(asyncio.run(airlock_block(server, token, n, each[n])))
            print(f"  {n} clients, round {r + 1}/{rounds}: {time.perf_counter() - began:.0f} s", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-client", default="10,4", help="conversations per client in a block, at 1 and 8")
    parser.add_argument("--long", action="store_true", help="5 rounds of blocks four times as long")
    args = parser.parse_args()
    rounds = 5 if args.long else args.rounds
    each = dict(zip(CLIENTS, [int(v) * (4 if args.long else 1) for v in args.per_client.split(",")], strict=True))
    began = time.perf_counter()
    airlock, langgraph = Side(), Side()
    with scratch_dir("airlock-peer-bench-") as data:
        airlock_url = pg_database(AIRLOCK_DB, fresh=True)
        langgraph_url = pg_database(LANGGRAPH_DB, fresh=True)
        env = bench_env(data, database_url=airlock_url)
        setup_django(env)
        from django.core.management import call_command
        from django.db import connections

        call_command("migrate", verbosity=0)
        token = seed_operator("bench", {"clock": AGENT})["token"]
        database = database_label()
        airlock_steps = airlock_statements(token)
        connections.close_all()
        print(f"  Airlock migrated, its statements counted: {time.perf_counter() - began:.0f} s", file=sys.stderr)
        # The server starts while LangGraph warms up (not before: its workers would take the counted runs).
        server = Served(env, data)
        start, resume, sent, pool = langgraph_side(langgraph_url)
        try:
            langgraph_block(start, resume, 1, 10)  # imports, caches, the pool's connections
            langgraph_steps = langgraph_statements(start, resume, sent)
            server.wait_ready()
            asyncio.run(airlock_block(server, token, 1, 3))  # imports, caches, the pool's connections
            print(f"  both warm: {time.perf_counter() - began:.0f} s", file=sys.stderr)
            marks = {"airlock": stored(airlock_url), "langgraph": stored(langgraph_url)}
            alternate(airlock, langgraph, server, token, (start, resume), rounds, each, began)
            for name, side, url in (("airlock", airlock, airlock_url), ("langgraph", langgraph, langgraph_url)):
                rows, size = stored(url)
                side.conversations = sum(len(side.pooled(n, "dones")) for n in CLIENTS)
                side.rows, side.size = rows - marks[name][0], size - marks[name][1]
        except BaseException:
            print(f"--- serve log (last lines) ---\n{server.log_tail()}", file=sys.stderr)
            raise
        finally:
            server.stop()
            pool.close()
    report(airlock, langgraph, (airlock_steps, langgraph_steps), rounds, database, time.perf_counter() - began)


if __name__ == "__main__":
    main()
