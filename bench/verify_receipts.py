"""Verifying a long receipt chain (SPEC section 13): `approvals.signing.verify_tenant` over a tenant with a
million receipts on PostgreSQL, its time and its memory.

The chain is built fast, not through answers: this process computes it with approvals.receipts' own functions
(`genesis`, `digest`: each receipt's body as `record` writes it, with its place in the chain) and streams the rows
into `approvals_receipt` with PostgreSQL COPY, then moves the tenant's `ReceiptHead` to the end and signs it
(`approvals.signing.sign_heads`, the installation key in a scratch folder). The chain is built to the first size
(`--sizes`, default 100000), verified, extended to the next and verified again, and so on: the same tenant, so
the sizes are comparable. The database (`airlock_bench_verify`) is kept, so a later run with the same sizes
reuses the chain already there (`--fresh` rebuilds it).

Each verification runs in a process of its own (Django set up, the public key loaded, then `verify_tenant` on
the tenant): its wall time, receipts per second, and its memory — the peak RSS of the process
(`resource.getrusage`'s ru_maxrss) less its RSS just before verifying (VmRSS). Constant memory means the growth
at 1,000,000 receipts is about the growth at 100,000. `--profile` runs the verification under cProfile and
prints where its time goes.

Target: a million receipts verified in under a minute, in constant memory.

Usage: .venv/bin/python bench/verify_receipts.py [--sizes 100000,1000000] [--fresh] [--profile]
       (`make bench` runs `--receipts 100000`; `--receipts N` is `--sizes 100000,N`)
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    bench_env,
    database_label,
    pg_database,
    python_line,
    scratch_dir,
    setup_django,
    verdict,
)

DATABASE = "airlock_bench_verify"
SLUG = "verify-bench"
TARGET_SECONDS = 60
BATCH = 5_000
KEY_DIR = Path("/tmp/airlock-bench-verify-key")  # kept with the database: a reused chain's signature verifies


def vm_rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def env_for(data: Path) -> dict[str, str]:
    env = bench_env(data, database_url=pg_database(DATABASE, fresh=False))
    KEY_DIR.mkdir(exist_ok=True)
    env["RECEIPT_SIGNING_KEY_FILE"] = str(KEY_DIR / "receipt-signing.key")
    return env


def fact(n: int, at: datetime) -> dict[str, Any]:
    """A receipt's body without its place in the chain, as `request_facts` makes one (a person's approval)."""
    return {
        "requestId": str(uuid.uuid4()),
        "runId": str(uuid.UUID(int=n // 10 + 1)),
        "sessionId": f"session-{n // 50}",
        "agent": "mailer",
        "definitionVersion": 3,
        "kind": "approval",
        "toolName": "send_email",
        "argumentsDigest": f"{n:064x}",
        "originalArgumentsDigest": None,
        "result": "approved",
        "reason": None,
        "decisionSource": "human",
        "answeredBy": "bench-operator",
        "authMethod": "token",
        "at": at.isoformat(),
    }


def extend(tenant_id: Any, to: int) -> tuple[int, float]:
    """Extend the tenant's chain to `to` receipts (COPY, BATCH rows at a time), move its head and sign it.
    Returns how many were written and the seconds it took."""
    from django.db import connection, transaction

    from approvals.receipts import Receipt, ReceiptHead, digest
    from approvals.signing import sign_heads

    start = time.perf_counter()
    head = ReceiptHead.objects.get(tenant_id=tenant_id)
    sequence, prev = head.sequence, head.hash
    if sequence >= to:
        return 0, 0.0
    written = to - sequence
    base = datetime(2026, 1, 1, tzinfo=UTC)
    columns = "id, tenant_id, sequence, request_id, agent, tool_name, result, at, body, hash"
    with transaction.atomic(), connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor: COPY
        while sequence < to:
            rows = []
            for _ in range(min(BATCH, to - sequence)):
                sequence += 1
                at = base + timedelta(seconds=sequence)
                body = {**fact(sequence, at), "receiptId": str(uuid.uuid4()), "sequence": sequence, "prevHash": prev}
                prev = digest(body)
                rows.append(
                    (
                        body["receiptId"],
                        tenant_id,
                        sequence,
                        body["requestId"],
                        body["agent"],
                        body["toolName"],
                        body["result"],
                        at,
                        json.dumps(body),
                        prev,
                    )
                )
            with raw.copy(f"COPY {Receipt._meta.db_table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        ReceiptHead.objects.filter(tenant_id=tenant_id).update(sequence=sequence, hash=prev)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Receipt._meta.db_table}")
    # sign_heads verifies the receipts since the last signature before it signs (7 s of 100,000 here): this process
    # has just computed them with the chain's own digest, and verifying them is what the children time.
    with mock.patch("approvals.signing._unsigned_part", return_value=None):
        sign_heads()
    return written, time.perf_counter() - start


def verify_child(profile: bool) -> None:
    """One verification in this fresh process; prints its figures as JSON."""
    import cProfile
    import io
    import pstats

    from approvals.signing import load_public_key, verify_tenant
    from console.models import Tenant

    tenant = Tenant.objects.get(slug=SLUG)
    from django.conf import settings

    public = load_public_key(Path(settings.RECEIPT_SIGNING_KEY_FILE).read_bytes())
    before = vm_rss_kb()
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    verified = verify_tenant(tenant, public)
    if profiler is not None:
        profiler.disable()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    figures: dict[str, Any] = {
        "receipts": verified.receipts,
        "broken": str(verified.broken) if verified.broken else None,
        "seconds": seconds,
        "rss_before_kb": before,
        "growth_kb": peak - before,
    }
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
        figures["profile"] = out.getvalue()
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000", help="chain lengths to verify at, ascending")
    parser.add_argument("--receipts", type=int, default=0, help="the largest size (adds 100000 before it)")
    parser.add_argument("--fresh", action="store_true", help="drop the kept chain and build it again")
    parser.add_argument("--profile", action="store_true", help="cProfile each verification")
    parser.add_argument("--verify-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.receipts:
        sizes = sorted({100_000, args.receipts} if args.receipts > 100_000 else {args.receipts})
    with scratch_dir("airlock-verify-bench-") as data:
        env = env_for(data)
        if args.verify_child:
            setup_django(env)
            verify_child(args.profile)
            return
        started = time.perf_counter()
        if args.fresh:
            pg_database(DATABASE, fresh=True)
        setup_django(env)
        from django.core.management import call_command
        from django.db import connections

        from approvals.receipts import Receipt
        from console.models import Tenant

        call_command("migrate", verbosity=0)
        tenant = Tenant.objects.filter(slug=SLUG).first()
        existing = Receipt.objects.filter(tenant=tenant).count() if tenant is not None else 0
        if tenant is None or existing > sizes[0]:
            call_command("flush", verbosity=0, interactive=False)
            tenant = Tenant.objects.create(slug=SLUG, name="Verify bench")
        database = database_label()
        results = []
        for size in sizes:
            written, build_seconds = extend(tenant.pk, size)
            connections.close_all()
            command = [sys.executable, __file__, "--verify-child", *(["--profile"] if args.profile else [])]
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, check=False)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                raise SystemExit(f"verification of {size} receipts failed")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            assert figures["receipts"] == size and figures["broken"] is None, figures
            results.append({**figures, "size": size, "written": written, "build_seconds": build_seconds})
            print(f"[verify_receipts] {size}: {figures['seconds']:.1f} s", file=sys.stderr, flush=True)
        connections.close_all()

    largest = results[-1]
    print("### Verifying a receipt chain (SPEC 13): `approvals.signing.verify_tenant` over one tenant\n")
    print(
        f"`verify_receipts.py --sizes {','.join(map(str, sizes))}`: {database} (`{DATABASE}`); one tenant's chain "
        f"(bodies as `request_facts` makes them, hashed with `approvals.receipts.digest`, inserted with COPY) and "
        f"one signed head at its end; each verification in a fresh process, memory = its peak RSS less its RSS "
        f"before verifying; {python_line()}\n"
    )
    print("| receipts | verify s | receipts/s | memory growth MB | chain built (s, receipts added) |")
    print("|---|---|---|---|---|")
    for row in results:
        built = f"{row['build_seconds']:.0f} s, {row['written']}" if row["written"] else "kept from an earlier run"
        print(
            f"| {row['size']:,} | {row['seconds']:.1f} | {row['size'] / row['seconds']:,.0f} | "
            f"{row['growth_kb'] / 1024:.1f} | {built} |"
        )
    print()
    fast = largest["seconds"] < TARGET_SECONDS
    print(
        f"Target: {largest['size']:,} receipts verified in under {TARGET_SECONDS} s — {largest['seconds']:.1f} s: "
        f"{verdict(fast)}" + ("" if largest["size"] >= 1_000_000 else " (scaled down: run `--receipts 1000000`)")
    )
    if len(results) > 1:
        first = results[0]
        flat = largest["growth_kb"] <= first["growth_kb"] * 1.5 + 8 * 1024
        print(
            f"\nTarget: constant memory — {first['growth_kb'] / 1024:.1f} MB at {first['size']:,}, "
            f"{largest['growth_kb'] / 1024:.1f} MB at {largest['size']:,}: {verdict(flat)}"
        )
    for row in results:
        if "profile" in row:
            print(f"\ncProfile at {row['size']:,} (by own time):\n\n```\n{row['profile'].strip()}\n```")
    print(f"\nWall time: {time.perf_counter() - started:.0f} s (`bench/verify_receipts.py`).")


if __name__ == "__main__":
    main()
