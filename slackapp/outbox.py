"""The outbox to Slack (SPEC section 17): every message Slack must show is a row, sent by a loop with retries, so a
Slack outage never blocks or loses an answer and every message is right as soon as Slack is back.

`sync` reads what Slack must show from the requests themselves, whoever changed them (the inbox, the API, Slack,
a rule, the deadline sweep, an escalation): a request of a mapped agent or group gets a `SlackMessage` in each of its
channels (`slackapp.channels.channels_for`, again when an escalation adds groups), posted as it ended when it ended
before a pass saw it open; a message whose request moved on (an approval toward its quorum, its end) since Slack last
showed it (`shown`) is due again. Nothing below this app tells it anything: it reads committed state, so a process
that dies between a decision and its announcement loses nothing either. `send_due` sends what is due, each row
rendered from its request as it is at that moment (chat.postMessage once, chat.update after), and the ephemeral
notices (chat.postEphemeral).

A failure of the connection (Slack did not answer, answered 5xx or 429) leaves the row due and the connection alone
for the rest of the pass: each pass asks a down Slack once, with the row due first, and the pass after it is back
sends everything (Slack's Retry-After holds all the connection's rows that long). A failure of the row (Slack
answered with an error of its own, or a 5xx after another call of the pass went through) leaves it due later, 2, 4,
8 … at most 300 s. Several processes may run the loop: a row is sent under a lease taken by a conditional update,
and placing a request twice finds its rows (unique per request and channel).
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections, transaction
from django.db.models import Case, Count, Exists, F, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from slack_sdk.errors import SlackApiError

from approvals.models import OPEN, Approval, PendingRequest
from approvals.tallies import standing
from console.models import Connection, ConnectionKind, Tenant
from console.sql import Constant
from slackapp.blocks import message, state_key, state_of
from slackapp.channels import channels_for
from slackapp.models import SlackChannel, SlackDelivery, SlackMessage, SlackNotice, SlackPlaced
from slackapp.web import client_for

logger = logging.getLogger(__name__)

BATCH = 50
LEASE = timedelta(seconds=60)
MOST_BACKOFF_SECONDS = 300
# An ephemeral notice not sent by then is dropped: it answered a click nobody remembers.
NOTICE_LIFETIME = timedelta(minutes=10)
# A request that opened and ended before a pass saw it open (between two passes, or while no process ran the outbox)
# is posted as it ended when it opened this recently; older ones are history nobody waits to see in Slack.
ENDED_UNSEEN_WITHIN = timedelta(hours=1)
# Slack's signature is valid 5 minutes: a delivery's digest is kept longer than that (slackapp.models.SlackDelivery).
DELIVERIES_KEPT = timedelta(minutes=10)

# The least time from a pass's start to the next, however often it is woken: every request opened wakes the loop,
# and at a dozen conversations a second a pass for each cost 3% of a console's CPU, most of it an installation
# without Slack asking whether it uses it (bench/peer_langgraph.py, issue 56). Slack takes a message a second a
# channel: a pass sooner than this posts nothing sooner.
WAKE_GAP = 0.5

_WAKE = threading.Event()
_STARTED = threading.Lock()
_RUNNING: list[threading.Thread] = []


def wake_outbox() -> None:
    """Run the loop of this process now rather than at its next tick (an answer from Slack, a request opened)."""
    _WAKE.set()


def place_requests(now: datetime) -> int:
    """Give each request of a mapped agent or group its messages (due now): the open ones, and those that ended
    before a pass saw them open; how many requests were placed."""
    mappings = list(SlackChannel.objects.select_related("group").order_by("created_at"))
    if not mappings:
        return 0
    by_tenant: dict[int, list[SlackChannel]] = {}
    for mapping in mappings:
        by_tenant.setdefault(mapping.tenant_id, []).append(mapping)
    for tenant_id, theirs in list(by_tenant.items()):
        granted = Connection.objects.granted_to(Tenant(pk=tenant_id)).filter(kind=ConnectionKind.SLACK)
        allowed = set(granted.values_list("pk", flat=True))
        by_tenant[tenant_id] = [mapping for mapping in theirs if mapping.connection_id in allowed]
    placed = SlackPlaced.objects.filter(request=OuterRef("pk"), approvers=OuterRef("approvers"))
    unplaced = PendingRequest.objects.filter(tenant_id__in=by_tenant, opened_at__gte=mappings[0].created_at).exclude(
        Exists(placed)
    )
    # Decided after it opened: someone could have seen it open (decided as it opened, nobody was asked).
    asked = Q(answered_at__gt=F("opened_at")) | Q(answered_at__isnull=True, closed_at__gt=F("opened_at"))
    ended = unplaced.exclude(OPEN).filter(asked, opened_at__gte=now - ENDED_UNSEEN_WITHIN)
    count = 0
    for requests in (unplaced.filter(OPEN), ended):
        for request in requests.order_by("opened_at")[: BATCH * 4]:
            with transaction.atomic():
                for mapping in channels_for(request, by_tenant[request.tenant_id]):
                    SlackMessage.objects.get_or_create(
                        request=request,
                        connection_id=mapping.connection_id,
                        channel=mapping.channel,
                        defaults={"tenant_id": request.tenant_id, "due_at": now},
                    )
                SlackPlaced.objects.update_or_create(request=request, defaults={"approvers": request.approvers})
            count += 1
    return count


def sync(now: datetime | None = None) -> int:
    """Mark due what Slack must show anew: new messages (`place_requests`) and those whose request moved on since
    Slack last showed it. How many rows it made or marked due."""
    now = now or timezone.now()
    SlackDelivery.objects.filter(received_at__lt=now - DELIVERIES_KEPT).delete()
    count = place_requests(now)
    given = Approval.objects.filter(request=OuterRef("request")).order_by().values("request")
    live = (
        SlackMessage.objects.filter(final=False, due_at__isnull=True)
        .annotate(
            given=Coalesce(Subquery(given.annotate(n=Count("pk")).values("n")), 0),
            answered=Case(When(request__answer__isnull=False, then=Value(True)), default=Value(False)),
        )
        .values_list("pk", "shown", "request__status", "answered", "given", "request__approvers")
    )
    stale = [pk for pk, shown, *state in live if state_key(*state) != shown]
    if stale:
        count += SlackMessage.objects.filter(pk__in=stale, due_at__isnull=True).update(due_at=now)
    return count


def _lease_free(now: datetime) -> Q:
    return Q(leased_until__isnull=True) | Q(leased_until__lt=now)


def _why(error: Exception) -> str:
    if isinstance(error, SlackApiError):
        return f"Slack answered {error.response.status_code}: {error.response.get('error') or 'error'}"[:500]
    return f"{type(error).__name__}: {error}"[:500]


def _retry_after(error: Exception) -> timedelta | None:
    """How long Slack said to wait (`Retry-After`, in seconds; at most 300), if it said."""
    if not isinstance(error, SlackApiError):
        return None
    headers = {str(name).lower(): value for name, value in (error.response.headers or {}).items()}
    said = str(headers.get("retry-after") or "").strip()
    return timedelta(seconds=min(int(said), MOST_BACKOFF_SECONDS)) if said.isdigit() else None


@dataclass
class _Pass:
    """What a pass of `send_due` learnt of the connections: which answered, which are down until the next pass."""

    now: datetime
    answered: set[int] = field(default_factory=set)
    down: set[int] = field(default_factory=set)


def send_due(now: datetime | None = None) -> int:
    """Send the messages and notices that are due; how many went out."""
    this = _Pass(now or timezone.now())
    SlackNotice.objects.filter(created_at__lt=this.now - NOTICE_LIFETIME).delete()
    return _send_rows(SlackMessage, this, _send_message) + _send_rows(SlackNotice, this, _send_notice)


def _send_rows(model: Any, this: _Pass, send: Callable[[Any, datetime, datetime], Exception | None]) -> int:
    """Send `model`'s due rows, oldest first, `BATCH` at a time, none through a connection down in this pass; how
    many went out. A connection that goes down in a batch leaves room for others' rows: they are read again."""
    sent = 0
    while True:
        due = model.objects.filter(_lease_free(this.now), due_at__lte=this.now).exclude(connection_id__in=this.down)
        rows = list(due.select_related("connection").order_by("due_at", "pk")[:BATCH])
        skipped = False
        for row in rows:
            if row.connection_id in this.down:
                skipped = True
                continue
            lease = this.now + LEASE
            if not model.objects.filter(_lease_free(this.now), pk=row.pk).update(leased_until=lease):
                continue  # another process sends it
            error = send(row, lease, this.now)
            if error is None:
                this.answered.add(row.connection_id)
                sent += 1
            else:
                _failed(model, row, lease, this, error)
        if not skipped or len(rows) < BATCH:
            return sent


