"""Approvals in Slack (SPEC section 17), against a loopback stand-in of Slack's Web API (tests/slackapp/fake_slack.py)
and requests signed as Slack signs them."""

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.models import Approval, ApproverGroup, PendingRequest, Receipt, RequestStatus
from slackapp.models import SlackChannel, SlackLink, SlackMessage, SlackNotice
from slackapp.outbox import send_due, sync
from tests.conftest import Persona, grant, make_persona
from tests.helpers import assert_problem
from tests.slackapp import fake_slack
from tests.slackapp.fake_slack import FakeSlack

pytestmark = pytest.mark.django_db

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


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlack]:
    fake = fake_slack.start()
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    yield fake
    assert fake.server is not None
    fake.server.shutdown()
    fake.server.server_close()
    assert fake.invalid == [], "a payload slack_sdk's Block Kit models refuse"


@pytest.fixture
def mailer(slack: FakeSlack, admin: Persona) -> Agent:
    """An external agent asking to send e-mail, posted to #approvals of the tenant's Slack app; ada linked."""
    grant(
        "acme-slack",
        "slack",
        admin.tenant,
        api_key_env="SLACK_BOT_TOKEN",
        secret_env="SLACK_SIGNING_SECRET",
        base_url=slack.base_url,
    )
    for group in ("sre", "security"):
        ApproverGroup.objects.create(tenant=admin.tenant, name=group)
    content = DefinitionContent.model_validate({"name": "mailer", "runtime": "external", "tools": [SEND, DEPLOY]})
    agent = Agent.create(admin.tenant, content, admin.user)
    mapped = admin.api(
        "post", "/api/slack/channels", {"connection": "acme-slack", "channel": "approvals", "agent": "mailer"}
    )
    assert mapped.status_code == 201, mapped.content
    linked = admin.api("put", "/api/slack/links/ada", {"slackUserId": ADA, "slackTeamId": TEAM})
    assert linked.status_code == 200, linked.content
    return agent


def open_request(persona: Persona, tool: str = "send_email", **arguments: Any) -> str:
    body = {"kind": "approval", "toolName": tool, "arguments": arguments or {"to": "bob@example.com", "body": "hi"}}
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


def post(path: str, body: str, **headers: str) -> Any:
    return Client().post(path, data=body, content_type="application/x-www-form-urlencoded", **headers)


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


def test_it_posts_an_opened_request_and_an_approval_in_slack_decides_it(mailer, slack, operator, admin):
    rid = open_request(operator, to="<!channel> bob@example.com", body="x" * 5000)
    deliver()
    [posted] = slack.of("chat.postMessage")
    assert posted["channel"] == "approvals" and slack.calls[0].token == TOKEN
    assert buttons(posted["blocks"]) == ["Approve", "Deny", "Open in Airlock"]
    shown = text_of(posted["blocks"])
    assert "mailer: send_email" in shown and "&lt;!channel&gt; bob@example.com" in shown and "<!channel>" not in shown
    assert "x" * 1900 in shown and "x" * 2000 not in shown  # cut to a field's 2000 characters

    answered = click("airlock_approve", rid)
    assert answered.status_code == 200
    request = PendingRequest.objects.get(pk=rid)
    assert request.answer["approved"] is True and request.answered_by == admin.user and request.answered_via == "slack"
    got = receipt(admin, rid)
    assert got["authMethod"] == f"slack:{TEAM}/{ADA}" and got["answeredBy"] == "ada"
    deliver()
    [updated] = slack.of("chat.update")
    assert updated["channel"] == "C0CHANNEL" and updated["ts"] == "1700000000.000001"
    assert buttons(updated["blocks"]) == ["Open in Airlock"]
    assert "Approved by ada in Slack" in text_of(updated["blocks"])
    deliver()
    assert len(slack.of("chat.update")) == 1  # right now: nothing more to send


def test_deny_opens_a_modal_and_its_reason_denies_the_request(mailer, slack, operator, admin):
    rid = open_request(operator)
    deliver()
    assert click("airlock_deny", rid).status_code == 200
    assert PendingRequest.objects.get(pk=rid).answer is None  # only the modal so far
    [opened] = slack.of("views.open")
    assert opened["trigger_id"] == f"1234.5678.airlock_deny{ADA}" and opened["view"]["type"] == "modal"
    body = submitted(opened["view"], "not to bob")
    done = post("/slack/interactions", body, **signed(body))
    assert done.status_code == 200 and done.content == b""
    request = PendingRequest.objects.get(pk=rid)
    assert request.answer["approved"] is False and request.answer["reason"] == "not to bob"
    assert receipt(admin, rid)["authMethod"] == f"slack:{TEAM}/{ADA}"
    deliver()
    [updated] = slack.of("chat.update")
    assert "Denied by ada in Slack: not to bob" in text_of(updated["blocks"])


