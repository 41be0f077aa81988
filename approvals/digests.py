"""E-mail digests (SPEC section 11): a member who opted in (`Digest`, their Notifications page) gets one e-mail
listing the requests of the tenant that have waited longer than their N minutes and that they may answer
(`PendingRequestQuerySet.answerable_by`: a request routed to a group they are not in is not theirs).

`send_digests` runs in the deadline sweep of `manage.py serve` (approvals/deadlines.py) and as
`manage.py send_digests`. A member gets at most one digest every N minutes, and a request is in at most one
of their digests: each digest moves the member's `through` mark past the requests it listed (a conditional
update, so two sweeping processes never send the same digest).
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.utils import timezone

from approvals.models import Digest, PendingRequest

logger = logging.getLogger(__name__)

# The requests one e-mail lists at most; the next digest lists the rest.
MOST_LISTED = 50
# The longest wait a member may choose: a week.
MOST_MINUTES = 7 * 24 * 60


def due_requests(digest: Digest, now: datetime) -> list[PendingRequest]:
    """The open requests the member may answer that waited longer than their minutes and were in no digest
    of theirs yet, oldest first."""
    membership = digest.membership
    waiting = (
        PendingRequest.objects.open()
        .answerable_by(membership)
        .filter(tenant_id=membership.tenant_id, opened_at__lte=now - timedelta(minutes=digest.after_minutes))
    )
    if digest.through is not None:
        waiting = waiting.filter(opened_at__gt=digest.through)
    return list(waiting.select_related("agent").order_by("opened_at", "id")[:MOST_LISTED])


def send_digest(digest: Digest, now: datetime) -> bool:
    """Send the member their digest when one is due and lists something; True when it went out."""
    if digest.sent_at is not None and now - digest.sent_at < timedelta(minutes=digest.after_minutes):
        return False
    requests = due_requests(digest, now)
    if not requests:
        return False
    cutoff = now - timedelta(minutes=digest.after_minutes)
    through = requests[-1].opened_at if len(requests) == MOST_LISTED else cutoff
    taken = Digest.objects.filter(pk=digest.pk, sent_at=digest.sent_at, through=digest.through)
    if not taken.update(sent_at=now, through=through):
        return False  # another sweeper sent it meanwhile
    membership = digest.membership
    context = {
        "tenant": membership.tenant,
        "user": membership.user,
        "requests": requests,
        "now": now,
        "console_url": settings.CONSOLE_URL,
        "minutes": digest.after_minutes,
    }
    count = len(requests)
    subject = f"[Airlock] {count} request{'s' if count != 1 else ''} waiting in {membership.tenant.name}"
    try:
        send_mail(subject, render_to_string("approvals/digest.txt", context), None, [membership.user.email])
    except Exception:
        # Not sent again: the next digest lists what comes after (a mail server down would otherwise make every
        # sweep try again, and the member get the same requests twice once it is back).
        logger.exception("The digest of %s could not be sent", membership)
        return False
    return True


def send_digests(now: datetime | None = None) -> int:
    """Send every digest that is due; how many went out."""
    now = now or timezone.now()
    digests = Digest.objects.select_related("membership__user", "membership__tenant").filter(
        membership__user__is_active=True
    )
    return sum(send_digest(digest, now) for digest in digests.exclude(membership__user__email=""))
