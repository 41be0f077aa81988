"""Escalation is durable (SPEC section 14, issue 51): a request's steps are taken by whichever console's deadline
sweep finds them due, so a console killed before a step (kill -9) loses none: the next one to start takes them."""

import time

import pytest

from tests.processes.cluster import Api, new_cluster, wait_for

pytestmark = pytest.mark.processes

DEPLOY = {
    "name": "deploy",
    "approval": "always",
    "approvers": "sre",
    "escalation": [{"after": "5s", "to": ["sre-leads"]}, {"after": "6s", "then": "deny"}],
}


def test_the_steps_of_a_request_are_taken_after_its_console_was_killed(tmp_path):
    cluster = new_cluster(tmp_path)  # a deadline sweep every second
    try:
        for group in ("sre", "sre-leads"):
            cluster.manage("create_group", group, "--tenant", "acme")
        token = cluster.manage("create_token", "ada", "--tenant", "acme").strip()
        first = cluster.serve("daphne-first")
        api = Api(first.url, token)
        api.ok("POST", "/api/agents", {"name": "releaser", "runtime": "external", "tools": [DEPLOY]})
        opened = api.ok("POST", "/api/agents/releaser/requests", {"toolName": "deploy", "arguments": {}})
        at = time.monotonic()
        rid = opened["requestId"]
        cluster.kill(first)  # before the first step is due
        time.sleep(max(0.0, 5 - (time.monotonic() - at)))  # both steps are due by the time the next console sweeps
        second = Api(cluster.serve("daphne-second").url, token)

        def decided() -> dict | None:
            body = second.ok("GET", f"/api/requests/{rid}")
            return body if body["decision"] is not None else None

        body = wait_for(decided, "the second console to take both steps", timeout=30, every=0.25)
        assert body["approvers"] == ["sre", "sre-leads"], body
        decision = body["decision"]
        assert decision["approved"] is False and decision["via"] == "escalation", decision
        receipt = second.ok("GET", f"/api/requests/{rid}/receipt")
        assert (receipt["decisionSource"], receipt["answeredBy"]) == ("escalation", "escalation:2"), receipt
    finally:
        cluster.stop_all()
