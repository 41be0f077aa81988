"""One tenant's costly policy slows only itself (issue 48, finding 3): a tenant's evaluations hold at most its
share of the policy workers (`POLICY_WORKERS_PER_TENANT`, half of the 2 by default), its further ones wait in
its own queue within their budget, and another tenant's are served by the workers left
(agents/policy_sandbox.py, with its real worker processes)."""

import asyncio
import statistics
import threading
import time
import uuid

from agents.policies import PolicyBlocked, TurnPolicies
from tests.policies.test_policy_sandbox import COSTLY_TO_EVALUATE, INPUT_ONLY, hooks_of, ignore

ALLOW = """package airlock.probe

import rego.v1

# {tag}
default verdict := {{"decision": "allow"}}
"""
# Longer than any budget: each evaluation holds its worker the whole budget, then the worker is killed.
MESSAGE = "a message long enough to count for minutes"


def policies_of(tenant: str, rego: str) -> TurnPolicies:
    """A turn of `tenant` under a policy text of its own (compiled in whichever worker first runs it)."""
    return TurnPolicies.build(
        hooks_of(INPUT_ONLY, rego.format(tag=uuid.uuid4().hex)),
        connections={},
        decisions={},
        agent="probe",
        version=1,
        run_id=f"run-{tenant}",
        session_id=None,
        tenant=tenant,
        emit=ignore,
        records=[],
    )


async def verdict(policies: TurnPolicies, message: str) -> tuple[str, float]:
    """The reason of the deny at `input` ("allow" when none), and the seconds it took."""
    started = time.perf_counter()
    try:
        await policies.check(policies.builder.input(content=message))
    except PolicyBlocked as blocked:
        return str(blocked.reason), time.perf_counter() - started
    return "allow", time.perf_counter() - started


def flood(policies: TurnPolicies, until: threading.Event, said: list[str]) -> None:
    """Evaluations of a costly policy one after another, each on an event loop of this thread's own (as the
    console's request threads and run workers have), until `until`."""
    while not until.is_set():
        said.append(asyncio.run(verdict(policies, MESSAGE))[0])


async def test_it_keeps_another_tenants_verdicts_fast_while_one_floods_the_workers():
    costly, cheap = policies_of("tenant-a", COSTLY_TO_EVALUATE), policies_of("tenant-b", ALLOW)
    assert (await verdict(cheap, "hello"))[0] == "allow"  # its worker started and its policy compiled
    done, flooded = threading.Event(), list[str]()
    floods = [threading.Thread(target=flood, args=(costly, done, flooded)) for _ in range(6)]
    for thread in floods:
        thread.start()
    try:
        await asyncio.sleep(0.5)  # every flooding thread is in: A's worker is busy, the others wait their turn
        took = []
        for _ in range(10):
            said, seconds = await verdict(cheap, "hello")
            assert said == "allow"
            took.append(seconds)
            await asyncio.sleep(0.15)
    finally:
        done.set()
        for thread in floods:
            await asyncio.to_thread(thread.join)

    # Before, B's evaluations waited behind A's in the one queue: 0.3 to 2 s each, where they took 20 ms.
    print(f"B's verdicts under A's flood: median {statistics.median(took):.3f} s, max {max(took):.3f} s")
    assert statistics.median(took) < 0.1 and max(took) < 0.5, sorted(took)
    # A's evaluations ran out of their budget, on its worker or waiting in its queue: all its own denies.
    assert len(flooded) >= 6 and set(flooded) == {"runtime_error:budget_exceeded"}


async def test_it_gives_back_the_places_of_evaluations_their_callers_gave_up():
    """Evaluations cancelled while they waited in the tenant's queue or ran (an interceptor's timeout) leave
    no place taken: the tenant's next evaluation gets one (a place kept would leave it waiting out its budget,
    a deny)."""
    costly, cheap = policies_of("tenant-a", COSTLY_TO_EVALUATE), policies_of("tenant-a", ALLOW)
    assert (await verdict(cheap, "hello"))[0] == "allow"

    running, *waiting = [asyncio.create_task(verdict(costly, MESSAGE)) for _ in range(5)]
    await asyncio.sleep(0.3)  # the first runs, the others wait for the tenant's one place
    for task in [*waiting, running]:  # the waiting ones first, while the first still holds the place
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    for _ in range(2):
        assert (await verdict(cheap, "hello"))[0] == "allow"
