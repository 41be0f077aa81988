"""A console answer held for its undo window applies when the window closes even when the process that held it
went before then (issue 48 item 9): the served console's periodic loop applies it, as `manage.py serve` starts
it, with nobody calling `apply_due`. The window here is short but not 0 (0 applies inline, holding nothing)."""

import json
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.processes.cluster import PYTHON, ROOT, Api, Cluster, new_cluster, wait_for

pytestmark = pytest.mark.processes

WINDOW = "1"
DEPLOY = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]},
}
# In a process of its own, as an external agent and then the inbox would: ada's token, the agent `deployer`, a
# request of it, and ada's approval of it held; prints them with the held answer's due time, and exits. The
# timer that process started for the answer dies with it, as when a console is killed inside the window.
_HOLD = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
import django
django.setup()
from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.actions import hold_answers, open_request
from approvals.responses import Response
from approvals.decisions import Actor, Via
from approvals.external_wire import OpenRequest
from approvals.models import HeldAnswer
from console.models import ApiToken, Membership
membership = Membership.objects.select_related("user", "tenant").get(user__username="ada", tenant__slug="acme")
_, token = ApiToken.issue(membership, "tests")
tools = [json.loads(sys.argv[1])]
content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": tools})
Agent.create(membership.tenant, content, membership.user)
body = OpenRequest.model_validate({"toolName": "deploy", "arguments": {"service": "x"}})
pending = open_request(membership, membership.user, "deployer", body).request
answer = Response(request_id=pending.id, approved=True, reason="held, then applied by the sweep")
held = hold_answers(membership, Actor.person(membership.user, Via.INBOX, "session"), [(pending, answer)])
assert held.held == [pending], held
due = HeldAnswer.objects.get(request=pending).due_at.isoformat()
print(json.dumps({"token": token, "requestId": str(pending.id), "due": due}))
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = new_cluster(tmp_path, ANSWER_UNDO_SECONDS=WINDOW)  # and a deadline sweep every second
    try:
        yield cluster
    finally:
        cluster.stop_all()


def test_the_served_console_applies_a_held_answer_whose_process_went(cluster):
    holding = subprocess.Popen(
        [PYTHON, "-c", _HOLD, json.dumps(DEPLOY)], cwd=ROOT, env=cluster.env, stdout=subprocess.PIPE, text=True
    )
    console = cluster.serve()  # meanwhile: each process takes seconds to set Django up here
    out, _ = holding.communicate(timeout=120)
    assert holding.returncode == 0, out
    held = json.loads(out.splitlines()[-1])
    api, rid = Api(console.url, held["token"]), held["requestId"]

    def decided() -> dict[str, Any] | None:
        body = api.ok("GET", f"/api/requests/{rid}")
        return body if body["decision"] is not None else None

    body = wait_for(decided, "the served console to apply the held answer", timeout=20, every=0.25)
    decision = body["decision"]
    assert (decision["approved"], decision["answeredBy"], decision["via"]) == (True, "ada", "inbox"), decision
    assert decision["text"] == "held, then applied by the sweep"
    answered_at = datetime.fromisoformat(decision["answeredAt"].replace("Z", "+00:00"))
    assert answered_at >= datetime.fromisoformat(held["due"]), (decision, held)
    # How ada signed in where she answered, not the sweep's process ("cli"), is on the receipt.
    receipt = api.ok("GET", f"/api/requests/{rid}/receipt")
    assert (receipt["authMethod"], receipt["reason"]) == ("session", "held, then applied by the sweep"), receipt
