"""The tenant's request events (SPEC section 11): `request.opened` when a request starts waiting, `request.closed`
when it stops (answered, expired, cancelled, abandoned), POSTed as JSON to the webhook connection the tenant's
admins chose (`Tenant.request_webhook`, the Tenant page), signed as the policy webhooks are
(`ConnectionSpec.webhook_headers`).

`approvals.push` announces at the points it pushes to the open consoles, once committed. The caller's thread
only reads the tenant's choice (one query; two more when one is set: the grant, the requests) and hands the
events to this process's sender: one daemon thread with a bounded queue that POSTs each with a timeout and
tries again a few times. Nothing here raises into the caller or waits on the network in its thread. In memory
rather than a django-tasks-db task: the queue workers claim only queued runs (lanes, leases), and an event is a
notification that a receiver can always reconcile with `GET /api/requests`; a process that dies loses the
events it had not delivered yet (docs/architecture.md, "Notifications").
"""

import atexit
import heapq
import itertools
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import httpx2
from django.db import transaction
from django.utils import timezone

from approvals.models import TERMINAL, PendingRequest, RequestStatus
from console.connections import ConnectionSpec
from console.models import Connection, ConnectionKind, Tenant

logger = logging.getLogger(__name__)

OPENED = "request.opened"
CLOSED = "request.closed"
TIMEOUT_SECONDS = 5.0
# Seconds before each further attempt: three attempts in all.
RETRY_DELAYS = (1.0, 5.0)
# Events waiting in this process beyond this many are dropped (and logged): a receiver that is down must not
# grow the console's memory without bound.
QUEUE_SIZE = 1000
# A process that ends (a one-off `sweep_deadlines`, `run_worker --batch`) waits this long for its events.
EXIT_WAIT_SECONDS = 5.0


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment is not None else None


def _username(user: Any) -> str | None:
    return user.username if user is not None else None


def request_event(event_type: str, request: PendingRequest) -> dict[str, Any]:
    """The JSON of one event (docs/architecture.md, "Notifications", documents the shape)."""
    answer = request.answer if isinstance(request.answer, dict) else None
    status = RequestStatus(request.status)
    if status == RequestStatus.PENDING and answer is not None:
        # An answer stored from the inbox closes the request for the people waiting on it, before a run carries it.
        status = RequestStatus.ANSWERED
    approved = answer.get("approved") if answer is not None else None
    closed_at = request.closed_at if status in TERMINAL else request.answered_at
    return {
        "id": str(uuid.uuid4()),
        "type": event_type,
        "occurredAt": timezone.now().isoformat(),
        "tenant": request.tenant.slug,
        "request": {
            "requestId": str(request.id),
            "runId": str(request.run_id),
            "sessionId": request.session.key,
            "agent": request.agent.name,
            "kind": request.kind,
            "toolName": request.tool_name or None,
            "approvers": request.approvers_wire,
            "status": str(status),
            "approved": approved if isinstance(approved, bool) else None,
            "answeredBy": _username(request.answered_by),
            "answeredVia": request.answered_via or None,
            "closedBy": _username(request.closed_by),
            "openedAt": _iso(request.opened_at),
            "expiresAt": _iso(request.expires_at),
            "answeredAt": _iso(request.answered_at),
            "closedAt": _iso(closed_at if status != RequestStatus.PENDING else None),
        },
    }


def webhook_of(tenant: int | Tenant) -> ConnectionSpec | None:
    """The webhook the tenant chose, while the installation still grants it to the tenant (a `Tenant` read
    already says which it chose)."""
    if isinstance(tenant, Tenant):
        tenant_id, chosen = tenant.pk, tenant.request_webhook_id
    else:
        tenant_id = tenant
        chosen = Tenant.objects.filter(pk=tenant_id).values_list("request_webhook_id", flat=True).first()
    if chosen is None:
        return None
    granted = Connection.objects.granted_to(Tenant(pk=tenant_id)).filter(pk=chosen, kind=ConnectionKind.WEBHOOK)
    connection = granted.first()
    return connection.spec if connection is not None else None


