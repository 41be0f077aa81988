"""A tenant's catastrophic pattern against a served console (issue 48 item 2): tenant acme opens requests and
answers them against `^(a+)+$` with 10,000 characters while tenant globex uses the same process; globex's calls
stay fast. Before patterns ran on RE2, 30 characters held the whole process (the GIL) for 10 s."""

import threading
import time
import urllib.request

import pytest

from tests.processes.cluster import Api, Cluster, manage_all

pytestmark = pytest.mark.processes

EVIL = "^(a+)+$"
ATTACK = "a" * 10_000 + "b"
SCHEMA = {"type": "object", "properties": {"service": {"type": "string", "pattern": EVIL}}}
# How many calls globex times, and the bound on their 99th percentile.
SAMPLES = 100
P99_SECONDS = 0.2


@pytest.fixture
def tenants(cluster: Cluster) -> tuple[Api, Api]:
    """(acme's admin, globex's operator) on one console process."""
    *_, acme_token, globex_token = manage_all(
        cluster.env,
        ["create_tenant", "globex", "--name", "Globex"],
        ["create_user", "bob", "--tenant", "globex", "--role", "operator", "--password", "bob-password-91c2"],
        ["create_token", "ada", "--tenant", "acme"],
        ["create_token", "bob", "--tenant", "globex"],
    )
    console = cluster.serve()
    return Api(console.url, acme_token.strip()), Api(console.url, globex_token.strip())


class Attacker(threading.Thread):
    """Opens approvals whose arguments the pattern must check, and answers an input request whose schema has
    it, one after the other until told to stop; `took` is how long each call took."""

    def __init__(self, acme: Api, input_id: str) -> None:
        super().__init__(daemon=True)
        self.acme, self.input_id = acme, input_id
        self.stopping = threading.Event()
        self.took: list[float] = []
        self.outcomes: set[tuple[int, str]] = set()

    def run(self) -> None:
        opening = {"kind": "approval", "toolName": "deploy", "arguments": {"service": ATTACK}}
        answering = {"action": "accept", "content": {"service": ATTACK}}
        while not self.stopping.is_set():
            for path, body in [
                ("/api/agents/deployer/requests", opening),
                (f"/api/requests/{self.input_id}/responses", answering),
            ]:
                started = time.monotonic()
                status, payload = self.acme("POST", path, body)
                self.took.append(time.monotonic() - started)
                self.outcomes.add((status, payload.get("code") or payload.get("status")))


def timed_get(url: str, token: str) -> float:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
        assert response.status == 200
    return time.monotonic() - started


def test_another_tenant_stays_fast_while_a_tenant_sends_catastrophic_patterns(tenants):
    acme, globex = tenants
    tool = {"name": "deploy", "description": "Deploy a service", "parameters": SCHEMA}
    acme.ok("POST", "/api/agents", {"name": "deployer", "runtime": "external", "tools": [tool]})
    opened = acme.ok(
        "POST", "/api/agents/deployer/requests", {"kind": "input", "message": "Which?", "requestedSchema": SCHEMA}
    )
    attackers = [Attacker(acme, opened["requestId"]) for _ in range(2)]
    for attacker in attackers:
        attacker.start()
    try:
        times = sorted(timed_get(f"{globex.url}/api/agents", globex.token) for _ in range(SAMPLES))
    finally:
        for attacker in attackers:
            attacker.stopping.set()
        for attacker in attackers:
            attacker.join(30)

    attacks = [took for attacker in attackers for took in attacker.took]
    outcomes = set().union(*(attacker.outcomes for attacker in attackers))
    p99 = times[int(SAMPLES * 0.99) - 1]
    print(f"globex p50 {times[SAMPLES // 2] * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms; {len(attacks)} attacks")  # -s
    assert len(attacks) >= 10, "the attack did not run alongside"
    # The open is refused (the arguments do not match), the answer is an invalid response: neither a 5xx.
    assert outcomes == {(400, "invalid_arguments"), (200, "invalid_response")}, outcomes
    assert max(attacks) < 1, f"an attack took {max(attacks):.2f} s"
    assert p99 < P99_SECONDS, f"globex's p99 was {p99 * 1000:.0f} ms while acme attacked"
