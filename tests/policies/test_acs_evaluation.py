"""Where an `airlock.acs` policy's Rego runs (agents.policies.AcsPolicy): a point is evaluated on a worker thread
until it is measured sub-millisecond; a slow policy never runs on the event loop."""

import asyncio
from typing import Any

from agents.payloads import Payload
from agents.policies import MEASURED, TurnPolicies

MANIFEST = """\
agent_control_specification_version: "0.4.0-alpha.1"
metadata:
  name: "slow"
extends: []
policies:
  slow:
    type: rego
    query: data.airlock.slow.verdict
intervention_points:
  input:
    policy_target: "$.input"
    policy_target_kind: user_input
    policy:
      id: slow
"""
# Tens of milliseconds of Rego per evaluation (a set comprehension over 50,000 numbers), whatever the input.
REGO = """package airlock.slow

import rego.v1

sevens := count([x | some x in numbers.range(1, 50000); x % 7 == 0])

default verdict := {"decision": "deny", "reason": "never"}

verdict := {"decision": "allow"} if sevens > 0
"""


async def ignore(_: Payload) -> None:
    pass


def slow_policies() -> TurnPolicies:
    config = {"manifest": MANIFEST, "modules": {"slow": {"slow.rego": REGO}}}
    binding = {"id": "slow", "kind": "airlock.acs", "config": config}
    hooks: dict[str, Any] = {"declaration": "agent-hooks-declaration/1.0", "bindings": [binding]}
    return TurnPolicies.build(
        hooks,
        connections={},
        decisions={},
        agent="slow",
        version=1,
        run_id="run",
        session_id=None,
        tenant=None,
        emit=ignore,
        records=[],
    )


async def test_a_slow_policy_is_evaluated_off_the_event_loop():
    """Evaluation after evaluation, beyond the ones that measure a point, the loop runs other tasks while the
    slow query is evaluated: it never moves onto the loop."""
    policies = slow_policies()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        for _ in range(MEASURED + 2):
            before = ticks
            target = await policies.check(policies.builder.input(content="hello"))
            assert target["content"] == "hello"
            assert ticks > before
    finally:
        ticker.cancel()
