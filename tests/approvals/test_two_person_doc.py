"""docs/two-person-rule.md holds (issue 51): its commands and JSON, in order, do what the page says they do."""

import json
import re
import shlex

import pytest
from django.core.management import call_command

from approvals.models import Approval, PendingRequest, Receipt
from console.models import Tenant
from tests.conftest import make_persona
from tests.processes.cluster import ROOT

pytestmark = pytest.mark.django_db

DOC = (ROOT / "docs" / "two-person-rule.md").read_text()
BLOCK = re.compile(r"```(?P<lang>[a-z]+)\n(?P<code>.*?)^```$", re.S | re.M)


def test_the_page_runs_as_written():
    found = [(block["lang"], block["code"]) for block in BLOCK.finditer(DOC)]
    assert [lang for lang, _ in found] == ["bash", "json", "json", "json", "json"]
    (_, commands), (_, definition), (_, opening), (_, recorded), (_, away) = found
    demo = Tenant.objects.create(slug="demo", name="Demo")
    people = {
        name: make_persona(name, demo, role)
        for name, role in (("admin", "admin"), ("operator", "operator"), ("release-bot", "operator"))
    }
    for line in commands.strip().splitlines():
        words = shlex.split(line)
        assert words[:2] == [".venv/bin/python", "manage.py"], line
        call_command(*words[2:])

    made = people["admin"].api("post", "/api/agents", json.loads(definition))
    assert made.status_code == 201, made.content
    opened = people["release-bot"].api("post", "/api/agents/release-gate/requests", json.loads(opening))
    assert opened.status_code == 201, opened.content
    rid = opened.json()["requestId"]
    first = people["operator"].api("post", f"/api/requests/{rid}/responses", {"approved": True})
    said = json.loads(recorded)
    assert {key: first.json()[key] for key in said} == said
    standing = people["operator"].api("get", f"/api/requests/{rid}").json()["quorum"]
    assert f'"quorum": {json.dumps(standing)}' in DOC.replace("\n", " "), standing
    assert people["operator"].api("post", f"/api/requests/{rid}/responses", {"approved": True}).json()["status"] == (
        "already_approved_by_you"
    )
    remembering = people["operator"].api(
        "post", f"/api/requests/{rid}/responses", {"approved": True, "remember": "always"}
    )
    assert remembering.json()["code"] == "remember_not_allowed"
    assert people["admin"].api("post", f"/api/requests/{rid}/responses", {"approved": True}).json()["status"] == (
        "accepted"
    )
    assert [a["by"] for a in Receipt.objects.get(request_id=rid).body["approvals"]] == ["operator", "admin"]
    assert "1 of 2 · operator · waiting for security" in DOC

    gone = people["operator"].api("put", "/api/me/away", json.loads(away))
    assert gone.json()["away"]["delegate"] == "admin"
    second = people["release-bot"].api("post", "/api/agents/release-gate/requests", json.loads(opening)).json()
    pending = PendingRequest.objects.get(id=second["requestId"])
    assert pending.escalation == json.loads(definition)["tools"][0]["escalation"]
    people["admin"].api("post", f"/api/requests/{pending.id}/responses", {"approved": True})
    # admin approves in their own right (an admin, of security): nobody else's name is on it.
    assert Approval.objects.get(request=pending).on_behalf_of is None
    assert people["operator"].api("get", "/api/me/away").json()["away"]["until"].startswith("2031-01-02T09:00")
