"""Receipts on the answer path (SPEC section 13): approving a pending request with its receipt written against
the same answer without it.

Each answer goes through the real respond path in process: Django's test client (every middleware, token auth)
`POST /api/runs/{runId}/responses` with `{"requestId", "approved": true}`, which stores the answer
(`approvals.decisions.decide`) and, with it, the request's receipt (`approvals.receipts.record_closing`: the
tenant's `ReceiptHead` under a row lock, the receipt's RFC 8785 digest, its insert, the head's update; on PostgreSQL
in the answer's own statement). "Without receipts" is the same code with `approvals.receipts.record_closing` replaced
by the answer's conditional update alone for the duration of that arm (a benchmark may patch; a test may not).

The runs of the scripted model ask PER_RUN + 1 approvals each (seeded through the run API) and only PER_RUN of
them are answered, so no answer starts the run's continuation: what is timed is the answer and its receipt, not
a turn. The arms alternate in rounds (`--rounds`, each arm answering its share of a round in turn, the arm that
goes first alternating) so load that comes and goes weighs on both alike. Reported per database (PostgreSQL
`airlock_bench_receipts`, and SQLite): p50/p99 of one answer per arm and their ratio, and the queries one answer
makes (CaptureQueriesContext, on answers outside the timed ones).

Contention (PostgreSQL only): THREADS threads (each its own client and database connection) answer different
requests (of different runs) of the same tenant at once; every receipt takes the same head row lock, so the
receipts of one tenant are written one at a time. Reported: answers per second with and without receipts.

Target: with receipts at most 1.1x the answer without (p50).

Usage: .venv/bin/python bench/receipts_answer.py [--requests 500] [--rounds 10] [--threads 4]
       [--contention 400] [--databases postgresql,sqlite]
"""

import argparse
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    MAILER,
    bench_env,
    database_label,
    median,
    per_database,
    percentile,
    pg_database,
    python_line,
    scratch_dir,
    seed_operator,
    send_email_lines,
    setup_django,
    verdict,
)

DATABASE = "airlock_bench_receipts"
PER_RUN = 20  # answered per run; each run asks one more, left pending (no continuation)
TARGET = 1.1
COUNTED = 10  # answers per arm whose queries are counted (not timed)


@contextlib.contextmanager
def without_receipts() -> Iterator[None]:
    import approvals.receipts

    real = approvals.receipts.record_closing
    approvals.receipts.record_closing = lambda closing, closed, at, decider: closing.run() > 0  # type: ignore[assignment]
    try:
        yield
    finally:
        approvals.receipts.record_closing = real