def _send_message(row: SlackMessage, lease: datetime, now: datetime) -> Exception | None:
    """Post or update one message as its request stands now; the error when Slack refused or did not answer."""
    request = PendingRequest.objects.select_related("agent", "answered_by", "answered_for", "closed_by").get(
        pk=row.request_id
    )
    approvals = list(request.approvals.all())
    state = state_of(request, len(approvals))
    text, blocks = message(request, standing(request))
    try:
        client = client_for(row.connection)
        if row.ts:
            client.chat_update(channel=row.channel_id, ts=row.ts, text=text, blocks=blocks)
            posted: dict[str, Any] = {}
        else:
            answer = client.chat_postMessage(channel=row.channel, text=text, blocks=blocks)
            posted = {"ts": str(answer["ts"]), "channel_id": str(answer["channel"])}
    except Exception as error:
        if isinstance(error, SlackApiError) and error.response.get("error") == "message_not_found":
            posted = {"ts": "", "channel_id": ""}  # deleted in Slack: posted anew next time
            SlackMessage.objects.filter(pk=row.pk, leased_until=lease).update(**posted)
        return error
    done = {"shown": state.key, "final": state.decided, "due_at": None, "attempts": 0, "last_error": ""}
    SlackMessage.objects.filter(pk=row.pk, leased_until=lease).update(**posted, **done, leased_until=None)
    return None


