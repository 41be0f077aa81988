"""A tenant's policy cannot read the host, hold the console's CPU or save without bound (SPEC sections 2 and 8;
agents/policies/acs.py's manifest checks, agents/policy_sandbox.py's workers and budgets)."""

import asyncio
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agents.models import Agent, AgentVersion, Event
from agents.payloads import Payload
from agents.policies import TurnPolicies
from agents.policy_sandbox import sandbox
from agents.starter_policy import MANIFEST, REGO, starter_hooks
from tests.helpers import ASSISTANT, assert_problem, call_line, make_agent, run_ok, snapshot

TOOLS = [{"name": "send_email", "approval": "never"}, {"name": "get_time", "approval": "never"}]
SECRET = "the-host-secret-4f1c"

INPUT_ONLY = """\
agent_control_specification_version: "0.4.0-alpha.1"
metadata:
  name: "probe"
policies:
  probe:
    type: rego
    query: data.airlock.probe.verdict
intervention_points:
  input:
    policy_target: "$.input"
    policy_target_kind: user_input
    policy:
      id: probe
"""
# Denies with everything it can see: what the server handed the policy as `data` would be in the message.
LEAKY = """package airlock.probe

import rego.v1

verdict := {"decision": "deny", "reason": "probe", "message": sprintf("%v", [data])}
"""


def hooks_of(manifest: str, rego: str = LEAKY, **config: Any) -> dict[str, Any]:
    modules = {"probe": {"probe.rego": rego}}
    binding = {"id": "probe", "kind": "airlock.acs", "config": {"manifest": manifest, "modules": modules, **config}}
    return {"declaration": "agent-hooks-declaration/1.0", "bindings": [binding]}


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A file outside the project, as an attacker hopes the server reads it."""
    folder = tmp_path / "planted"
    folder.mkdir()
    for name in ("secret.yaml", "secret.json", "secret.rego"):
        (folder / name).write_text(f"leak: {SECRET}\n")
    (folder / "entities.json").write_text(json.dumps([{"uid": SECRET}]))
    (folder / "secret.cedar").write_text(f'permit(principal, action, resource) when {{ "{SECRET}" == "x" }};')
    return folder


def naming_the_host(folder: Path) -> list[tuple[str, str]]:
    """(manifest, the key its refusal names) for every way a manifest could point the loader at the host."""
    policy = "    query: data.airlock.probe.verdict\n"
    cedar = INPUT_ONLY.replace("    type: rego\n" + policy, "    type: cedar\n")
    cedar_set = '    type: cedar\n    policy_set: "permit(principal, action, resource);"\n'

    def with_policy(line: str) -> str:
        return INPUT_ONLY.replace(policy, policy + line)

    return [
        (with_policy(f"    data: {folder}/secret.yaml\n"), "policies.probe.data"),
        (with_policy(f"    bundle: {folder}\n"), "policies.probe.bundle"),
        (with_policy(f"    bundle_url: file://{folder}/x.tar.gz\n"), "policies.probe.bundle_url"),
        (with_policy(f"    data_paths: [{folder}/secret.json]\n"), "policies.probe.data_paths"),
        (INPUT_ONLY + f"extends: [{folder}/secret.yaml]\n", "extends"),
        (INPUT_ONLY + "extends: [https://policies.example.test/base.yaml]\n", "extends"),
        (cedar.replace("    type: cedar\n", f"    type: cedar\n    policy_path: {folder}/a.cedar\n"), "policy_path"),
        (cedar.replace("    type: cedar\n", cedar_set + f"    entities_path: {folder}/e.json\n"), "entities_path"),
        (INPUT_ONLY + "annotators:\n  a:\n    type: endpoint\n    url: http://127.0.0.1:9/\n", "annotators"),
        (INPUT_ONLY + f"tools: !include {folder}/secret.yaml\n", "!include"),
        (INPUT_ONLY + "tools: &t {}\nx: *t\n", "anchor"),
        (INPUT_ONLY.replace("    type: rego\n", "    type: custom\n    adapter: os.system\n"), "policies.probe.type"),
    ]


def test_it_refuses_every_manifest_key_that_names_the_host_and_reads_nothing(admin, planted):
    for manifest, key in naming_the_host(planted):
        before = snapshot()
        response = admin.api("POST", "/api/agents", {**ASSISTANT, "hooks": hooks_of(manifest)})

        problem = assert_problem(response, 400, "invalid_hooks")
        message = problem["errors"][0]["message"]
        assert key in message, (key, message)
        assert SECRET not in response.content.decode()
        assert snapshot() == before
        # The answer does not tell whether the path exists.
        elsewhere = manifest.replace(str(planted), str(planted.parent / "nowhere"))
        again = admin.api("POST", "/api/agents", {**ASSISTANT, "hooks": hooks_of(elsewhere)})
        said = again.json()["errors"][0]["message"].replace(str(planted.parent / "nowhere"), str(planted))
        assert said == message


def test_it_runs_a_version_stored_before_the_checks_without_reading_the_host(admin, planted):
    """A version saved with a host path before the checks existed: its turns fail closed, nothing is read."""
    agent = make_agent(admin)
    query = "    query: data.airlock.probe.verdict\n"
    manifest = INPUT_ONLY.replace(query, query + f"    data: {planted}/secret.yaml\n")
    content = {**agent.current.content, "hooks": hooks_of(manifest)}
    AgentVersion.objects.create(agent=agent, number=2, content=content)
    Agent.objects.filter(pk=agent.pk).update(current_version=2)

    response = admin.api("POST", "/api/agents/assistant/runs", {"message": "hello"})

    assert SECRET not in response.content.decode()
    result = response.json()
    assert result["status"] == "failed"
    assert result["error"]["code"] == "policy_unavailable"
    assert "policies.probe.data" in result["error"]["message"]
    assert not any(SECRET in json.dumps(event.data) for event in Event.objects.all())


def test_it_gives_a_policy_its_data_from_the_config(admin):
    rego = """package airlock.probe

