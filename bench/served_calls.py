"""Python calls per served conversation: a count that does not move with the machine (issue 56).

The CPU a conversation costs moves by a quarter from one run to the next on these machines (the same code gave 46 and
58 ms within minutes), and so does a calibration loop run beside it: two changes of 5 % cannot be told apart by time.
What the interpreter does can be counted: the console is served as `make run` serves it (`manage.py serve`, its
worker threads), but started under `sys.monitoring` with a count of every Python function that starts (PY_START), by
thread (worker, request, daphne's main thread, other) and by function. The same conversations as peer_langgraph.py's
(a queued start, the session's SSE stream to `run.awaiting`, the answer, the stream to `run.completed`) are run at one
client; the counts of the measured ones, divided by their number, are printed: in all, by thread, by package, and
the functions called most. Two runs of the same code agree within about 1 %.

A call is not a unit of time: work in C (a syscall, json, psycopg's binary parts, a thread's start) is not counted,
and the monitoring slows the server several times over. It tells where Python's own work goes, and whether a change
removed some; the seconds are peer_langgraph.py's.

Usage: .venv/bin/python bench/served_calls.py [--conversations 50] [--top 40] [--json FILE]
"""

import argparse
import asyncio
import collections
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_env, pg_database, scratch_dir, seed_operator, setup_django
from bench.peer_langgraph import AGENT, Served, airlock_block

# Run inside the served process: `python -c COUNTER <counts file> manage.py serve ...`. SIGUSR1 writes the counts.
COUNTER = """
import collections, json, os, runpy, signal, sys, threading
counts = {}  # not a Counter: its __missing__ would be counted too
def kind(name):
    if name.startswith("airlock-worker"):
        return "worker"
    if name.startswith("request"):
        return "request"
    return "main" if name == "MainThread" else "other"
def started(code, offset):
    key = (kind(threading.current_thread().name), code)
    counts[key] = counts.get(key, 0) + 1
monitoring = sys.monitoring
monitoring.use_tool_id(5, "served_calls")
monitoring.register_callback(5, monitoring.events.PY_START, started)
monitoring.set_events(5, monitoring.events.PY_START)
def write(*_):
    monitoring.set_events(5, 0)  # the write's own calls (a Counter's __missing__ for each key) are not the server's
    try:
        _write()
    finally:
        monitoring.set_events(5, monitoring.events.PY_START)
def _write():
    out = collections.Counter()
    for (thread, code), n in list(counts.items()):  # a function made anew (a dataclass's __init__) adds up by name
        out[f"{thread}|{code.co_filename}:{code.co_firstlineno}:{code.co_qualname}"] += n
    with open(counts_file + ".part", "w") as file:
        json.dump(out, file)
    os.replace(counts_file + ".part", counts_file)
signal.signal(signal.SIGUSR1, write)
counts_file, sys.argv = sys.argv[1], sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
DATABASE = "airlock_bench_calls"
APPS = ("agents", "approvals", "console", "decisionlog", "gateway", "identity", "protocols", "slackapp")


class Counted(Served):
    """`manage.py serve` under the counter."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.counts = log_dir / "counts.json"
        super().__init__(env, log_dir, python_args=["-c", COUNTER, str(self.counts)])

    def read(self) -> collections.Counter[str]:
        self.counts.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not self.counts.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server wrote no counts:\n{self.log_tail()}")
            time.sleep(0.05)
        return collections.Counter(json.loads(self.counts.read_text()))


def package(where: str) -> str:
    """Where a function's file sits, as a short name: `django/db/models`, `asyncio`, `agents/events.py`..."""
    path = where.rsplit(":", 2)[0]
    for marker in ("site-packages/", "/lib/python3.12/", str(Path(__file__).resolve().parent.parent) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    parts = path.split("/")
    if parts[0] == "django":
        return "/".join(parts[:3])
    return "/".join(parts[:2]) if parts[0] in APPS else parts[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--json", help="write every function's calls per conversation here")
    args = parser.parse_args()
    with scratch_dir("airlock-calls-") as data:
        env = bench_env(data, database_url=pg_database(DATABASE, fresh=True))
        setup_django(env)
        from django.core.management import call_command
        from django.db import connections

        call_command("migrate", verbosity=0)
        token = seed_operator("bench", {"clock": AGENT})["token"]
        connections.close_all()
        server = Counted(env, data)
        try:
            server.wait_ready()
            asyncio.run(airlock_block(server, token, 1, 10))  # imports, caches, the pool's connections
            before = server.read()
            block = asyncio.run(airlock_block(server, token, 1, args.conversations))
            after = server.read()
        except BaseException:
            print(f"--- serve log (last lines) ---\n{server.log_tail()}", file=sys.stderr)
            raise
        finally:
            server.stop()
    done = len(block.dones)
    calls = {key: (n - before.get(key, 0)) / done for key, n in after.items() if n > before.get(key, 0)}
    threads: dict[str, float] = collections.defaultdict(float)
    packages: dict[str, float] = collections.defaultdict(float)
    functions: dict[str, float] = collections.defaultdict(float)
    for key, n in calls.items():
        thread, where = key.split("|", 1)
        threads[thread] += n
        packages[package(where)] += n
        functions[where] += n
    each = ", ".join(f"{thread} {n:,.0f}" for thread, n in _most(threads, len(threads)))
    print(f"### Python calls per served conversation ({done} conversations, 1 client, PostgreSQL)\n")
    print(f"In all: **{sum(calls.values()):,.0f}**; by thread: {each}")
    print("\n| calls | where |\n|---|---|")
    for where, n in _most(packages, args.top // 2):
        print(f"| {n:,.0f} | {where} |")
    print("\n| calls | function |\n|---|---|")
    for where, n in _most(functions, args.top):
        print(f"| {n:,.0f} | {package(where)} `{where.rsplit(':', 1)[1]}` |")
    if args.json:
        Path(args.json).write_text(json.dumps(calls, indent=0))


def _most(counts: dict[str, float], n: int) -> list[tuple[str, float]]:
    return sorted(counts.items(), key=lambda item: -item[1])[:n]


if __name__ == "__main__":
    main()
