"""Request deadlines: a periodic sweep closes overdue requests `expired` and lets their runs go on.

The sweep is one loop per serving process (started by `manage.py serve`) or the `sweep_deadlines`
command; every closing is a conditional update, so several sweepers never close a request twice.
"""

from datetime import datetime

from django.utils import timezone

from approvals.answers import continue_when_complete
from approvals.models import PendingRequest, RequestStatus
from approvals.push import notify_requests_closed
from console.periodic import start_periodic


def expire_due(now: datetime | None = None) -> list[PendingRequest]:
    """Close every pending, unanswered request whose deadline has passed; start the continuations."""
    now = now or timezone.now()
    due = PendingRequest.objects.open().select_related("session__tenant", "session__agent").filter(expires_at__lte=now)
    expired = []
    for pending in due[:500]:
        if pending.close(RequestStatus.EXPIRED, now):
            expired.append(pending)
    for tenant_id in {p.tenant_id for p in expired}:
        notify_requests_closed(tenant_id, [str(p.id) for p in expired if p.tenant_id == tenant_id])
    for session in {p.session_id: p.session for p in expired}.values():
        continue_when_complete(None, session)
    return expired


def start_sweeper(every_seconds: float) -> None:
    """Run the sweep every `every_seconds` in a daemon thread of this process (once per process)."""
    start_periodic("deadlines", every_seconds, expire_due)
