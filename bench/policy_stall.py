"""What a costly policy save costs everyone else (issue 26): `GET /login/` on a served console, alone and while
tenants save a definition whose Rego takes seconds to compile (`count` over 36 million pairs).

The saves are refused (`invalid_hooks`, `runtime_error:budget_exceeded`) once the compile budget
(`POLICY_COMPILE_BUDGET_MS`) runs out; the compile runs in a policy worker process (agents/policy_sandbox.py),
so the console's own requests do not wait on it. Before that change one such save made an anonymous
`/login/` take 5 to 8 s (three at once: 17 s).

Usage: .venv/bin/python bench/policy_stall.py [--saves 3] [--pages 200]
Target: `/login/` p99 under 200 ms while the saves run.
"""

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_env,
    daphnes_starting,
    median,
    percentile,
    python_line,
    scratch_dir,
    setup_django,
    verdict,
)

TARGET_MS = 200
MANIFEST = """agent_control_specification_version: "0.4.0-alpha.1"
metadata: {name: costly}
policies:
  costly: {type: rego, query: data.airlock.costly.verdict}
intervention_points:
  input: {policy_target: "$.input", policy_target_kind: user_input, policy: {id: costly}}
"""
REGO = """package airlock.costly

import rego.v1

# %s
pairs := count([1 | some x in numbers.range(1, 6100); some y in numbers.range(1, 6000)])

verdict := {"decision": "allow"} if pairs > 0
"""


def seed() -> list[str]:
    from django.contrib.auth.models import User

    from console.models import ApiToken, Membership, Tenant

    tokens = []
    for index in range(4):
        tenant = Tenant.objects.create(slug=f"tenant-{index}", name=f"Tenant {index}")
        user = User.objects.create_user(f"admin-{index}")
        membership = Membership.objects.create(user=user, tenant=tenant, role="admin")
        tokens.append(ApiToken.issue(membership, "bench")[1])
    return tokens


def save(base: str, token: str, name: str, took: list[float], answers: list[int]) -> None:
    hooks = {
        "declaration": "agent-hooks-declaration/1.0",
        "bindings": [
            {
                "id": "costly",
                "kind": "airlock.acs",
                "config": {"manifest": MANIFEST, "modules": {"costly": {"costly.rego": REGO % uuid.uuid4().hex}}},
            }
        ],
    }
    body = json.dumps({"name": name, "hooks": hooks}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(base + "/api/agents", body, headers), timeout=120) as r:
            answers.append(r.status)
    except urllib.error.HTTPError as error:
        answers.append(error.code)
    took.append(time.perf_counter() - started)


def pages(base: str, count: int, busy: threading.Event | None) -> list[float]:
    took = []
    while len(took) < count and (busy is None or busy.is_set() or not took):
        started = time.perf_counter()
        with urllib.request.urlopen(base + "/login/", timeout=60) as response:
            response.read()
        took.append(time.perf_counter() - started)
        time.sleep(0.01)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--saves", type=int, default=3, help="costly saves at once, each by another tenant")
    parser.add_argument("--pages", type=int, default=200, help="`/login/` requests of the quiet round")
    args = parser.parse_args()
    started = time.perf_counter()
    with scratch_dir("airlock-policy-stall-") as data:
        env = bench_env(data)
        # The console starts while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(env) as ready:
            setup_django(env)
            from django.conf import settings
            from django.core.management import call_command
            from django.db import connections

            call_command("migrate", verbosity=0)
            tokens = seed()
            connections.close_all()
            [server] = ready()
            pages(server.base, 20, None)  # warm
            quiet = pages(server.base, args.pages, None)
            busy, took, answers = threading.Event(), [], []
            busy.set()
            savers = [
                threading.Thread(target=save, args=(server.base, tokens[i % len(tokens)], f"costly-{i}", took, answers))
                for i in range(args.saves)
            ]
            for saver in savers:
                saver.start()
            watcher = threading.Thread(target=lambda: ([s.join() for s in savers], busy.clear()))
            watcher.start()
            loaded = pages(server.base, 100_000, busy)
            watcher.join()
        budget = settings.POLICY_COMPILE_BUDGET_MS

    p99 = percentile(loaded, 99) * 1000
    print("### A costly policy save against everyone else's pages (issue 26)\n")
    print(
        f"`policy_stall.py --saves {args.saves}`: one daphne (SQLite), {args.saves} tenants each saving a definition "
        f"whose Rego compiles for ~17 s, compile budget {budget} ms; `GET /login/` one at a time meanwhile; "
        f"{python_line()}; {time.perf_counter() - started:.0f} s.\n"
    )
    print("| `GET /login/` | requests | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|")
    for label, values in (("alone", quiet), (f"while {args.saves} costly saves run", loaded)):
        row = (median(values) * 1000, percentile(values, 99) * 1000, max(values) * 1000)
        print(f"| {label} | {len(values)} | {row[0]:.1f} | {row[1]:.1f} | {row[2]:.1f} |")
    print(f"\nThe saves answered {sorted(set(answers))} in {min(took):.1f}–{max(took):.1f} s.\n")
    print(f"Target: `/login/` p99 under {TARGET_MS} ms while the saves run: {p99:.0f} ms, {verdict(p99 < TARGET_MS)}.")


if __name__ == "__main__":
    main()