def test_a_bad_signature_or_a_stale_timestamp_is_401_and_changes_nothing(mailer, slack, operator):
    rid = open_request(operator)
    body = clicked("airlock_approve", rid)
    wrong = post("/slack/interactions", body, **signed(body, secret="another-secret"))
    assert_problem(wrong, 401, "invalid_signature")
    stale = post("/slack/interactions", body, **signed(body, at=int(time.time()) - 6 * 60))
    assert_problem(stale, 401, "invalid_signature")
    unsigned = post("/slack/commands", "command=%2Fairlock&text=link+ABCD")
    assert_problem(unsigned, 401, "invalid_signature")
    assert PendingRequest.objects.get(pk=rid).answer is None
    assert not SlackNotice.objects.exists()


def test_slacks_retry_changes_nothing_twice(mailer, slack, operator):
    rid = open_request(operator)
    deliver()
    body = clicked("airlock_approve", rid)
    headers = signed(body)
    assert post("/slack/interactions", body, **headers).status_code == 200
    receipts = Receipt.objects.count()
    retried = post(
        "/slack/interactions", body, HTTP_X_SLACK_RETRY_NUM="1", HTTP_X_SLACK_RETRY_REASON="http_timeout", **headers
    )
    assert retried.status_code == 200
    assert Receipt.objects.count() == receipts and not SlackNotice.objects.exists()


def test_an_unlinked_slack_user_is_told_so_and_nothing_changes(mailer, slack, operator):
    rid = open_request(operator)
    deliver()
    assert click("airlock_approve", rid, user="U0STRANGER").status_code == 200
    deliver()
    [told] = slack.of("chat.postEphemeral")
    assert told["user"] == "U0STRANGER" and told["channel"] == "C0CHANNEL" and "/airlock link" in told["text"]
    assert PendingRequest.objects.get(pk=rid).answer is None and not slack.of("chat.update")


def test_a_member_outside_the_group_is_told_so_and_nothing_changes(mailer, slack, operator, admin):
    admin.api("put", "/api/slack/links/otto", {"slackUserId": "U0OTTO", "slackTeamId": TEAM})
    rid = open_request(operator, "deploy", service="billing")
    deliver()
    for action in ("airlock_approve", "airlock_deny"):
        assert click(action, rid, user="U0OTTO").status_code == 200
    deliver()
    told = slack.of("chat.postEphemeral")
    assert len(told) == 2 and all("only members of those groups and admins" in t["text"] for t in told)
    assert PendingRequest.objects.get(pk=rid).answer is None and not Approval.objects.exists()
    assert not slack.of("views.open")


def test_a_request_decided_elsewhere_has_its_message_updated(mailer, slack, operator, admin):
    rid = open_request(operator)
    deliver()
    admin.api("post", f"/api/requests/{rid}/responses", {"approved": False, "reason": "no"})
    deliver()
    [updated] = slack.of("chat.update")
    assert "Denied by ada through the API: no" in text_of(updated["blocks"])
    assert buttons(updated["blocks"]) == ["Open in Airlock"]


def test_while_slack_is_down_nothing_is_lost_and_every_message_is_right_once_it_is_back(mailer, slack, operator, admin):
    first = open_request(operator)
    deliver()
    slack.down = True
    second = open_request(operator)
    deliver()  # the second's post fails
    # Answers go on while Slack is down.
    for rid in (first, second):
        answered = admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
        assert answered.json()["status"] == "accepted"
    deliver()
    assert SlackMessage.objects.filter(due_at__isnull=False).count() == 2
    assert SlackMessage.objects.filter(attempts__gt=0).exists()
    later = timezone.now() + timedelta(minutes=1)
    deliver(later)  # still down a minute on
    slack.down = False
    deliver(timezone.now() + timedelta(minutes=10))
    assert not SlackMessage.objects.filter(due_at__isnull=False).exists()
    by_ts = {body["ts"]: body for body in slack.of("chat.update")}
    [late_post] = [body for body in slack.of("chat.postMessage") if "Approved by ada" in text_of(body["blocks"])]
    assert buttons(late_post["blocks"]) == ["Open in Airlock"]
    assert "Approved by ada through the API" in text_of(by_ts["1700000000.000001"]["blocks"])
    assert SlackMessage.objects.filter(final=True).count() == 2