def _send_notice(notice: SlackNotice, lease: datetime, now: datetime) -> Exception | None:
    """Send one ephemeral notice; the error when Slack refused it or did not answer."""
    try:
        client_for(notice.connection).chat_postEphemeral(channel=notice.channel, user=notice.user_id, text=notice.text)
    except Exception as error:
        return error
    notice.delete()
    return None


def _failed(model: Any, row: Any, lease: datetime, this: _Pass, error: Exception) -> None:
    """Leave `row` due again: after Slack's Retry-After, with every row of its connection; at the next pass when its
    connection is down (one row per pass asks it); else after its own backoff."""
    now, attempts = this.now, row.attempts + 1
    wait = _retry_after(error)
    status = error.response.status_code if isinstance(error, SlackApiError) else None
    if wait is not None:
        due = now + wait
        for held in (SlackMessage, SlackNotice):
            waiting = held.objects.filter(_lease_free(now), connection_id=row.connection_id, due_at__lt=due)
            waiting.update(due_at=due)
        this.down.add(row.connection_id)
    elif status is None or status == 429 or (status >= 500 and row.connection_id not in this.answered):
        due = now
        this.down.add(row.connection_id)
    else:
        due = now + timedelta(seconds=min(2**attempts, MOST_BACKOFF_SECONDS))
    # A row's 1st, 2nd, 4th, 8th … failure is logged: a long outage says a few lines, not one each pass.
    log = logger.warning if attempts & (attempts - 1) == 0 else logger.debug
    log("Slack %s %s failed (attempt %s): %s", model.__name__, row.pk, attempts, _why(error))
    model.objects.filter(pk=row.pk, leased_until=lease).update(
        attempts=attempts, due_at=due, last_error=_why(error), leased_until=None
    )


# Whether any tenant uses Slack: a row of any of these says so. Read every pass of every serving process (issue 56:
# compiled once, as an idle console's periodic work was mostly compiling its queries).
_IN_USE = (
    Constant(lambda: SlackChannel.objects.values_list("pk")[:1]),
    Constant(lambda: SlackMessage.objects.filter(final=False).values_list("pk")[:1]),
    Constant(lambda: SlackNotice.objects.values_list("pk")[:1]),
    Constant(lambda: SlackDelivery.objects.values_list("pk")[:1]),
)


def outbox_pass() -> None:
    """A pass of the outbox; an installation none of whose tenants uses Slack reads a row or three to know it (a
    pass wrote every 2 s before, and on SQLite each write takes the database's lock)."""
    if any(rows.rows() for rows in _IN_USE):
        sync()
        send_due()


def start_outbox(every_seconds: float) -> bool:
    """Run the outbox every `every_seconds` (sooner when woken) in a daemon thread of this process, once per
    process; False when it runs here already."""
    with _STARTED:
        if _RUNNING:
            return False

        def loop() -> None:
            while True:
                began = time.monotonic()
                try:
                    outbox_pass()
                except Exception:
                    logger.exception("The Slack outbox failed; it runs again in %s s", every_seconds)
                finally:
                    close_old_connections()
                _WAKE.wait(every_seconds)
                # Wakes within WAKE_GAP of a pass's start wait for the gap's end, then share one pass.
                time.sleep(max(0.0, min(WAKE_GAP, every_seconds) - (time.monotonic() - began)))
                _WAKE.clear()

        thread = threading.Thread(target=loop, name="airlock-slack-outbox", daemon=True)
        _RUNNING.append(thread)
        thread.start()
        return True
