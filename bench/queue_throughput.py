"""Queued-run throughput per worker process, with the scripted model, against the bare turn.

N runs of the one-tool turn (`call get_time`) are queued (as `Prefer: respond-async` queues them, without
the HTTP request), then `manage.py run_worker` processes work them. Throughput counts from the first
finished run to the last, so the workers' start-up is left out. Each configuration (database, worker
processes and threads) runs in a child process of its own with a fresh database; right before it, another
child times the same turn on bare pydantic-ai (bench/turn_overhead.py's `Bare`, median of BARE_TURNS):
the floor its ratio is taken against, measured under the same load.

Then the same worker on SQLite with 1 and 4 threads when each turn waits on its provider (a loopback
OpenAI-compatible server answering after PROVIDER_MS), against the provider's pace: no target, it shows what
the threads are for.

Usage: .venv/bin/python bench/queue_throughput.py [--runs 400]
Targets (issue 17): one worker process (1 thread) at least 0.7x the bare turn rate; 4 threads never slower
than 1 (within 5%: same-code runs move more than that here); two PostgreSQL worker processes at least 1.7x one.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    ROOT,
    bench_env,
    database_label,
    pg_database,
    python_line,
    scratch_dir,
    seed_operator,
    setup_django,
    verdict,
)
from tests.fakes.openai_server import FakeOpenAI

PER_PROCESS = 0.7  # runs/s of one worker process (1 thread) against bare turns/s
THREADS_NOT_SLOWER = 0.95  # 4 threads against 1 thread
SCALE_OUT = 1.7  # two PostgreSQL worker processes against one
BARE_TURNS = 200
CONFIGS = [("sqlite", 1, 1), ("sqlite", 1, 4), ("postgresql", 1, 1), ("postgresql", 1, 4), ("postgresql", 2, 1)]
AGENT = {"name": "clock", "tools": [{"name": "get_time", "approval": "never"}]}
# The same worker when turns wait on a provider, as real ones do: a loopback OpenAI-compatible server
# (tests/fakes/openai_server.py) answering each model call after PROVIDER_MS.
PROVIDER_MS = 100
PROVIDER_THREADS = (1, 4)
REMOTE = {"name": "remote", "model": {"connection": "loopback", "name": "bench-model"}}
KEY_ENV = "BENCH_OPENAI_KEY"


def bare() -> float:
    """Turns per second of the bare pydantic-ai turn (1 / median), in this process (a child of `main`)."""
    from bench.turn_overhead import Bare

    times = Bare().turns(BARE_TURNS)
    return 1 / sorted(times)[len(times) // 2]


def one(database: str, processes: int, threads: int, runs: int, provider_ms: int = 0) -> dict[str, object]:
    """Measure one configuration in this process (a child of `main`); with `provider_ms`, the turns are
    one model call each to a loopback provider that answers after that many milliseconds."""
    with scratch_dir("airlock-queue-bench-") as data, FakeOpenAI() as provider:
        url = pg_database("airlock_bench_queue", fresh=True) if database == "postgresql" else None
        env = {**bench_env(data, database_url=url), KEY_ENV: "sk-bench"}
        setup_django(env)
        from django.core.management import call_command
        from django.db.models import Max, Min

        from agents.models import Run
        from agents.prepare import RunRequest, live_version, prepare_run
        from agents.queue import start_queued
        from console.models import Connection

        call_command("migrate", verbosity=0)
        if provider_ms:
            Connection.objects.create(
                name="loopback", kind="openai", all_tenants=True, base_url=provider.base_url, api_key_env=KEY_ENV
            )
            for _ in range(runs):
                provider.reply_text("Hello.", delay=provider_ms / 1000)
        agent, message = (REMOTE, "hello") if provider_ms else (AGENT, "call get_time")
        persona = seed_operator(agents={agent["name"]: agent})
        version = live_version(persona["tenant"], agent["name"], None)
        for _ in range(runs):
            start_queued(prepare_run(persona["tenant"], version, RunRequest(message=message)), persona["user"])
        log = data / "worker.log"
        with log.open("w") as out:
            workers = [
                subprocess.Popen(
                    [sys.executable, "manage.py", "run_worker", "--threads", str(threads)],
                    cwd=ROOT,
                    env={**env, "WORKER_POLL_SECONDS": "0.05"},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
                for _ in range(processes)
            ]
        try:
            deadline = time.monotonic() + 300
            while Run.objects.filter(finished_at__isnull=True).exists():
                if any(worker.poll() is not None for worker in workers) or time.monotonic() > deadline:
                    raise RuntimeError(f"a worker stopped or stalled: {log.read_text()[-2000:]}")
                time.sleep(0.2)
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(30)
        span = Run.objects.aggregate(first=Min("finished_at"), last=Max("finished_at"))
        seconds = (span["last"] - span["first"]).total_seconds()
        completed = Run.objects.filter(status="completed").count()
        return {
            "database": database_label(),
            "processes": processes,
            "threads": threads,
            "runs": runs,
            "completed": completed,
            "per_second": (runs - 1) / seconds if seconds else 0.0,
            "provider_calls": len(provider.requests),
        }


def child(*args: str) -> str:
    """The last line a child of this script printed."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--one", nargs=3, metavar=("DATABASE", "PROCESSES", "THREADS"), help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--provider-ms", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        print(bare())
        return
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), int(args.one[2]), args.runs, args.provider_ms)))
        return
    rows: dict[tuple[str, int, int], dict[str, Any]] = {}
    for database, processes, threads in CONFIGS:
        floor = float(child("--bare"))
        row = json.loads(child("--runs", str(args.runs), "--one", database, str(processes), str(threads)))
        rows[(database, processes, threads)] = {**row, "bare": floor, "ratio": row["per_second"] / floor}
    # A provider's turn: fewer runs (each waits PROVIDER_MS), a floor of `threads` turns per PROVIDER_MS.
    provider = ("--runs", str(args.runs // 2), "--provider-ms", str(PROVIDER_MS))
    waiting = {n: json.loads(child(*provider, "--one", "sqlite", "1", str(n))) for n in PROVIDER_THREADS}
    print("### Queued-run throughput per worker process (scripted model, one-tool turn)\n")
    print(
        f"{python_line()}; `run_worker` processes started once the runs are queued; the floor is the bare "
        f"pydantic-ai turn (median of {BARE_TURNS}) timed right before each line.\n"
    )
    print("| database | worker processes | threads each | runs | completed | runs/s | bare turns/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows.values():
        print(
            f"| {row['database']} | {row['processes']} | {row['threads']} | {row['runs']} | {row['completed']} "
            f"| {row['per_second']:.1f} | {row['bare']:.1f} | {row['ratio']:.2f}x |"
        )
    print()
    for database in ("sqlite", "postgresql"):
        one_thread, four = rows[(database, 1, 1)], rows[(database, 1, 4)]
        label = one_thread["database"]
        print(
            f"Target: one worker process (1 thread) on {label} at least {PER_PROCESS}x the bare turn rate — "
            f"{one_thread['per_second']:.1f} runs/s against {one_thread['bare']:.1f} turns/s, "
            f"{one_thread['ratio']:.2f}x: {verdict(one_thread['ratio'] >= PER_PROCESS)}."
        )
        threads = four["ratio"] / one_thread["ratio"]
        print(
            f"Target: 4 threads on {label} never slower than 1 (at least {THREADS_NOT_SLOWER}x, ratios to their "
            f"floors) — {four['per_second']:.1f} against {one_thread['per_second']:.1f} runs/s, "
            f"{threads:.2f}x: {verdict(threads >= THREADS_NOT_SLOWER)}."
        )
    two, single = rows[("postgresql", 2, 1)], rows[("postgresql", 1, 1)]
    scale = two["ratio"] / single["ratio"]
    print(
        f"Target: two worker processes on {single['database']} at least {SCALE_OUT}x one — "
        f"{two['per_second']:.1f} against {single['per_second']:.1f} runs/s, {scale:.2f}x (ratios to their "
        f"floors): {verdict(scale >= SCALE_OUT)}."
    )
    print(
        f"\nThe same worker when each turn waits on its provider (not a target: what threads are for): one model "
        f"call a turn to a loopback OpenAI-compatible server that answers after {PROVIDER_MS} ms; the floor is "
        f"the provider's pace, one turn per {PROVIDER_MS} ms per thread.\n"
    )
    print("| database | threads | runs | completed | provider calls | runs/s | provider's pace | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for threads, row in waiting.items():
        pace = threads * 1000 / PROVIDER_MS
        print(
            f"| {row['database']} | {threads} | {row['runs']} | {row['completed']} | {row['provider_calls']} "
            f"| {row['per_second']:.1f} | {pace:.0f} | {row['per_second'] / pace:.2f}x |"
        )
    first, last = waiting[PROVIDER_THREADS[0]], waiting[PROVIDER_THREADS[-1]]
    print(
        f"\n{PROVIDER_THREADS[-1]} threads against {PROVIDER_THREADS[0]} when turns wait: "
        f"{last['per_second'] / first['per_second']:.2f}x.\n"
    )


if __name__ == "__main__":
    main()
