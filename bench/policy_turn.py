"""What policies cost a turn (issue 13): the console turn of an agent without hooks against the same agent
with a one-binding Rego policy bound at all eight interception points, side by side in one run.

The turn, the scripted model, the in-process console client and the bare pydantic-ai turn are
turn_overhead.py's (imported, not copied): `call get_time` makes one model call that calls the tool and one
that answers, so every point fires — agent_startup, input, pre/post_model_call twice, pre/post_tool_call,
output, agent_shutdown: ten emissions where the declaration's surface has all eight points, six where it leaves
the model points out (checked on the run's interception records before timing). Sides:
- `none`: the agent without `hooks` (turn_overhead's `clock`);
- `starter`: the same agent with the starter policy enforced (`agents.starter_policy.starter_hooks`: one
  `airlock.acs` binding with no `at`, so bound at every point of its surface, which leaves the model points
  out; its Rego decides input, pre_tool_call and output, the other three points of the surface allow);
- `every`: the same agent with one `airlock.acs` binding whose Rego is evaluated at all eight points (a
  check of each point's target against a phrase; nothing matches, so every verdict is allow);
- `bare`: bare pydantic-ai, turn_overhead's floor, so that the no-hooks turn can be set against that
  bench's ratio ("without hooks no slower than today").
The sides alternate in blocks, as in turn_overhead.py.

Usage: .venv/bin/python bench/policy_turn.py [--turns 300]
Target: the turn with the policy (median) at most 1.3x the same turn without hooks.
"""

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Importing it sets Django up on a scratch data folder of its own (see turn_overhead.py), before the rest.
from bench.turn_overhead import BLOCKS, MESSAGE, Bare, InProcess, percentile, setup  # noqa: E402

# isort: split
from django.contrib.auth.models import User  # noqa: E402
from django.test import Client  # noqa: E402

from agents.definitions import DefinitionContent  # noqa: E402
from agents.models import Agent as AgentDefinition  # noqa: E402
from agents.policies import POINTS  # noqa: E402
from agents.starter_policy import starter_hooks  # noqa: E402
from console.models import Tenant  # noqa: E402

TARGET = 1.3
LABELS = {
    "bare": "bare pydantic-ai (agent.run), for scale",
    "none": "console turn, agent without hooks",
    "starter": "console turn, starter policy enforced (its surface: 6 points, its Rego decides 3)",
    "every": "console turn, one Rego binding evaluated at all 8 points",
}

# Where each point's target is in its context (agent-hooks 0.1), for a manifest that governs all eight.
TARGETS = {
    "agent_startup": "$.agent_init",
    "input": "$.input",
    "pre_model_call": "$.messages",
    "post_model_call": "$.response",
    "pre_tool_call": "$.tool_call.args",
    "post_tool_call": "$.tool_result",
    "output": "$.output",
    "agent_shutdown": "$.summary",
}
EVERY_REGO = """package airlock.every

import rego.v1

default verdict := {"decision": "allow"}

verdict := {"decision": "deny", "reason": "forbidden_phrase", "message": "The phrase is not allowed here."} if {
	contains(lower(json.marshal(input.policy_target.value)), "ignore previous instructions")
}
"""


def every_point_hooks() -> dict[str, Any]:
    """One `airlock.acs` binding whose one Rego query is evaluated at each of the eight points."""
    points = "".join(
        f'  {point}:\n    policy_target: "{path}"\n    policy_target_kind: {point}\n'
        + ('    tool_name_from: "$.tool_call.name"\n' if point.endswith("_tool_call") else "")
        + "    policy:\n      id: every\n"
        for point, path in TARGETS.items()
    )
    manifest = (
        'agent_control_specification_version: "0.4.0-alpha.1"\nmetadata:\n  name: "every-point"\nextends: []\n'
        "policies:\n  every:\n    type: rego\n    query: data.airlock.every.verdict\n"
        "tools:\n  get_time:\n    type: Tool\n    id: get_time\n"
        f"intervention_points:\n{points}"
    )
    return {
        "declaration": "agent-hooks-declaration/1.0",
        "configuration": {"mode": "enforce"},
        "bindings": [
            {
                "id": "every-point",
                "kind": "airlock.acs",
                "config": {"manifest": manifest, "modules": {"every": {"every.rego": EVERY_REGO}}},
            }
        ],
    }