def announce(event_type: str, tenant: int | Tenant, request_ids: Iterable[Any]) -> None:
    """Send `event_type` for each of the requests to the tenant's webhook (`tenant`: its id, or the tenant as read
    with the requests), once the transaction commits (at once outside one). Never raises: a failure is logged."""
    ids = list(request_ids)
    if ids:
        transaction.on_commit(lambda: _announce(event_type, tenant, ids))


def _announce(event_type: str, tenant: int | Tenant, ids: list[Any]) -> None:
    tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
    try:
        spec = webhook_of(tenant)
        if spec is None:
            return
        requests = PendingRequest.objects.filter(tenant_id=tenant_id, pk__in=ids).select_related(
            "tenant", "session", "agent", "answered_by", "closed_by"
        )
        for request in requests:
            event = request_event(event_type, request)
            SENDER.submit(Delivery(spec, json.dumps(event, separators=(",", ":")).encode(), event["id"]))
    except Exception:
        logger.exception("Announcing %s of request(s) %s to tenant %s's webhook failed", event_type, ids, tenant_id)


@dataclass(frozen=True)
class Delivery:
    spec: ConnectionSpec
    body: bytes
    event_id: str
    attempt: int = 1


def deliver(delivery: Delivery) -> bool:
    """POST one event; True when the receiver answered 2xx. Failures are logged, never raised."""
    try:
        response = httpx2.post(
            delivery.spec.url,
            content=delivery.body,
            headers=delivery.spec.webhook_headers(delivery.body),
            timeout=TIMEOUT_SECONDS,
        )
    except Exception as error:
        failure = f"{type(error).__name__}: {error}"
    else:
        if response.is_success:
            return True
        failure = f"HTTP {response.status_code}"
    logger.warning(
        "Request event %s to webhook %s failed (attempt %s): %s",
        delivery.event_id,
        delivery.spec.name,
        delivery.attempt,
        failure,
    )
    return False


class Sender:
    """One daemon thread per process delivering events in order, with retries after a pause; started by the
    first event. A process that exits waits a little for the events still on their way (`wait`)."""

    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self._queue: queue.Queue[Delivery] = queue.Queue(size)
        self._retries: list[tuple[float, int, Delivery]] = []  # a heap by due time
        self._order = itertools.count()
        self._started = threading.Lock()
        self._thread: threading.Thread | None = None
        self._unsettled = 0  # events submitted and neither delivered nor given up
        self._settled = threading.Condition()

    def submit(self, delivery: Delivery) -> None:
        with self._started:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="airlock-webhooks", daemon=True)
                self._thread.start()
                atexit.register(self.wait, EXIT_WAIT_SECONDS)
        try:
            self._queue.put_nowait(delivery)
        except queue.Full:
            logger.error("Request event %s dropped: %s events wait already", delivery.event_id, self._queue.maxsize)
            return
        with self._settled:
            self._unsettled += 1

    def wait(self, timeout: float) -> bool:
        """Wait until every event submitted here is delivered or given up, at most `timeout` seconds; True when
        none is left."""
        with self._settled:
            return self._settled.wait_for(lambda: self._unsettled == 0, timeout)

    def _settle(self) -> None:
        with self._settled:
            self._unsettled -= 1
            self._settled.notify_all()

    def _next(self) -> Delivery | None:
        """A retry that is due, else the next new event (waiting until the next retry is due)."""
        now = time.monotonic()
        if self._retries and self._retries[0][0] <= now:
            return heapq.heappop(self._retries)[2]
        try:
            return self._queue.get(timeout=self._retries[0][0] - now if self._retries else None)
        except queue.Empty:
            return None

    def _loop(self) -> None:
        while True:
            delivery = self._next()
            if delivery is None:
                continue
            if deliver(delivery):
                self._settle()
            elif delivery.attempt > len(RETRY_DELAYS):
                logger.error("Request event %s to webhook %s given up", delivery.event_id, delivery.spec.name)
                self._settle()
            elif len(self._retries) >= self._queue.maxsize:
                logger.error("Request event %s dropped: too many events wait for a retry", delivery.event_id)
                self._settle()
            else:
                due = time.monotonic() + RETRY_DELAYS[delivery.attempt - 1]
                heapq.heappush(self._retries, (due, next(self._order), replace(delivery, attempt=delivery.attempt + 1)))


SENDER = Sender()
