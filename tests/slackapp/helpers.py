"""What the Slack tests share: the stand-in's secrets, requests opened by the mailer, the outbox's pass, and requests
signed and shaped as Slack sends them."""

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

from django.test import Client, TestCase

from slackapp.outbox import send_due, sync
from tests.conftest import Persona, grant

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-airlock-tests"
TEAM = "T0ACME"
ADA = "U0ADA"
SEND = {
    "name": "send_email",
    "description": "Send an e-mail",
    "approval": "always",
    "parameters": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}},
}
DEPLOY = {
    "name": "deploy",
    "approval": "always",
    "approvers": ["sre", "security"],
    "require": {"approvals": 2, "fromEach": ["sre", "security"]},
}
# Routed to sre; sre-leads may answer too once nobody did for 5 s (SPEC section 14).
ROLLBACK = {
    "name": "rollback",
    "approval": "always",
    "approvers": "sre",
    "escalation": [{"after": "5s", "to": ["sre-leads"]}],
}
LOOKUP = {"name": "lookup", "approval": "never"}  # approved as it opens: nobody is asked


def slack_app(admin: Persona, slack: Any) -> None:
    """The installation's Slack connection `acme-slack`, granted to the admin's tenant, talking to `slack` (the
    loopback stand-in) with the tests' token and signing secret."""
    grant(
        "acme-slack",
        "slack",
        admin.tenant,
        api_key_env="SLACK_BOT_TOKEN",
        secret_env="SLACK_SIGNING_SECRET",
        base_url=slack.base_url,
    )


def open_request(persona: Persona, tool: str = "send_email", *, expires_in: int | None = None, **arguments: Any) -> str:
    """An approval the mailer asks for (POST /api/agents/mailer/requests); its id."""
    body: dict[str, Any] = {"kind": "approval", "toolName": tool}
    body["arguments"] = arguments or {"to": "bob@example.com", "body": "hi"}
    if expires_in is not None:
        body["expiresIn"] = expires_in
    opened = persona.api("post", "/api/agents/mailer/requests", body)
    assert opened.status_code == 201, opened.content
    return str(opened.json()["requestId"])


def deliver(now: Any = None) -> None:
    """What the outbox loop of `manage.py serve` does at each tick."""
    sync(now)
    send_due(now)


def signed(body: str, at: int | None = None, secret: str = SECRET) -> dict[str, str]:
    """The headers Slack sends with `body`: v0, HMAC-SHA256 over `v0:timestamp:body`."""
    timestamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp, "HTTP_X_SLACK_SIGNATURE": f"v0={digest}"}


def post(path: str, body: str, client: Client | None = None, **headers: str) -> Any:
    """`body` posted as Slack posts it; what the view left to do once its transaction committed is done, as it is
    outside the test's transaction (the deny modal, waking the outbox)."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        return (client or Client()).post(path, data=body, content_type="application/x-www-form-urlencoded", **headers)


def clicked(action: str, rid: str, user: str = ADA) -> str:
    """A `block_actions` payload as Slack sends it when `user` clicks a button of the message."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": "someone", "name": "someone", "team_id": TEAM},
        "api_app_id": "A0AIRLOCK",
        "token": "verification-token",
        "container": {"type": "message", "message_ts": "1700000000.000001", "channel_id": "C0CHANNEL"},
        "trigger_id": f"1234.5678.{action}{user}",
        "team": {"id": TEAM, "domain": "acme"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": "C0CHANNEL", "name": "approvals"},
        "message": {"type": "message", "ts": "1700000000.000001", "text": "…"},
        "state": {"values": {}},
        "response_url": "https://hooks.slack.com/actions/T0ACME/1/abc",
        "actions": [
            {
                "action_id": action,
                "block_id": "b1",
                "text": {"type": "plain_text", "text": "Approve", "emoji": True},
                "value": rid,
                "type": "button",
                "action_ts": str(time.time()),
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)})


def click(action: str, rid: str, user: str = ADA, **headers: str) -> Any:
    body = clicked(action, rid, user)
    return post("/slack/interactions", body, **signed(body), **headers)


def submitted(view: dict[str, Any], reason: str, user: str = ADA) -> str:
    """The `view_submission` Slack sends when `user` submits the modal Airlock opened (`view`, as views.open got it)."""
    payload = {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "acme"},
        "user": {"id": user, "username": "ada", "name": "ada", "team_id": TEAM},
        "api_app_id": "A0AIRLOCK",
        "token": "verification-token",
        "trigger_id": "1234.5678.submit",
        "view": {
            **view,
            "id": "V0VIEW",
            "team_id": TEAM,
            "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": reason}}}},
            "hash": "1700000000.abc",
        },
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }
    return urlencode({"payload": json.dumps(payload)})


def buttons(blocks: list[dict[str, Any]]) -> list[str]:
    return [e["text"]["text"] for b in blocks if b["type"] == "actions" for e in b["elements"]]


def text_of(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks)


def receipt(persona: Persona, rid: str) -> dict[str, Any]:
    got = persona.api("get", f"/api/requests/{rid}/receipt")
    assert got.status_code == 200, got.content
    return dict(got.json())
