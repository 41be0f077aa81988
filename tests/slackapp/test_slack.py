"""Approvals in Slack (SPEC section 17), against a loopback stand-in of Slack's Web API (tests/slackapp/fake_slack.py)
and requests signed as Slack signs them: posting, clicks, the deny modal, signatures, retries, channels and links.
The outbox through outages and every way a request ends: test_slack_outbox.py."""

import json
import re
import time
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.db import OperationalError
from django.test import Client
from django.urls import reverse

from approvals.models import Approval, ApproverGroup, PendingRequest, Receipt, RequestStatus
from slackapp import inbound
from slackapp.answering import answer_in_slack
from slackapp.models import SlackChannel, SlackLink, SlackMessage, SlackNotice
from tests.conftest import grant, make_persona
from tests.helpers import assert_problem
from tests.slackapp.helpers import (
    ADA,
    TEAM,
    TOKEN,
    buttons,
    click,
    clicked,
    deliver,
    open_request,
    post,
    receipt,
    signed,
    slack_app,
    submitted,
    text_of,
)

pytestmark = pytest.mark.django_db


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


@pytest.mark.parametrize("path", ["/slack/interactions", "/slack/commands"])
def test_a_body_that_is_not_utf8_is_401_and_changes_nothing(mailer, slack, operator, path):
    """Slack sends UTF-8: slack_sdk's verifier decoded the body before checking anything, and failed (500)."""
    headers = {"HTTP_X_SLACK_REQUEST_TIMESTAMP": str(int(time.time())), "HTTP_X_SLACK_SIGNATURE": "v0=deadbeef"}
    response = Client().post(path, data=b"\xff", content_type="application/x-www-form-urlencoded", **headers)
    assert_problem(response, 401, "invalid_signature")
    assert not SlackNotice.objects.exists()


def test_a_signed_payload_nested_past_what_python_reads_is_400(mailer, slack, operator):
    body = urlencode({"payload": "[" * 100_000})
    assert_problem(post("/slack/interactions", body, **signed(body)), 400, "invalid_request")


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


def test_a_question_has_no_buttons_and_a_forged_approve_of_it_changes_nothing(mailer, slack, operator, admin):
    opened = operator.api("post", "/api/agents/mailer/requests", {"kind": "question", "question": "Which colour?"})
    assert opened.status_code == 201, opened.content
    rid = str(opened.json()["requestId"])
    deliver()
    [posted] = slack.of("chat.postMessage")
    assert buttons(posted["blocks"]) == ["Open in Airlock"]  # more than a yes or no answers it
    assert click("airlock_approve", rid).status_code == 200  # a click Slack never sends: no such button
    deliver()
    [told] = slack.of("chat.postEphemeral")
    assert "answer it in Airlock" in told["text"] and "Nothing was changed" in told["text"]
    assert PendingRequest.objects.get(pk=rid).answer is None


def test_a_request_decided_elsewhere_has_its_message_updated(mailer, slack, operator, admin):
    rid = open_request(operator)
    deliver()
    admin.api("post", f"/api/requests/{rid}/responses", {"approved": False, "reason": "no"})
    deliver()
    [updated] = slack.of("chat.update")
    assert "Denied by ada through the API: no" in text_of(updated["blocks"])
    assert buttons(updated["blocks"]) == ["Open in Airlock"]


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
    slack_app(admin, slack)
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
    # Slack's retry of the command changes nothing (the code is spent: it is not told "unknown or expired").
    retried = post("/slack/commands", body, HTTP_X_SLACK_RETRY_NUM="1", **signed(body))
    assert retried.status_code == 200 and retried.content == b""
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


def test_a_retry_after_a_click_that_failed_is_answered(mailer, slack, operator, admin, monkeypatch):
    rid = open_request(operator)
    deliver()
    failures = [OperationalError("the database went away")]

    def answer_after_a_failure(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return answer_in_slack(*args, **kwargs)

    monkeypatch.setattr(inbound, "answer_in_slack", answer_after_a_failure)
    body = clicked("airlock_approve", rid)
    headers = signed(body)
    failed = post("/slack/interactions", body, Client(raise_request_exception=False), **headers)
    assert failed.status_code == 500 and PendingRequest.objects.get(pk=rid).answer is None
    retried = post("/slack/interactions", body, HTTP_X_SLACK_RETRY_NUM="1", **headers)
    assert retried.status_code == 200
    request = PendingRequest.objects.get(pk=rid)
    assert request.answer["approved"] is True and request.answered_by == admin.user
    assert receipt(admin, rid)["authMethod"] == f"slack:{TEAM}/{ADA}"


def test_deny_from_an_unlinked_slack_user_opens_nothing_and_changes_nothing(mailer, slack, operator):
    rid = open_request(operator)
    deliver()
    assert click("airlock_deny", rid, user="U0STRANGER").status_code == 200
    deliver()
    [told] = slack.of("chat.postEphemeral")
    assert told["user"] == "U0STRANGER" and "/airlock link" in told["text"]
    assert not slack.of("views.open")
    # A modal's submission from them (a form opened for someone else, replayed) is refused in the modal.
    view = {"type": "modal", "callback_id": "airlock_deny_reason", "private_metadata": json.dumps({"request": rid})}
    body = submitted(view, "no", user="U0STRANGER")
    refused = post("/slack/interactions", body, **signed(body))
    assert refused.json()["response_action"] == "errors" and "/airlock link" in refused.json()["errors"]["reason"]
    assert PendingRequest.objects.get(pk=rid).answer is None and not slack.of("chat.update")


def test_the_manifest_in_the_docs_is_what_slack_needs(settings):
    """docs/slack.md's manifest, pasted into Slack: its addresses are Airlock's routes, its scopes cover every
    method the app calls."""
    doc = (settings.BASE_DIR / "docs" / "slack.md").read_text()
    manifest = yaml.safe_load(doc.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert manifest["display_information"]["name"] and manifest["features"]["bot_user"]["display_name"]
    [command] = manifest["features"]["slash_commands"]
    base = "https://airlock.example.com"
    assert command["command"] == "/airlock" and command["url"] == base + reverse("slack_commands")
    assert command["description"] and command["usage_hint"].startswith("link")
    interactivity = manifest["settings"]["interactivity"]
    assert interactivity == {"is_enabled": True, "request_url": base + reverse("slack_interactions")}
    assert manifest["settings"]["socket_mode_enabled"] is False  # Slack posts to the request URLs
    # The Web API methods slackapp calls (docs.slack.dev: each method's required scope; views.open needs none).
    needs = {"chat_postMessage": "chat:write", "chat_update": "chat:write", "chat_postEphemeral": "chat:write"}
    needs |= {"views_open": None}
    called = set()
    for module in (settings.BASE_DIR / "slackapp").glob("*.py"):
        called |= set(re.findall(r"\.((?:chat|views|users|conversations)_[A-Za-z]+)\(", module.read_text()))
    assert called == set(needs), "a method this test does not know the scope of"
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {scope for scope in needs.values() if scope} | {"commands"} <= scopes
