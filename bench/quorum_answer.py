"""A quorum's completing approval (SPEC section 14) against a plain answer: what the second of two approvals costs.

Each answer goes through the real respond path in process: Django's test client (every middleware, token auth)
`POST /api/requests/{id}/responses` with `{"approved": true}` on an external agent's request, which stores the
decision (`approvals.decisions.decide`, its receipt) and settles the agent's run. The "plain" arm answers requests of
a tool with no requirement; the "completing" arm gives the second approval of requests of a tool that requires two
(`{"approvals": 2}`), whose first approval was given before, untimed: the count under the request's row lock, the
approvals read, the decision with every approval in its receipt. The arms alternate in rounds (`--rounds`, the
arm that goes first alternating) so load that comes and goes weighs on both alike. Reported per database
(PostgreSQL `airlock_bench_quorum`, and SQLite): p50/p99 per arm, their ratio, and the queries of one answer.

Target: a completing approval at most 1.2x a plain answer (p50).

Usage: .venv/bin/python bench/quorum_answer.py [--requests 300] [--rounds 6] [--databases postgresql,sqlite]
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    bench_env,
    database_label,
    median,
    per_database,
    percentile,
    pg_database,
    python_line,
    scratch_dir,
    seed_operator,
    setup_django,
    verdict,
)

DATABASE = "airlock_bench_quorum"
TARGET = 1.2
COUNTED = 10
TOOLS = [
    {"name": "plain", "approval": "always"},
    {"name": "quorum", "approval": "always", "require": {"approvals": 2, "selfApproval": True}},
]


def seed(requests: int) -> tuple[str, str, dict[str, list[str]]]:
    """Two operators' tokens and the ids of `requests` open requests per tool, the quorum's approved once."""
    from django.test import Client

    from console.models import ApiToken, Membership

    first = seed_operator("bench", {"releaser": {"name": "releaser", "runtime": "external", "tools": TOOLS}})
    second_user = first["user"].__class__.objects.create_user("bench-second")
    second = Membership.objects.create(user=second_user, tenant=first["tenant"], role="operator")
    second_token = ApiToken.issue(second, "bench")[1]
    client = Client()
    ids: dict[str, list[str]] = {"plain": [], "quorum": []}
    for tool in ids:
        for n in range(requests):
            body = {"toolName": tool, "sessionId": f"{tool}-{n}"}
            response = client.post(
                "/api/agents/releaser/requests",
                data=json.dumps(body),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {first['token']}",
            )
            assert response.status_code == 201, response.content
            ids[tool].append(response.json()["requestId"])
    for request_id in ids["quorum"]:
        assert answer(client, first["token"], request_id) == "recorded"
    return first["token"], second_token, ids


def answer(client: Any, token: str, request_id: str) -> str:
    response = client.post(
        f"/api/requests/{request_id}/responses",
        data=json.dumps({"approved": True}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    return str(response.json()["status"])


def arms(requests: int, rounds: int) -> dict[str, Any]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    first, second, ids = seed(requests + COUNTED)
    client = Client()
    queries: dict[str, float] = {}
    for arm, token in (("plain", first), ("quorum", second)):  # warm-up and the query counts, untimed
        counts = []
        for request_id in ids[arm][:COUNTED]:
            with CaptureQueriesContext(connection) as captured:
                assert answer(client, token, request_id) == "accepted"
            counts.append(len(captured.captured_queries))
        queries[arm] = sum(counts) / len(counts)
    latencies: dict[str, list[float]] = {"plain": [], "quorum": []}
    per_round = -(-requests // rounds)
    for round_ in range(rounds):
        order = ("plain", "quorum") if round_ % 2 == 0 else ("quorum", "plain")
        for arm in order:
            token = first if arm == "plain" else second
            start_at = COUNTED + round_ * per_round
            for request_id in ids[arm][start_at : start_at + per_round]:
                start = time.perf_counter()
                status = answer(client, token, request_id)
                latencies[arm].append(time.perf_counter() - start)
                assert status == "accepted", status
    return {"latencies": latencies, "queries": queries}


def child(args: argparse.Namespace, database: str) -> None:
    with scratch_dir("airlock-quorum-bench-") as data:
        url = pg_database(DATABASE, fresh=True) if database == "postgresql" else None
        setup_django(bench_env(data, database_url=url))
        from django.core.management import call_command
        from django.db import connections

        call_command("migrate", verbosity=0)
        figures: dict[str, Any] = {"label": database_label()}
        figures.update(arms(args.requests, args.rounds))
        connections.close_all()
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="answers timed per arm")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds of the two arms")
    parser.add_argument("--databases", default="postgresql,sqlite")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args, args.child)
        return
    started = time.perf_counter()
    results = per_database(__file__, args.databases.split(","))

    print("### A quorum's completing approval (SPEC 14) against a plain answer\n")
    print(
        f"`quorum_answer.py --requests {args.requests} --rounds {args.rounds}`: in process (Django test client: "
        f"middleware, token auth, `POST /api/requests/{{id}}/responses`, `decide`, the receipt, the external run "
        f"settled); completing = the second approval of a request requiring two, the first given untimed; arms "
        f"alternating in {args.rounds} rounds; {python_line()}\n"
    )
    print("| database | arm | n | p50 ms | p99 ms | queries per answer |\n|---|---|---|---|---|---|")
    verdicts = []
    for figures in results.values():
        lat = figures["latencies"]
        for arm, label in (("plain", "plain answer"), ("quorum", "completing approval")):
            values = lat[arm]
            print(
                f"| {figures['label']} | {label} | {len(values)} | {median(values) * 1000:.2f} | "
                f"{percentile(values, 99) * 1000:.2f} | {figures['queries'][arm]:.0f} |"
            )
        ratio = median(lat["quorum"]) / median(lat["plain"])
        verdicts.append(
            f"Target: {figures['label']}, a completing approval at most {TARGET}x a plain answer (p50) — "
            f"{ratio:.2f}x (+{(median(lat['quorum']) - median(lat['plain'])) * 1000:.2f} ms; "
            f"+{figures['queries']['quorum'] - figures['queries']['plain']:.0f} queries): {verdict(ratio <= TARGET)}."
        )
    print()
    for line in verdicts:
        print(line + "\n")
    print(f"Wall time: {time.perf_counter() - started:.0f} s (`bench/quorum_answer.py`).")


if __name__ == "__main__":
    main()