import rego.v1

default verdict := {"decision": "allow"}

verdict := {"decision": "deny", "reason": "banned", "message": "That word is banned."} if {
	some word in data.airlock.banned.words
	contains(input.policy_target.value.content, word)
}
"""
    data = {"probe": [{"mount": ["airlock", "banned"], "document": {"words": ["rhubarb"]}}]}
    make_agent(admin, hooks=hooks_of(INPUT_ONLY, rego, data=data))

    assert run_ok(admin, {"message": "hello"})["status"] == "completed"
    blocked = run_ok(admin, {"message": "say rhubarb"})
    assert blocked["status"] == "blocked"
    assert blocked["error"]["reason"] == "banned"


def test_it_refuses_data_that_is_not_mounted_documents(admin):
    for data in ({"probe": "/etc/hosts"}, {"probe": [{"mount": "x", "document": {}}]}, ["x"]):
        response = admin.api("POST", "/api/agents", {**ASSISTANT, "hooks": hooks_of(INPUT_ONLY, data=data)})
        assert "config.data" in assert_problem(response, 400, "invalid_hooks")["errors"][0]["message"]


# ---- budgets ------------------------------------------------------------------------------------------------

# Seconds of Rego to compile (a constant over 36 million pairs), whatever the input.
COSTLY_TO_COMPILE = """package airlock.probe

import rego.v1

# {tag}
pairs := count([1 | some x in numbers.range(1, 6100); some y in numbers.range(1, 6000)])

verdict := {{"decision": "allow"}} if pairs > 0
"""
# Seconds of Rego per evaluation (a comprehension sized by the message), nothing at compile time.
COSTLY_TO_EVALUATE = """package airlock.probe

import rego.v1

# {tag}
default verdict := {{"decision": "allow"}}

