"""Shipping the decision log (SPEC section 18): each tenant's receipts to each log sink connection granted to it, in
chain order, at least once, resumed from the sink's cursor after a restart or an outage.

A pass (`ship`) finds, per sink, the tenants granted it whose chain head is past the sink's cursor
(`decisionlog.models.SinkCursor`; a sink new to a tenant starts at the chain's first receipt) and whose backoff is
over; for each such pair it takes the cursor's lease (a conditional update: several `serve` processes may run the
loop; a lease held by a process of this host that is gone is taken at once), reads the receipts after the cursor
in bounded batches and delivers them (`decisionlog.sinks`), moving the cursor to a batch's last receipt only after
the sink acknowledged that batch, under the same lease. A process that dies mid-batch leaves the cursor where the
sink last said yes: its successor (or another process, once the lease lapses) sends that batch again, so a sink may
see the receipts of one unacknowledged batch twice and never misses one. A chain's receipts are written under its
head's row lock in the transaction that moves the head, so the receipts up to a committed head are all committed:
reading past the cursor never skips one.

A failed batch backs the pair off (1, 2, 4 … at most 60 s, or the sink's Retry-After) and keeps the sink's error on
the cursor; a sink that is down rests for that long in this process, its other tenants' pairs too.
`manage.py serve` runs a pass every DECISION_LOG_SECONDS (decisionlog.signals); `manage.py ship_decisions` runs it
alone."""

import logging
import os
import socket
import threading
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.db.models import F, OuterRef, PositiveBigIntegerField, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from approvals.receipts import Receipt, ReceiptHead
from console.connections import SINK_KINDS
from console.models import Connection
from console.sql import Prepared
from decisionlog.models import SinkCursor
from decisionlog.sinks import SinkFailed, send_receipts

logger = logging.getLogger(__name__)

BATCH = 100
# Batches one pair ships in a pass before the next pair's turn.
BATCHES_PER_PASS = 10
LEASE = timedelta(seconds=60)
MOST_BACKOFF_SECONDS = 60

_RESTING: dict[int, datetime] = {}  # a sink that is down -> when this process tries it again
_RESTING_LOCK = threading.Lock()


@dataclass
class Pass:
    """What one pass did: receipts acknowledged, batches that failed, and whether a pair has more waiting."""

    shipped: int = 0
    failed: int = 0
    more: bool = False


def backoff(attempts: int, failure: SinkFailed) -> timedelta:
    """How long a pair waits after its `attempts`-th failure in a row: doubling from 1 s to 60 s; a Retry-After."""
    if failure.retry_after is not None:
        return timedelta(seconds=min(failure.retry_after, MOST_BACKOFF_SECONDS))
    return timedelta(seconds=min(2 ** (attempts - 1), MOST_BACKOFF_SECONDS))


def behind(sink: Connection, now: datetime) -> list[tuple[int, str]]:
    """The tenants granted `sink` (their ids and slugs) with receipts it has not acknowledged and no backoff
    pending: one query."""
    cursor = SinkCursor.objects.filter(connection=sink, tenant=OuterRef("tenant"))
    heads = ReceiptHead.objects.annotate(
        delivered=Coalesce(Subquery(cursor.values("sequence")[:1]), Value(0), output_field=PositiveBigIntegerField()),
        retry_at=Subquery(cursor.values("retry_at")[:1]),
    ).filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now), sequence__gt=F("delivered"))
    if not sink.all_tenants:
        heads = heads.filter(tenant__in=sink.tenants.values("pk"))
    return list(heads.order_by("tenant_id").values_list("tenant_id", "tenant__slug"))


# This process, as a lease names it.
HOLDER = f"{socket.gethostname()}:{os.getpid()}"


def _dead_here(holder: str) -> bool:
    """Whether `holder` was a process of this host that is gone (killed, crashed): its lease binds no one."""
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or holder == HOLDER:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def _lease(cursor: SinkCursor) -> datetime | None:
    """Take the pair's lease: when free, lapsed, or held by a dead process of this host. Its end, or None."""
    clock = timezone.now()
    lease = clock + LEASE
    free = Q(leased_until__isnull=True) | Q(leased_until__lt=clock)
    if SinkCursor.objects.filter(free, pk=cursor.pk).update(leased_until=lease, leased_by=HOLDER):
        return lease
    held = SinkCursor.objects.filter(pk=cursor.pk).values_list("leased_until", "leased_by").first()
    if held is None or not _dead_here(held[1]):
        return None  # another process ships this pair
    taken = SinkCursor.objects.filter(pk=cursor.pk, leased_until=held[0], leased_by=held[1])
    return lease if taken.update(leased_until=lease, leased_by=HOLDER) else None


