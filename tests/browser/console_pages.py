"""Every console page with something on it, for the tests that walk them all (layout, accessibility) and for
`make screens` (tests/browser/screens.py): an agent with two versions and parameters, a run waiting for an
approval, an answered one remembered as a rule, so the inbox, the runs, the rules and the audit have rows."""

import json
from dataclasses import dataclass
from uuid import uuid4

from tests.processes.cluster import Api

EMAIL = {"to": "ops@example.com", "subject": "Weekly report", "body": "Numbers attached; nothing unusual."}
SEND = f"call send_email {json.dumps(EMAIL)}"

# The logins the walks use, by role (tests/browser/conftest.py `acme_team`, seed_demo for `make screens`).
ROLES = ("admin", "operator", "reader")


@dataclass(frozen=True)
class ConsolePage:
    name: str  # also the screenshot's file name
    path: str


def prepare(admin: Api, operator: Api, prefix: str = "walk", name: str | None = None) -> list[ConsolePage]:
    """Make an agent (`name`, else `prefix` and a random suffix), its runs and a rule through the API; the
    pages that show them, login excluded."""
    name = name or f"{prefix}-{uuid4().hex[:6]}"
    tools = [{"name": "send_email", "approval": "always"}, {"name": "get_time"}]
    definition = {
        "name": name,
        "displayName": "Weekly reporter",
        "description": "Writes the weekly report and mails it to the team once someone approves.",
        "instructions": "You write short reports for {{team}}.",
        "parameters": [{"name": "team", "default": "operations", "description": "Who reads the report"}],
        "tools": tools,
    }
    admin.ok("POST", "/api/agents", definition)
    admin.ok("PUT", f"/api/agents/{name}", {**definition, "instructions": "You write short, friendly reports."})
    waiting_email = {**EMAIL, "to": "finance@example.com"}
    session = uuid4().hex
    waiting = admin.ok(
        "POST",
        f"/api/agents/{name}/runs",
        {"message": f"call send_email {json.dumps(waiting_email)}", "sessionId": session},
    )
    assert waiting["status"] == "awaiting_approval", waiting
    remembered = admin.ok("POST", f"/api/agents/{name}/runs", {"message": SEND, "sessionId": uuid4().hex})
    request_id = remembered["pendingRequests"][0]["requestId"]
    operator.ok(
        "POST",
        f"/api/runs/{remembered['runId']}/responses",
        {"requestId": request_id, "approved": True, "remember": True},
    )
    return [
        ConsolePage("dashboard", "/"),
        ConsolePage("agents", "/agents/"),
        ConsolePage("agent", f"/agents/{name}/"),
        ConsolePage("agent-edit", f"/agents/{name}/edit/"),
        ConsolePage("versions", f"/agents/{name}/versions/"),
        ConsolePage("diff", f"/agents/{name}/diff/?a=1&b=2"),
        ConsolePage("trial", f"/trial/?agent={name}&session={session}"),
        # The agent's own requests: other tests' cards on a shared server would weigh on the page.
        ConsolePage("inbox", f"/inbox/?agent={name}"),
        ConsolePage("rules", "/rules/"),
        ConsolePage("runs", "/runs/"),
        ConsolePage("run", f"/runs/{waiting['runId']}/"),
        ConsolePage("audit", "/audit/"),
        ConsolePage("receipts", "/receipts/"),
        ConsolePage("receipt", f"/receipts/request/{request_id}/"),
        ConsolePage("tokens", "/tokens/"),
        ConsolePage("tenant", "/tenant/"),
        ConsolePage("notifications", "/notifications/"),
        ConsolePage("not-found", "/no-such-page/"),
    ]
