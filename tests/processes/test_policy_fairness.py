"""Issue 48's finding 3, as it was found: on a served console, 30 concurrent interceptions of a costly Rego policy
in one tenant took another tenant's verdicts from 20 ms to 2.5-5 s, and 3 of 10 became `deny
host_error:interceptor_timeout`. Now a tenant's evaluations hold at most its share of the policy workers and wait
in its own queue (agents/policy_sandbox.py): the other tenant's allows stay allows, well under a second at p99 (a
median of 20 ms here; the bound leaves room for a 2-CPU machine busy with 30 flooding threads, and still fails the
2.5-5 s that unfair sharing gave)."""

import math
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agent_hooks import AgentContextBuilder

from tests.policies.test_policy_fairness import ALLOW, MESSAGE
from tests.policies.test_policy_sandbox import COSTLY_FOR_MINUTES, INPUT_ONLY, hooks_of
from tests.processes.cluster import PASSWORD, Api, manage_all, new_cluster

pytestmark = pytest.mark.processes

FLOODING = 30


def agent(name: str, rego: str) -> dict[str, Any]:
    hooks = hooks_of(INPUT_ONLY, rego.format(tag=name))
    return {"name": name, "runtime": "external", "tools": [{"name": "send_email"}], "hooks": hooks}


def intercept(api: Api, name: str, message: str) -> tuple[str, float]:
    """The verdict's reason ("allow" when it allows) of one interception at `input`, and the seconds it took."""
    context = dict(AgentContextBuilder(agent_id=name, framework="langgraph", session_id="s-1").input(content=message))
    started = time.monotonic()
    status, body = api("POST", f"/api/agents/{name}/interceptions", context)
    took = time.monotonic() - started
    assert status == 200, (status, body)
    verdict = body["verdict"]
    return ("allow" if verdict["decision"] == "allow" else verdict.get("reason", verdict["decision"])), took


def p99(seconds: list[float]) -> float:
    return sorted(seconds)[math.ceil(len(seconds) * 0.99) - 1]


def test_it_keeps_another_tenants_allows_fast_while_one_floods_a_costly_policy(tmp_path: Path):
    cluster = new_cluster(tmp_path)
    try:
        _, _, token_a, token_b = manage_all(
            cluster.env,
            ["create_tenant", "globex", "--name", "Globex"],
            ["create_user", "bea", "--tenant", "globex", "--role", "admin", "--password", PASSWORD],
            ["create_token", "ada", "--tenant", "acme"],
            ["create_token", "bea", "--tenant", "globex"],
        )
        console = cluster.serve()
        acme, globex = Api(console.url, token_a.strip()), Api(console.url, token_b.strip())
        acme.ok("POST", "/api/agents", agent("counter", COSTLY_FOR_MINUTES))
        globex.ok("POST", "/api/agents", agent("greeter", ALLOW))
        quiet = [intercept(globex, "greeter", "hello") for _ in range(10)]
        assert {said for said, _ in quiet} == {"allow"}

        done, flooded = threading.Event(), list[str]()

        def flood() -> None:
            while not done.is_set():
                flooded.append(intercept(acme, "counter", MESSAGE)[0])

        floods = [threading.Thread(target=flood, daemon=True) for _ in range(FLOODING)]
        for thread in floods:
            thread.start()
        try:
            time.sleep(1.5)  # all 30 in: acme's worker busy with one, its queue full of the others
            under_flood = []
            for _ in range(10):
                under_flood.append(intercept(globex, "greeter", "hello"))
                time.sleep(0.2)
        finally:
            done.set()
            for thread in floods:
                thread.join(60)
    finally:
        cluster.stop_all()

    before, during = [s for _, s in quiet], [s for _, s in under_flood]
    print(
        f"globex's allows: median {statistics.median(before) * 1000:.0f} ms alone, "
        f"median {statistics.median(during) * 1000:.0f} ms and p99 {p99(during) * 1000:.0f} ms "
        f"under acme's {FLOODING} concurrent costly interceptions ({len(flooded)} answered, all denies: "
        f"{sorted(set(flooded))})"
    )
    assert [said for said, _ in under_flood] == ["allow"] * 10
    assert p99(during) < 1.0, sorted(during)
    # acme's own evaluations ran out of their budget, on its worker or in its queue: its own denies only.
    assert len(flooded) >= FLOODING and set(flooded) <= {
        "runtime_error:budget_exceeded",
        "host_error:interceptor_timeout",
    }