def test_a_quorum_shows_its_progress_in_the_message(mailer, slack, operator, admin):
    people = {name: make_persona(name, admin.tenant, "operator") for name in ("sam", "sue")}
    ApproverGroup.objects.get(tenant=admin.tenant, name="sre").members.add(people["sam"].user)
    ApproverGroup.objects.get(tenant=admin.tenant, name="security").members.add(people["sue"].user)
    for name in people:
        admin.api("put", f"/api/slack/links/{name}", {"slackUserId": f"U0{name.upper()}", "slackTeamId": TEAM})
    rid = open_request(operator, "deploy", service="billing")
    deliver()
    [posted] = slack.of("chat.postMessage")
    assert "For sre or security" in text_of(posted["blocks"]) and "0 of 2 approvals" in text_of(posted["blocks"])
    click("airlock_approve", rid, user="U0SAM")
    deliver()
    [progress] = slack.of("chat.update")
    assert "1 of 2 approvals (sam)" in text_of(progress["blocks"]) and "waiting for security" in text_of(
        progress["blocks"]
    )
    assert buttons(progress["blocks"]) == ["Approve", "Deny", "Open in Airlock"]
    # sam again: told, nothing counted twice.
    click("airlock_approve", rid, user="U0SAM")
    click("airlock_approve", rid, user="U0SUE")
    deliver()
    assert any("approved these arguments before" in t["text"] for t in slack.of("chat.postEphemeral"))
    last = slack.of("chat.update")[-1]
    assert "Approved by sue in Slack" in text_of(last["blocks"]) and buttons(last["blocks"]) == ["Open in Airlock"]
    assert PendingRequest.objects.get(pk=rid).answer["approved"] is True
    assert [a["authMethod"] for a in receipt(admin, rid)["approvals"]] == [f"slack:{TEAM}/U0SAM", f"slack:{TEAM}/U0SUE"]


def test_a_member_links_their_slack_user_with_a_one_time_code(slack, admin, operator):
    grant(
        "acme-slack",
        "slack",
        admin.tenant,
        api_key_env="SLACK_BOT_TOKEN",
        secret_env="SLACK_SIGNING_SECRET",
        base_url=slack.base_url,
    )
    page = operator.client.post("/notifications/slack/code/", follow=True)
    said = next(str(m) for m in page.context["messages"])
    code = said.split("/airlock link ")[1].split(" ")[0]
    body = urlencode(
        {
            "command": "/airlock",
            "text": f"link {code}",
            "user_id": "U0OTTO",
            "team_id": TEAM,
            "channel_id": "D0DM",
            "trigger_id": "1.2.3",
            "response_url": "https://hooks.slack.com/x",
        }
    )
    linked = post("/slack/commands", body, **signed(body))
    assert linked.status_code == 200 and linked.json()["response_type"] == "ephemeral"
    assert "otto" in linked.json()["text"]
    assert SlackLink.objects.get(team_id=TEAM, user_id="U0OTTO").membership == operator.membership
    # One time only.
    again = urlencode({"command": "/airlock", "text": f"link {code}", "user_id": "U0EVE", "team_id": TEAM})
    assert "unknown or expired" in post("/slack/commands", again, **signed(again)).json()["text"]
    assert "Linked to Slack user U0OTTO" in operator.client.get("/notifications/").content.decode()