def seed(requests: int, slug: str) -> tuple[str, list[tuple[str, str]]]:
    """An operator's token and (run id, request id) of `requests` pending approvals, PER_RUN per run, run by run."""
    from django.test import Client

    from approvals.models import PendingRequest

    persona = seed_operator(slug, {"mailer": MAILER})
    client = Client()
    message = send_email_lines(PER_RUN + 1)
    runs = -(-requests // PER_RUN)
    for n in range(runs):
        response = client.post(
            "/api/agents/mailer/runs",
            data=json.dumps({"message": message, "sessionId": f"receipts-{n}"}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {persona['token']}",
        )
        assert response.status_code == 200 and response.json()["status"] == "awaiting_approval", response.content
    pending = PendingRequest.objects.filter(tenant=persona["tenant"], status="pending").order_by("run_id", "opened_at")
    picked: list[tuple[str, str]] = []
    by_run: dict[str, int] = {}
    for run_id, request_id in pending.values_list("run_id", "id"):
        if by_run.get(str(run_id), 0) < PER_RUN:
            by_run[str(run_id)] = by_run.get(str(run_id), 0) + 1
            picked.append((str(run_id), str(request_id)))
    return persona["token"], picked[:requests]


def answer(client: Any, token: str, run_id: str, request_id: str) -> None:
    response = client.post(
        f"/api/runs/{run_id}/responses",
        data=json.dumps({"requestId": request_id, "approved": True}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "accepted" and not body.get("continuationRunId"), body


def count_queries(client: Any, token: str, items: list[tuple[str, str]]) -> float:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for run_id, request_id in items:
        with CaptureQueriesContext(connection) as captured:
            answer(client, token, run_id, request_id)
        counts.append(len(captured.captured_queries))
    return sum(counts) / len(counts)


def latency_arms(requests: int, rounds: int) -> dict[str, Any]:
    """Both arms on the database this process is set up with."""
    from django.test import Client

    from approvals.receipts import Receipt

    token, items = seed(2 * (requests + COUNTED) + 2 * PER_RUN, "bench")
    client = Client()
    # Warm-up (caches, the head row) and the query counts, before the timed answers.
    counted_with = count_queries(client, token, items[:COUNTED])
    with without_receipts():
        counted_without = count_queries(client, token, items[COUNTED : 2 * COUNTED])
    items = items[2 * COUNTED :]
    arms: dict[str, list[tuple[str, str]]] = {"with": [], "without": []}
    for index, item in enumerate(items[: 2 * requests]):
        arms["with" if (index // PER_RUN) % 2 == 0 else "without"].append(item)  # whole runs to each arm
    latencies: dict[str, list[float]] = {"with": [], "without": []}
    per_round = -(-requests // rounds)
    receipts_before = Receipt.objects.count()
    for round_ in range(rounds):
        order = ("with", "without") if round_ % 2 == 0 else ("without", "with")
        for arm in order:
            chunk = arms[arm][round_ * per_round : (round_ + 1) * per_round]
            patch = without_receipts() if arm == "without" else contextlib.nullcontext()
            with patch:
                for run_id, request_id in chunk:
                    start = time.perf_counter()
                    answer(client, token, run_id, request_id)
                    latencies[arm].append(time.perf_counter() - start)
    written = Receipt.objects.count() - receipts_before
    assert written == len(latencies["with"]), (written, len(latencies["with"]))
    return {"latencies": latencies, "queries": {"with": counted_with, "without": counted_without}}


def contention(threads: int, answers: int) -> dict[str, float]:
    """Answers per second of `threads` threads answering different requests of one tenant at once, per arm."""
    from django.db import connections
    from django.test import Client

    token, items = seed(2 * answers + 2 * threads * PER_RUN, "contended")
    runs: dict[str, list[tuple[str, str]]] = {}
    for run_id, request_id in items:
        runs.setdefault(run_id, []).append((run_id, request_id))
    ordered = list(runs.values())
    rates: dict[str, float] = {}
    for arm in ("with", "without"):
        # Each thread answers whole runs of its own (round robin): only the tenant's head row is shared.
        shares: list[list[tuple[str, str]]] = [[] for _ in range(threads)]
        taken = 0
        while taken < answers and ordered:
            run = ordered.pop(0)
            shares[taken // PER_RUN % threads].extend(run)
            taken += len(run)
        barrier = threading.Barrier(threads + 1)
        errors: list[BaseException] = []

        def work(share: list[tuple[str, str]], barrier: threading.Barrier, errors: list[BaseException]) -> None:
            try:
                client = Client()
                barrier.wait()
                for run_id, request_id in share:
                    answer(client, token, run_id, request_id)
            except BaseException as error:  # reported below
                errors.append(error)
            finally:
                connections.close_all()

        patch = without_receipts() if arm == "without" else contextlib.nullcontext()
        with patch:
            workers = [threading.Thread(target=work, args=(share, barrier, errors)) for share in shares]
            for worker in workers:
                worker.start()
            barrier.wait()
            start = time.perf_counter()
            for worker in workers:
                worker.join()
            seconds = time.perf_counter() - start
        if errors:
            raise errors[0]
        rates[arm] = sum(len(share) for share in shares) / seconds
    return rates


def child(args: argparse.Namespace, database: str) -> None:
    """Measure on one database (a process of its own: Django is set up once per process) and print JSON."""
    with scratch_dir("airlock-receipts-bench-") as data:
        url = pg_database(DATABASE, fresh=True) if database == "postgresql" else None
        setup_django(bench_env(data, database_url=url))
        from django.core.management import call_command
        from django.db import connections

        call_command("migrate", verbosity=0)
        figures: dict[str, Any] = {"label": database_label()}
        figures.update(latency_arms(args.requests, args.rounds))
        if database == "postgresql" and args.threads > 1:
            figures["contention"] = contention(args.threads, args.contention)
        connections.close_all()
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="answers timed per arm")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds of the two arms")
    parser.add_argument("--threads", type=int, default=4, help="threads answering at once (PostgreSQL)")
    parser.add_argument("--contention", type=int, default=400, help="answers per arm in the contention run")
    parser.add_argument("--databases", default="postgresql,sqlite")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args, args.child)
        return
    started = time.perf_counter()
    results = per_database(__file__, args.databases.split(","))

    print("### Receipts on the answer path (SPEC 13): `POST /api/runs/{runId}/responses` with and without receipts\n")
    print(
        f"`receipts_answer.py --requests {args.requests} --rounds {args.rounds} --threads {args.threads} "
        f"--contention {args.contention}`: in process (Django test client: middleware, token auth, the respond "
        f"API, `decide`), one operator approving one pending request at a time, no continuation started; "
        f"without receipts = `approvals.receipts.record_closing` patched to the bare update for the arm; arms "
        f"alternating in {args.rounds} rounds; {python_line()}\n"
    )
    print("| database | arm | n | p50 ms | p99 ms | queries per answer |\n|---|---|---|---|---|---|")
    verdicts = []
    for figures in results.values():
        lat = figures["latencies"]
        for arm in ("with", "without"):
            values = lat[arm]
            print(
                f"| {figures['label']} | {arm} receipts | {len(values)} | {median(values) * 1000:.2f} | "
                f"{percentile(values, 99) * 1000:.2f} | {figures['queries'][arm]:.0f} |"
            )
        p50 = median(lat["with"]) / median(lat["without"])
        p99 = percentile(lat["with"], 99) / percentile(lat["without"], 99)
        verdicts.append(
            f"Target: {figures['label']}, with receipts at most {TARGET}x the answer without (p50) — "
            f"{p50:.2f}x (p99 {p99:.2f}x, +{(median(lat['with']) - median(lat['without'])) * 1000:.2f} ms; "
            f"+{figures['queries']['with'] - figures['queries']['without']:.0f} queries): {verdict(p50 <= TARGET)}."
        )
    print()
    for line in verdicts:
        print(line + "\n")
    for _database, figures in results.items():
        if "contention" in figures:
            rates = figures["contention"]
            print(
                f"Contention ({figures['label']}): {args.threads} threads answering different requests of one tenant "
                f"at once, {args.contention} answers per arm: with receipts {rates['with']:.0f} answers/s, without "
                f"{rates['without']:.0f} answers/s ({rates['with'] / rates['without']:.2f}x; the head row lock "
                f"serializes a tenant's receipts).\n"
            )
    print(f"Wall time: {time.perf_counter() - started:.0f} s (`bench/receipts_answer.py`).")


if __name__ == "__main__":
    main()
