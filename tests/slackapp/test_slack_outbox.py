"""The Slack outbox (SPEC section 17): a message for every request that was open, right after any way it ends, and
right at the first pass after Slack comes back from an outage. Passes are driven in simulated time, every 2 s as
`manage.py serve` runs them (`SLACK_OUTBOX_SECONDS`)."""

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from approvals.actions import escalate_due, expire_due
from approvals.models import PendingRequest
from console.models import Connection
from slackapp import outbox
from slackapp.models import SlackMessage, SlackNotice
from tests.conftest import Persona
from tests.slackapp.fake_slack import FakeSlack
from tests.slackapp.helpers import buttons, click, deliver, open_request, text_of

pytestmark = pytest.mark.django_db

PASS = timedelta(seconds=2)


@contextmanager
def down(slack: FakeSlack) -> Iterator[None]:
    """Slack answers 503 to everything for the block."""
    slack.down = True
    try:
        yield
    finally:
        slack.down = False


@contextmanager
def unreachable(slack: FakeSlack) -> Iterator[None]:
    """Slack's address refuses connections (nothing listens there) for the block."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    Connection.objects.filter(name="acme-slack").update(base_url=f"http://127.0.0.1:{port}/api/")
    try:
        yield
    finally:
        Connection.objects.filter(name="acme-slack").update(base_url=slack.base_url)


def passes(start: datetime, until: float) -> Iterator[datetime]:
    """The passes from `start` up to (not at) `until` seconds after it, every 2 s."""
    at = start
    while at < start + timedelta(seconds=until):
        yield at
        at += PASS


@pytest.mark.parametrize("how", ["503", "refused"])
@pytest.mark.parametrize("outage", [60, 61, 65, 67, 70])
def test_after_slack_was_down_a_minute_every_message_is_right_at_the_first_pass(
    mailer, slack, operator, admin, outage, how
):
    start = timezone.now()
    first = open_request(operator)
    deliver(start)
    with unreachable(slack) if how == "refused" else down(slack):
        # While Slack is down, a click needs telling, requests open and are answered.
        click("airlock_approve", first, user="U0STRANGER")
        second = open_request(operator)
        open_request(operator)  # the third, still open when Slack is back
        for rid in (first, second):
            answered = admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
            assert answered.json()["status"] == "accepted"
        outage_passes = list(passes(start, outage))
        for at in outage_passes:
            deliver(at)
        assert slack.refused <= len(outage_passes)  # a down Slack is asked once a pass, not once a message
    back = outage_passes[-1] + PASS  # the first pass after Slack came back, `outage` seconds after `start`
    deliver(back)
    assert not SlackMessage.objects.filter(due_at__isnull=False).exists() and not SlackNotice.objects.exists()
    now = {ts: text_of(blocks) for ts, blocks in slack.messages.items()}
    assert len(now) == 3 and "Approved by ada through the API" in now["1700000000.000001"]
    assert sorted(buttons(blocks) for blocks in slack.messages.values()) == [
        ["Approve", "Deny", "Open in Airlock"],  # the third
        ["Open in Airlock"],
        ["Open in Airlock"],
    ]
    assert sum("Approved by ada through the API" in blocks for blocks in now.values()) == 2
    [told] = slack.of("chat.postEphemeral")
    assert told["user"] == "U0STRANGER" and "/airlock link" in told["text"]
    assert {PendingRequest.objects.get(pk=rid).answer["approved"] for rid in (first, second)} == {True}


def test_slacks_retry_after_holds_every_message_of_the_connection(mailer, slack, operator):
    start = timezone.now()
    slack.limited = "30"
    for _ in range(3):
        open_request(operator)
    deliver(start)
    assert slack.refused == 1 and SlackMessage.objects.filter(due_at=start + timedelta(seconds=30)).count() == 3
    for at in passes(start + PASS, 28):
        deliver(at)
    assert slack.refused == 1  # nothing asked before Slack said
    slack.limited = None
    deliver(start + timedelta(seconds=30))
    assert len(slack.of("chat.postMessage")) == 3


def test_a_message_slack_refuses_waits_on_its_own_and_the_others_go(mailer, slack, admin, operator):
    admin.api("post", "/api/slack/channels", {"connection": "acme-slack", "channel": "C0GONE", "group": "sre"})
    slack.failing["C0GONE"] = "channel_not_found"
    start = timezone.now()
    routed = open_request(operator, "rollback", version="41")
    open_request(operator)
    deliver(start)
    assert len(slack.of("chat.postMessage")) == 2  # one refused, one posted: the connection is up
    gone = SlackMessage.objects.get(request_id=routed)
    assert gone.attempts == 1 and gone.due_at == start + timedelta(seconds=2) and "channel_not_found" in gone.last_error
    deliver(start + PASS)
    deliver(start + PASS * 2)  # its second failure put it 4 s on: not due at the next pass
    assert len(slack.of("chat.postMessage")) == 3


def test_a_request_that_ended_before_a_pass_is_posted_as_it_ended(mailer, slack, operator, admin):
    answered, cancelled = open_request(operator), open_request(operator)
    open_request(operator, "lookup", query="x")  # approved as it opened: nobody was asked, nothing to post
    admin.api("post", f"/api/requests/{answered}/responses", {"approved": False, "reason": "not now"})
    assert operator.api("delete", f"/api/requests/{cancelled}").status_code == 200
    deliver()
    posted = [text_of(body["blocks"]) for body in slack.of("chat.postMessage")]
    assert len(posted) == 2 and not any('"Approve"' in blocks for blocks in posted)
    assert any("Denied by ada through the API: not now" in blocks for blocks in posted)
    assert any("Cancelled by otto" in blocks for blocks in posted)
    assert SlackMessage.objects.filter(final=True).count() == 2
    deliver()
    assert len(slack.calls) == 2


def test_an_external_agents_request_wakes_the_outbox(mailer, operator):
    outbox._WAKE.clear()
    with TestCase.captureOnCommitCallbacks(execute=True):
        open_request(operator)
    assert outbox._WAKE.is_set()


def test_expiry_and_cancel_update_the_message(mailer, slack, operator):
    expiring, cancelled = open_request(operator, expires_in=60), open_request(operator)
    deliver()
    expire_due(timezone.now() + timedelta(seconds=61))
    assert operator.api("delete", f"/api/requests/{cancelled}").status_code == 200
    deliver()
    updated = {body["ts"]: text_of(body["blocks"]) for body in slack.of("chat.update")}
    ts = {rid: SlackMessage.objects.get(request_id=rid).ts for rid in (expiring, cancelled)}
    assert "Expired: nobody answered before its deadline" in updated[ts[expiring]]
    assert "Cancelled by otto" in updated[ts[cancelled]]
    assert all(buttons(body["blocks"]) == ["Open in Airlock"] for body in slack.of("chat.update"))


def test_an_escalation_posts_the_request_to_the_added_groups_channel(mailer, slack, admin: Persona, operator):
    for group, channel in (("sre", "C0SRE"), ("sre-leads", "C0LEADS")):
        mapped = admin.api(
            "post", "/api/slack/channels", {"connection": "acme-slack", "channel": channel, "group": group}
        )
        assert mapped.status_code == 201
    rid = open_request(operator, "rollback", version="41")
    deliver()
    assert [body["channel"] for body in slack.of("chat.postMessage")] == ["C0SRE"]
    opened_at = PendingRequest.objects.get(pk=rid).opened_at
    assert escalate_due(opened_at + timedelta(seconds=5))
    deliver()
    [_, leads] = slack.of("chat.postMessage")
    assert leads["channel"] == "C0LEADS" and "For sre or sre-leads" in text_of(leads["blocks"])
    assert buttons(leads["blocks"]) == ["Approve", "Deny", "Open in Airlock"]
    [widened] = slack.of("chat.update")  # the sre channel's message says who may answer now
    assert "For sre or sre-leads" in text_of(widened["blocks"])
    admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
    deliver()
    ended = slack.of("chat.update")[1:]
    assert len(ended) == 2 and all("Approved by ada through the API" in text_of(body["blocks"]) for body in ended)