def add_agents(token: str) -> None:
    """`clock` as turn_overhead.py made it, again with each policy; one turn each shows all eight points."""
    tenant, user = Tenant.objects.get(slug="bench"), User.objects.get(username="bench")
    clock = AgentDefinition.objects.get(tenant=tenant, name="clock").current.definition.wire()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    for name, hooks in (("clock-starter", starter_hooks("enforce")), ("clock-every", every_point_hooks())):
        AgentDefinition.create(tenant, DefinitionContent.model_validate({**clock, "name": name, "hooks": hooks}), user)
        result = client.post(f"/api/agents/{name}/runs", {"message": MESSAGE}, content_type="application/json").json()
        assert result["status"] == "completed" and result["output"].startswith("get_time: "), result
        records = client.get(f"/api/runs/{result['runId']}/records").json()["items"]
        points = [record["interception_point"] for record in records]
        # The starter's surface leaves the model points out (six emissions); the other binds all eight (ten).
        surface = hooks.get("surface", {}).get("interception_points", POINTS)
        assert set(points) == set(surface) and len(points) == len(surface) + 2 * ("pre_model_call" in surface), points
        assert all(record["verdict"]["decision"] == "allow" for record in records), records


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    token = setup()
    add_agents(token)
    sides: dict[str, Any] = {
        "bare": Bare(),
        "none": InProcess(token),
        "starter": InProcess(token, "clock-starter"),
        "every": InProcess(token, "clock-every"),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, float] = dict.fromkeys(sides, 0.0)
    for side in sides.values():
        side.turns(max(20, args.turns // 10))  # imports, caches, first queries, the policies' activation
    for _ in range(BLOCKS):
        for name, side in sides.items():
            started = time.process_time()
            times[name] += side.turns(args.turns // BLOCKS)
            cpu[name] += time.process_time() - started
    print("### Policies per scripted turn (issue 13): one Rego binding at all eight points against no hooks\n")
    print(
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, SQLite; the console run "
        f"API in process, the one-tool turn `{MESSAGE}` (ten emissions with all eight points, six with the "
        "starter's surface), "
        f"{BLOCKS} alternating blocks of each side; CPU: this process's CPU time per turn (all its threads), "
        "which other load on the machine moves less than the wall time\n"
    )
    print("| turn | n | median ms | p99 ms | CPU ms per turn |\n|---|---|---|---|---|")
    medians: dict[str, float] = {}
    for name, label in LABELS.items():
        medians[name] = statistics.median(times[name]) * 1000
        p99, per_turn = percentile(times[name], 99) * 1000, cpu[name] / len(times[name]) * 1000
        print(f"| {label} | {len(times[name])} | {medians[name]:.2f} | {p99:.2f} | {per_turn:.2f} |")
    none = medians["none"]
    for name, policy in (("starter", "the starter policy"), ("every", "Rego evaluated at all eight points")):
        ratio = medians[name] / none
        verdict = "met" if ratio <= TARGET else "missed"
        print(
            f"\nTarget: the turn with {policy} at most {TARGET}x the same turn without hooks (median) — "
            f"{ratio:.2f}x: {verdict} (+{medians[name] - none:.2f} ms; CPU {cpu[name] / cpu['none']:.2f}x)."
        )
    print(
        f"\nWithout hooks: {none / medians['bare']:.2f}x the bare turn in this run (turn_overhead's ratio, target "
        "2.5x; bench/README.md says how it compares with the code before policies)."
    )


if __name__ == "__main__":
    main()
