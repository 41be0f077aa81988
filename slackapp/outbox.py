"""The outbox to Slack (SPEC section 17): every message Slack must show is a row, sent by a loop with retries and
backoff, so a Slack outage never blocks or loses an answer and every message is eventually right.

`sync` reads what Slack must show from the requests themselves, whoever changed them (the inbox, the API, Slack,
a rule, the deadline sweep, an escalation): an open request of a mapped agent or group gets a `SlackMessage` in each
of its channels (`slackapp.channels.channels_for`, again when an escalation adds groups); a message whose request
moved on (an approval toward its quorum, its end) since Slack last showed it (`shown`) is due again. Nothing below
this app tells it anything: it reads committed state, so a process that dies between a decision and its announcement
loses nothing either. `send_due` sends what is due, each row rendered from its request as it is at that moment
(chat.postMessage once, chat.update after), and the ephemeral notices (chat.postEphemeral); a failure leaves the
row due later (2, 4, 8 … at most 300 s; Slack's Retry-After on a 429), a connection that fails to answer is left
alone for the rest of that pass. Several processes may run the loop: a row is sent under a lease taken by a
conditional update, and placing a request twice finds its rows (unique per request and channel).
"""

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections, transaction
from django.db.models import Case, Count, Exists, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from slack_sdk.errors import SlackApiError

from approvals.models import Approval, PendingRequest
from approvals.quorum import standing
from console.models import Connection, ConnectionKind, Tenant
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
# Slack's signature is valid 5 minutes: a delivery's digest is kept longer than that (slackapp.models.SlackDelivery).
DELIVERIES_KEPT = timedelta(minutes=10)

_WAKE = threading.Event()
_STARTED = threading.Lock()
_RUNNING: list[threading.Thread] = []


def wake() -> None:
    """Run the loop of this process now rather than at its next tick (an answer from Slack, a request opened)."""
    _WAKE.set()


def place(now: datetime) -> int:
    """Give each open request of a mapped agent or group its messages (due now); how many requests were placed."""
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
    waiting = PendingRequest.objects.open().filter(tenant_id__in=by_tenant, opened_at__gte=mappings[0].created_at)
    count = 0
    for request in waiting.exclude(Exists(placed)).order_by("opened_at")[: BATCH * 4]:
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
    """Mark due what Slack must show anew: new messages (`place`) and those whose request moved on since Slack last
    showed it. How many rows it made or marked due."""
    now = now or timezone.now()
    SlackDelivery.objects.filter(received_at__lt=now - DELIVERIES_KEPT).delete()
    count = place(now)
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


def _backoff(attempts: int, error: Exception) -> timedelta:
    """How long a row waits after its `attempts`-th failure: doubling from 2 s up to 300 s; a 429's Retry-After."""
    if isinstance(error, SlackApiError) and error.response.status_code == 429:
        retry_after = str(error.response.headers.get("Retry-After", "") or "")
        if retry_after.isdigit():
            return timedelta(seconds=min(int(retry_after), MOST_BACKOFF_SECONDS))
    return timedelta(seconds=min(2**attempts, MOST_BACKOFF_SECONDS))


def _why(error: Exception) -> str:
    if isinstance(error, SlackApiError):
        return f"Slack answered {error.response.status_code}: {error.response.get('error') or 'error'}"[:500]
    return f"{type(error).__name__}: {error}"[:500]


def _unreachable(error: Exception) -> bool:
    """Whether Slack did not answer at all (the rest of this pass would wait on it too)."""
    return not isinstance(error, SlackApiError)


def send_due(now: datetime | None = None) -> int:
    """Send the messages and notices that are due; how many went out."""
    now = now or timezone.now()
    down: set[int] = set()
    sent = 0
    due = SlackMessage.objects.filter(_lease_free(now), due_at__lte=now).select_related("connection")
    for row in due.order_by("due_at")[:BATCH]:
        if row.connection_id in down:
            continue
        lease = now + LEASE
        if not SlackMessage.objects.filter(_lease_free(now), pk=row.pk).update(leased_until=lease):
            continue  # another process sends it
        error = _send_message(row, lease, now)
        if error is None:
            sent += 1
        elif _unreachable(error):
            down.add(row.connection_id)
    notices = SlackNotice.objects.filter(_lease_free(now), due_at__lte=now).select_related("connection")
    for notice in notices.order_by("due_at")[:BATCH]:
        if notice.created_at < now - NOTICE_LIFETIME:
            notice.delete()
            continue
        if notice.connection_id in down:
            continue
        lease = now + LEASE
        if not SlackNotice.objects.filter(_lease_free(now), pk=notice.pk).update(leased_until=lease):
            continue
        try:
            client_for(notice.connection).chat_postEphemeral(
                channel=notice.channel, user=notice.user_id, text=notice.text
            )
        except Exception as error:
            _failed(SlackNotice, notice, lease, now, error)
            if _unreachable(error):
                down.add(notice.connection_id)
        else:
            notice.delete()
            sent += 1
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
        _failed(SlackMessage, row, lease, now, error)
        return error
    done = {"shown": state.key, "final": state.decided, "due_at": None, "attempts": 0, "last_error": ""}
    SlackMessage.objects.filter(pk=row.pk, leased_until=lease).update(**posted, **done, leased_until=None)
    return None


def _failed(model: Any, row: Any, lease: datetime, now: datetime, error: Exception) -> None:
    attempts = row.attempts + 1
    logger.warning("Slack %s %s failed (attempt %s): %s", model.__name__, row.pk, attempts, _why(error))
    model.objects.filter(pk=row.pk, leased_until=lease).update(
        attempts=attempts, due_at=now + _backoff(attempts, error), last_error=_why(error), leased_until=None
    )


def step() -> None:
    """A pass of the outbox; an installation none of whose tenants uses Slack reads a row or three to know it (a
    pass wrote every 2 s before, and on SQLite each write takes the database's lock)."""
    in_use = (
        SlackChannel.objects.exists()
        or SlackMessage.objects.filter(final=False).exists()
        or SlackNotice.objects.exists()
        or SlackDelivery.objects.exists()
    )
    if in_use:
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
                try:
                    step()
                except Exception:
                    logger.exception("The Slack outbox failed; it runs again in %s s", every_seconds)
                finally:
                    close_old_connections()
                _WAKE.wait(every_seconds)
                _WAKE.clear()

        thread = threading.Thread(target=loop, name="airlock-slack-outbox", daemon=True)
        _RUNNING.append(thread)
        thread.start()
        return True
