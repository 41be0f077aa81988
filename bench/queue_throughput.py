"""Queued-run throughput per worker process, with the scripted model.

N runs of the one-tool turn (`call get_time`) are queued (as `Prefer: respond-async` queues them, without
the HTTP request), then one `manage.py run_worker` process works them. Throughput counts from the first
finished run to the last, so the worker's start-up is left out. Each configuration (database, worker
threads) runs in a child process of its own with a fresh database.

Usage: .venv/bin/python bench/queue_throughput.py [--runs 400]
Target: at least 100 runs/s per worker process.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

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

TARGET = 100.0
AGENT = {"name": "clock", "tools": [{"name": "get_time", "approval": "never"}]}


def one(database: str, threads: int, runs: int) -> dict[str, object]:
    """Measure one configuration in this process (a child of `main`)."""
    with scratch_dir("airlock-queue-bench-") as data:
        url = pg_database("airlock_bench_queue", fresh=True) if database == "postgresql" else None
        env = bench_env(data, database_url=url)
        setup_django(env)
        from django.core.management import call_command
        from django.db.models import Max, Min

        from agents.models import Run
        from agents.prepare import RunRequest, live_version, prepare_run
        from agents.queue import start_queued

        call_command("migrate", verbosity=0)
        persona = seed_operator(agents={"clock": AGENT})
        version = live_version(persona["tenant"], "clock", None)
        for _ in range(runs):
            start_queued(prepare_run(persona["tenant"], version, RunRequest(message="call get_time")), persona["user"])
        log = data / "worker.log"
        with log.open("w") as out:
            worker = subprocess.Popen(
                [sys.executable, "manage.py", "run_worker", "--threads", str(threads)],
                cwd=ROOT,
                env={**env, "WORKER_POLL_SECONDS": "0.05"},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 300
            while Run.objects.filter(finished_at__isnull=True).exists():
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the worker stopped or stalled: {log.read_text()[-2000:]}")
                time.sleep(0.2)
        finally:
            worker.terminate()
            worker.wait(30)
        span = Run.objects.aggregate(first=Min("finished_at"), last=Max("finished_at"))
        seconds = (span["last"] - span["first"]).total_seconds()
        completed = Run.objects.filter(status="completed").count()
        return {
            "database": database_label(),
            "threads": threads,
            "runs": runs,
            "completed": completed,
            "per_second": (runs - 1) / seconds if seconds else 0.0,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--one", nargs=2, metavar=("DATABASE", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.runs)))
        return
    rows = []
    for database in ("sqlite", "postgresql"):
        for threads in (1, 4):
            child = subprocess.run(
                [sys.executable, __file__, "--runs", str(args.runs), "--one", database, str(threads)],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
    best = max(float(row["per_second"]) for row in rows)  # type: ignore[arg-type]
    print("### Queued-run throughput per worker process (scripted model, one-tool turn)\n")
    print(f"{python_line()}; one `run_worker` process; runs queued before it starts.\n")
    print("| database | worker threads | runs | completed | runs/s |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['database']} | {row['threads']} | {row['runs']} | {row['completed']} | {row['per_second']:.1f} |"
        )
    print(
        f"\nTarget: at least {TARGET:.0f} runs/s per worker process — "
        f"best {best:.1f} runs/s: {verdict(best >= TARGET)}."
    )


if __name__ == "__main__":
    main()