def ship_pair(sink: Connection, tenant_id: int, slug: str, now: datetime, batch: int = BATCH) -> Pass:
    """Ship the tenant's receipts past the sink's cursor, a batch at a time, at most BATCHES_PER_PASS of them."""
    done = Pass()
    cursor, _ = SinkCursor.objects.get_or_create(tenant_id=tenant_id, connection=sink)
    lease = _lease(cursor)
    if lease is None:
        return done
    cursor.refresh_from_db(fields=["sequence", "attempts"])
    sequence = cursor.sequence
    for _ in range(BATCHES_PER_PASS):
        receipts = list(Receipt.objects.filter(tenant_id=tenant_id, sequence__gt=sequence).order_by("sequence")[:batch])
        if not receipts:
            break
        try:
            send_receipts(sink.spec, slug, receipts, now)
        except SinkFailed as failure:
            _failed(sink, cursor, slug, lease, now, failure)
            done.failed += 1
            return done
        except Exception as error:  # a fault of ours (a header the HTTP client refuses): backed off alike
            _failed(sink, cursor, slug, lease, now, SinkFailed(f"could not be sent: {_where(error)}"))
            done.failed += 1
            return done
        sequence = receipts[-1].sequence
        renewed = timezone.now() + LEASE
        moved = SinkCursor.objects.filter(pk=cursor.pk, leased_until=lease).update(
            sequence=sequence, delivered_at=now, attempts=0, retry_at=None, last_error="", leased_until=renewed
        )
        if not moved:  # the lease lapsed and another process took the pair: it goes on from the cursor
            return done
        lease = renewed
        done.shipped += len(receipts)
        if len(receipts) < batch:
            break
    else:
        done.more = Receipt.objects.filter(tenant_id=tenant_id, sequence__gt=sequence).exists()
    SinkCursor.objects.filter(pk=cursor.pk, leased_until=lease).update(leased_until=None)
    return done


def _where(error: Exception) -> str:
    """An unexpected error's type and where it was raised, without its message: the message of a refused header
    would repeat the header's value, a secret."""
    last = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__} at {Path(last.filename).name}:{last.lineno}"


def _failed(
    sink: Connection, cursor: SinkCursor, slug: str, lease: datetime, now: datetime, failure: SinkFailed
) -> None:
    attempts = cursor.attempts + 1
    wait = backoff(attempts, failure)
    logger.warning(
        "The decision log of %s to %s failed (attempt %s, again in %s s): %s",
        slug,
        sink.name,
        attempts,
        int(wait.total_seconds()),
        failure.why,
    )
    SinkCursor.objects.filter(pk=cursor.pk, leased_until=lease).update(
        attempts=attempts, retry_at=now + wait, last_error=failure.why, leased_until=None
    )
    if failure.sink_down:
        with _RESTING_LOCK:
            _RESTING[sink.pk] = now + wait


def _resting(sink: Connection, now: datetime) -> bool:
    with _RESTING_LOCK:
        until = _RESTING.get(sink.pk)
        if until is not None and until <= now:
            del _RESTING[sink.pk]
            until = None
    return until is not None


# Read every DECISION_LOG_SECONDS by every serving process, with or without a sink (issue 56): compiled once.
_SINKS = Prepared(lambda: Connection.objects.filter(kind__in=SINK_KINDS).order_by("pk"))


def ship(now: datetime | None = None, batch: int = BATCH) -> Pass:
    """One pass over every log sink connection and the tenants granted it."""
    now = now or timezone.now()
    done = Pass()
    for sink in _SINKS.all():
        if _resting(sink, now):
            continue
        for tenant_id, slug in behind(sink, now):
            pair = ship_pair(sink, tenant_id, slug, now, batch)
            done.shipped, done.failed = done.shipped + pair.shipped, done.failed + pair.failed
            done.more = done.more or pair.more
            if _resting(sink, now):
                break
    return done


def shipping_pass() -> None:
    """A pass, and more at once while a pair has more waiting (a backlog after an outage)."""
    while ship().more:
        pass