def test_channels_are_the_admins_and_the_tenants_own(mailer, slack, admin, operator, outsider):
    [mapping] = admin.api("get", "/api/slack/channels").json()
    assert mapping["channel"] == "approvals" and mapping["agent"] == "mailer" and mapping["group"] is None
    refused = operator.api(
        "post", "/api/slack/channels", {"connection": "acme-slack", "channel": "x", "agent": "mailer"}
    )
    assert_problem(refused, 403, "forbidden")
    twice = admin.api(
        "post", "/api/slack/channels", {"connection": "acme-slack", "channel": "approvals", "agent": "mailer"}
    )
    assert_problem(twice, 409, "channel_exists")
    for body, code in [
        ({"connection": "nope", "channel": "x", "agent": "mailer"}, "unknown_connection"),
        ({"connection": "acme-slack", "channel": "x", "agent": "ghost"}, "unknown_agent"),
        ({"connection": "acme-slack", "channel": "x", "group": "ghost"}, "unknown_group"),
        ({"connection": "acme-slack", "channel": "x"}, "invalid_channel"),
        ({"connection": "acme-slack", "channel": "no spaces", "agent": "mailer"}, "invalid_channel"),
    ]:
        assert_problem(admin.api("post", "/api/slack/channels", body), 400, code)
    assert outsider.api("get", "/api/slack/channels").json() == []
    # Their connection is not granted to globex: the same answer as one that does not exist.
    theirs = outsider.api(
        "post", "/api/slack/channels", {"connection": "acme-slack", "channel": "x", "agent": "mailer"}
    )
    assert_problem(theirs, 400, "unknown_connection")
    assert_problem(outsider.api("delete", f"/api/slack/channels/{mapping['id']}"), 404, "channel_not_found")
    assert_problem(admin.api("delete", "/api/slack/channels/99999999999999999999"), 400, "invalid_request")
    assert_problem(
        admin.api("put", "/api/slack/links/nobody", {"slackUserId": "U1", "slackTeamId": TEAM}), 404, "member_not_found"
    )
    assert_problem(
        admin.api("put", "/api/slack/links/otto", {"slackUserId": "u-1", "slackTeamId": TEAM}), 400, "invalid_request"
    )
    assert admin.api("delete", f"/api/slack/channels/{mapping['id']}").status_code == 204
    assert not SlackChannel.objects.exists()


def test_the_tenant_page_maps_a_group_to_a_channel(mailer, slack, admin):
    page = admin.client.get("/tenant/")
    assert "Slack channels" in page.content.decode() and "the requests of agent mailer" in page.content.decode()
    bad = admin.client.post(
        "/tenant/slack/channels/", {"connection": "acme-slack", "channel": "#bad name", "target": "group:sre"}
    )
    assert bad.status_code == 400 and "Give a channel" in bad.content.decode()
    added = admin.client.post(
        "/tenant/slack/channels/", {"connection": "acme-slack", "channel": "#sre", "target": "group:sre"}
    )
    assert added.status_code == 302
    assert SlackChannel.objects.get(group__name="sre").channel == "sre"


def test_a_groups_channel_wins_over_its_agents_for_a_routed_request(mailer, slack, admin, operator):
    admin.api("post", "/api/slack/channels", {"connection": "acme-slack", "channel": "C0SRE", "group": "sre"})
    routed = open_request(operator, "deploy", service="billing")
    plain = open_request(operator)
    deliver()
    posted = {(body["channel"], "deploy" in text_of(body["blocks"])) for body in slack.of("chat.postMessage")}
    assert posted == {("C0SRE", True), ("approvals", False)}
    assert SlackMessage.objects.get(request_id=routed).channel == "C0SRE"
    assert SlackMessage.objects.get(request_id=plain).channel == "approvals"
    assert PendingRequest.objects.get(pk=routed).status == RequestStatus.PENDING


def test_a_slack_connection_needs_its_two_variables_and_defaults_its_base_url(acme):
    with pytest.raises(ValidationError) as refused:
        grant("half-slack", "slack", acme, api_key_env="SLACK_BOT_TOKEN")
    assert "secret_env" in refused.value.message_dict
    made = grant("whole-slack", "slack", acme, api_key_env="SLACK_BOT_TOKEN", secret_env="SLACK_SIGNING_SECRET")
    assert made.base_url == "https://slack.com/api" and made.spec.api_key_env == "SLACK_BOT_TOKEN"
    with pytest.raises(ValidationError):
        grant("odd-slack", "slack", acme, api_key_env="A", secret_env="B", url="https://example.com/hook")


def test_many_arguments_are_cut_to_ten_fields(mailer, slack, operator):
    open_request(operator, **{f"arg{n:02d}": n for n in range(14)})
    deliver()
    [posted] = slack.of("chat.postMessage")
    [fields] = [b["fields"] for b in posted["blocks"] if b["type"] == "section" and "fields" in b]
    assert len(fields) == 10 and "and 5 more arguments" in fields[-1]["text"]
