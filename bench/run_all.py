"""Run every benchmark and write bench/results.md (what `make bench` does).

Each benchmark script runs as its own process (a script that is not there yet is skipped) and prints one
Markdown section on stdout, starting with `### `, with its table and its target line(s). This collects
them under a header that says where they ran (date, machine, cores, Python, databases, channel layers)
and adds each section's wall time. Progress and the scripts' stderr go to stderr.

Usage: .venv/bin/python bench/run_all.py [--only push_latency,ws_memory] [--output bench/results.md]
"""

import argparse
import contextlib
import datetime
import importlib.metadata
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_SECONDS = 600
TIMEOUT_SECONDS = 420

# (name, script and arguments), in the order they run. The arguments keep the whole run under BUDGET_SECONDS on
# a 2-core machine (issue 56 item 5): fewer rounds, turns and requests than each script's own defaults where
# its figures stayed within run-to-run noise (bench/README.md gives each script's long form).
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("turn_overhead", ["bench/turn_overhead.py", "--turns", "100", "--http", "--provider", "--provider-turns", "40"]),
    # The long form (5 rounds of blocks four times as long) is `bench/peer_langgraph.py --long`.
    ("peer_langgraph", ["bench/peer_langgraph.py", "--rounds", "2"]),
    ("policy_turn", ["bench/policy_turn.py", "--turns", "120"]),
    ("policy_stall", ["bench/policy_stall.py"]),
    ("push_latency", ["bench/push_latency.py", "--rounds", "4", "--rounds-large", "3", "--rounds-small", "40"]),
    ("respond_throughput", ["bench/respond_throughput.py", "--requests", "200"]),
    ("inbox_scale", ["bench/inbox_scale.py", "--requests", "20"]),
    ("ws_memory", ["bench/ws_memory.py", "--connections", "500"]),
    ("queue_throughput", ["bench/queue_throughput.py", "--runs", "80"]),
    ("session_stream", ["bench/session_stream.py", "--words", "200"]),
    ("idle_streams", ["bench/idle_streams.py", "--window", "6"]),
    ("long_polls", ["bench/long_polls.py"]),
    ("gateway_waiting", ["bench/gateway_waiting.py", "--calls", "100"]),
    ("gateway_proxy", ["bench/gateway_proxy.py", "--calls", "120"]),
    ("receipts_answer", ["bench/receipts_answer.py", "--requests", "250", "--rounds", "4", "--contention", "200"]),
    ("quorum_answer", ["bench/quorum_answer.py", "--requests", "200", "--rounds", "6"]),
    # The full measurement (a million receipts, ~2.5 min to build) is `bench/verify_receipts.py --receipts 1000000`.
    ("verify_receipts", ["bench/verify_receipts.py", "--sizes", "10000,50000"]),
    ("scale", ["bench/scale.py", "--requests", "60", "--runs", "40"]),
    ("tracing_overhead", ["bench/tracing_overhead.py", "--turns", "200"]),
    ("decision_log", ["bench/decision_log.py"]),
    ("interceptions", ["bench/interceptions.py", "--calls", "200"]),
]


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _machine_kind() -> str:
    with contextlib.suppress(OSError):
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
        if " hypervisor" in flags:
            return "virtual machine"
        return "physical machine"
    return "machine"


def _memory_gb() -> str:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GB RAM"
    return "RAM unknown"


def _postgres() -> str:
    try:
        import psycopg

        with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", connect_timeout=3) as connection:
            row = connection.execute("SHOW server_version").fetchone()
        return f"PostgreSQL {row[0].split()[0] if row else '?'}"
    except Exception as error:
        return f"PostgreSQL unreachable ({type(error).__name__})"


def _redis() -> str:
    try:
        import redis

        client = redis.Redis.from_url("redis://127.0.0.1:6379/0", socket_timeout=3)
        try:
            version = client.info("server")["redis_version"]
        finally:
            client.close()
        return f"Redis {version}"
    except Exception as error:
        return f"Redis unreachable ({type(error).__name__})"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def machine_line(now: datetime.datetime) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{now:%Y-%m-%d %H:%M} UTC · {_machine_kind()} {platform.machine()}, {_cpu_model()}, {os.cpu_count()} cores, "
        f"{_memory_gb()} (load average {load:.2f} at the start) · Python {platform.python_version()}, Django "
        f"{_version('django')}, daphne {_version('daphne')} · databases: {_postgres()} (127.0.0.1), SQLite "
        f"{sqlite3.sqlite_version} · channel layers: in-memory (channels {_version('channels')}), {_redis()} "
        f"(channels-redis {_version('channels-redis')}, redis-py {_version('redis')})"
    )


def _stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return process.communicate()


def run(name: str, command: list[str]) -> tuple[str, float, bool]:
    """One benchmark: its Markdown section, its wall time and whether it succeeded."""
    print(f"[bench] {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the servers it starts end with it on a timeout
    )
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_SECONDS)
    except BaseException as error:  # a timeout, or Ctrl-C: end its whole process group first
        stdout, stderr = _stop(process)
        if not isinstance(error, subprocess.TimeoutExpired):
            raise
        stderr += f"\n(killed after {TIMEOUT_SECONDS} s)"
    seconds = time.perf_counter() - started
    if stderr.strip():
        sys.stderr.write(stderr if stderr.endswith("\n") else stderr + "\n")
    ok = process.returncode == 0
    section = stdout.strip()
    if not section.startswith("### "):
        section = f"### {name}\n\n{section}".strip()
    if not ok:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        section += f"\n\n**Failed** (exit status {process.returncode}); the end of its stderr:\n\n```\n{tail}\n```"
    print(f"[bench] {name}: {seconds:.0f} s{'' if ok else ' — FAILED'}", file=sys.stderr, flush=True)
    return section, seconds, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results.md"))
    args = parser.parse_args()
    wanted = {name for name in args.only.split(",") if name}
    unknown = wanted - {name for name, _ in BENCHMARKS}
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    now = datetime.datetime.now(datetime.UTC)
    header = machine_line(now)
    started = time.perf_counter()
    sections: list[str] = []
    skipped: list[str] = []
    failed: list[str] = []
    for name, command in BENCHMARKS:
        if wanted and name not in wanted:
            continue
        if not (ROOT / command[0]).exists():
            skipped.append(f"`{command[0]}` (not there yet)")
            continue
        section, seconds, ok = run(name, command)
        sections.append(f"{section}\n\nWall time: {seconds:.0f} s (`{' '.join(command)}`).")
        if not ok:
            failed.append(name)
    total = time.perf_counter() - started
    whole = "" if not wanted else f" (only {', '.join(sorted(wanted))} ran: not the whole of `make bench`)"
    target = (
        f"Target (issue 56): make bench under {BUDGET_SECONDS // 60} minutes — {total:.0f} s: "
        f"{'met' if total <= BUDGET_SECONDS else 'missed'}{whole}."
    )
    lines = [
        "# Benchmark results",
        "",
        "Written by `bench/run_all.py` (`make bench`); what each benchmark measures, and its target, is in "
        "bench/README.md. The figures are one run's: the machine may have been shared.",
        "",
        f"Machine: {header}",
        "",
        *(f"{section}\n" for section in sections),
        f"Total wall time: {total:.0f} s ({total / 60:.1f} minutes)."
        + (f" Skipped: {', '.join(skipped)}." if skipped else "")
        + (f" Failed: {', '.join(failed)}." if failed else ""),
        "",
        target,
        "",
    ]
    Path(args.output).write_text("\n".join(lines))
    print(f"[bench] wrote {args.output} in {total:.0f} s\n{target}", file=sys.stderr)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