verdict := {{"decision": "deny", "reason": "counted"}} if {{
	count(input.policy_target.value.content) > 3
	n := count(input.policy_target.value.content) * 100000
	count([1 | some x in numbers.range(1, n); some y in numbers.range(1, 100)]) < 0
}}
"""
# Costly for a message that says "minutes" only: saving evaluates a policy at a sample message, within the same
# budget, and refuses one that runs past it (issue 50 item 3).
COSTLY_FOR_MINUTES = COSTLY_TO_EVALUATE.replace("> 3", '> 3\n\tcontains(input.policy_target.value.content, "minutes")')


def unique(rego: str) -> str:
    """A text this process has not compiled yet (compiles are kept per text)."""
    return rego.format(tag=uuid.uuid4().hex)


@pytest.mark.django_db(transaction=True)
def test_it_keeps_serving_pages_while_a_tenant_saves_a_policy_that_compiles_for_seconds(admin, settings):
    settings.POLICY_COMPILE_BUDGET_MS = 2000
    hooks = hooks_of(INPUT_ONLY, unique(COSTLY_TO_COMPILE))
    answers: list[Any] = []

    def save() -> None:
        started = time.perf_counter()
        answers.append(admin.api("POST", "/api/agents", {**ASSISTANT, "hooks": hooks}))
        answers.append(time.perf_counter() - started)

    saving = threading.Thread(target=save)
    saving.start()
    login, took = Client(), []
    while saving.is_alive():
        started = time.perf_counter()
        assert login.get("/login/").status_code == 200
        took.append(time.perf_counter() - started)
        time.sleep(0.02)
    saving.join()

    response, seconds = answers
    problem = assert_problem(response, 400, "invalid_hooks")
    assert "runtime_error:budget_exceeded" in problem["errors"][0]["message"]
    assert 2 <= seconds < 15  # the budget, and a worker started for it on a busy machine
    # The save held no lock the pages need: in the old process-local compile each page waited seconds. On a
    # loaded machine one page may stall on something else (a worker's start, the database; one took 2.17 s in a CI
    # run): no second one waits the budget.
    assert len(took) > 10  # pages loaded all along (a loaded machine's sleeps run long: 20 were counted once)
    ordered = sorted(took)
    # The 95th percentile of the loads after the slowest (of 20 or fewer, `len * 0.95` was the slowest itself).
    assert ordered[int((len(ordered) - 1) * 0.95)] < 0.5 and ordered[-2] < 2.0, ordered[-5:]
    assert not Agent.objects.exists()


def worker_pids() -> set[int]:
    return {worker.process.pid for worker in sandbox()._idle}


def test_it_denies_an_evaluation_past_its_budget_and_stops_its_work(admin, settings):
    settings.POLICY_EVAL_BUDGET_MS = 300
    make_agent(admin, hooks=hooks_of(INPUT_ONLY, unique(COSTLY_FOR_MINUTES)))
    assert run_ok(admin, {"message": "hi"})["status"] == "completed"  # a short message costs nothing
    before = worker_pids()

    started = time.perf_counter()
    blocked = run_ok(admin, {"message": "a message long enough to count for minutes"})
    seconds = time.perf_counter() - started

    assert blocked["status"] == "blocked"
    assert blocked["error"]["reason"] == "runtime_error:budget_exceeded"
    assert seconds < 5
    # The worker that ran it was killed, not left burning a core.
    killed = before - worker_pids()
    assert killed
    for pid in killed:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert run_ok(admin, {"message": "hi"})["status"] == "completed"  # a fresh worker serves the next turn


async def ignore(_: Payload) -> None:
    pass


async def test_it_evaluates_off_the_event_loop():
    """The loop runs other tasks while a policy is evaluated: the turn's loop never waits on Rego."""
    slow = COSTLY_TO_EVALUATE.replace("* 100000", "* 300").format(tag=uuid.uuid4().hex)
    policies = TurnPolicies.build(
        hooks_of(INPUT_ONLY, slow),
        connections={},
        decisions={},
        agent="probe",
        version=1,
        run_id="run",
        session_id=None,
        tenant=None,
        emit=ignore,
        records=[],
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        for _ in range(5):
            before = ticks
            target = await policies.check(policies.builder.input(content="hello"))
            assert target["content"] == "hello"
            assert ticks > before
    finally:
        ticker.cancel()


# ---- saves per tenant -----------------------------------------------------------------------------------------


def test_it_limits_how_many_new_policies_a_tenant_compiles_a_minute(admin, outsider, settings):
    known = starter_hooks()
    texts = [hooks_of(INPUT_ONLY, LEAKY + f"\n# {uuid.uuid4().hex}\n") for _ in range(3)]
    make_agent(admin, name="known", tools=TOOLS, hooks=known)  # compiled once: saving it again is free
    settings.POLICY_COMPILES_PER_MINUTE = 2

    first = admin.api("POST", "/api/agents", {**ASSISTANT, "name": "one", "hooks": texts[0]})
    second = admin.api("POST", "/api/agents", {**ASSISTANT, "name": "two", "hooks": texts[1]})
    third = admin.api("POST", "/api/agents", {**ASSISTANT, "name": "three", "hooks": texts[2]})

    assert (first.status_code, second.status_code) == (201, 201)
    problem = assert_problem(third, 429, "too_many_policy_compiles")
    assert 1 <= int(third["Retry-After"]) <= 60
    assert "try again" in problem["errors"][0]["message"]
    assert not Agent.objects.filter(name="three").exists()
    again = admin.api("POST", "/api/agents", {**ASSISTANT, "name": "again", "tools": TOOLS, "hooks": known})
    assert again.status_code == 201, again.content
    other = outsider.api("POST", "/api/agents", {**ASSISTANT, "name": "three", "hooks": texts[2]})
    assert other.status_code == 201, other.content


def test_the_starter_policy_still_compiles_and_runs_in_the_sandbox(admin):
    assert "mail" in MANIFEST and "package airlock.mail" in REGO
    make_agent(admin, tools=TOOLS, hooks=starter_hooks())
    denied = run_ok(admin, {"message": call_line("send_email", {"to": "eve@evil.test", "subject": "Hi", "body": "x"})})
    assert denied["output"] == "send_email denied: Mail to evil.test is never sent."
