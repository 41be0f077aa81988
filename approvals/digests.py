"""E-mail digests (SPEC section 11): a member who opted in (`Digest`, their Notifications page) gets one e-mail
listing the requests of the tenant that have waited longer than their N minutes and that they may answer
(`PendingRequestQuerySet.answerable_by`: a request routed to a group they are not in is not theirs).

`send_digests` runs in the deadline sweep of `manage.py serve` (approvals/deadlines.py) and as
`manage.py send_digests`. A member gets at most one digest every N minutes, and a request is in at most one
of their digests: each digest moves the member's `through` mark past the requests it listed (a conditional
update, so two sweeping processes never send the same digest). A request counts from when it reached the member:
its opening, or the escalation step that added a group of theirs (SPEC section 14).
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.utils import timezone

from approvals.answerers import Rights, rights_of
from approvals.models import Digest, PendingRequest

logger = logging.getLogger(__name__)

# The requests one e-mail lists at most; the next digest lists the rest.
MOST_LISTED = 50
# The longest wait a member may choose: a week.
MOST_MINUTES = 7 * 24 * 60


def due_requests(digest: Digest, now: datetime) -> list[PendingRequest]:
    """The open requests the member may answer that reached them longer than their minutes ago and were in no digest
    of theirs yet, oldest first."""
    return _listing(digest, now)[0]


def _listing(digest: Digest, now: datetime) -> tuple[list[PendingRequest], datetime]:
    """`due_requests`, and the member's `through` mark once they are sent: each request counted from when it reached
    them (`reached_at`), so one escalated to their group long after it opened is listed too, and only once."""
    membership = digest.membership
    cutoff = now - timedelta(minutes=digest.after_minutes)
    theirs = (
        PendingRequest.objects.open()
        .answerable_by(membership)
        .filter(tenant_id=membership.tenant_id, opened_at__lte=cutoff)
        .select_related("agent")
    )
    through = digest.through
    opened = theirs if through is None else theirs.filter(opened_at__gt=through)
    read = list(opened.order_by("opened_at", "id")[:MOST_LISTED])
    # With more opened than one digest lists, this one goes no further than the last read.
    horizon = read[-1].opened_at if len(read) == MOST_LISTED else cutoff
    if through is not None:  # opened before the mark, but escalated to more groups since
        read += list(theirs.filter(opened_at__lte=through, widened_at__gt=through))
    rights = rights_of(membership)
    reached = sorted(((reached_at(pending, rights), pending) for pending in read), key=lambda r: (r[0], str(r[1].pk)))
    listed = [(at, pending) for at, pending in reached if (through is None or at > through) and at <= horizon]
    if len(listed) > MOST_LISTED:
        listed = listed[:MOST_LISTED]
        horizon = listed[-1][0]
    return [pending for _, pending in listed], horizon


def reached_at(pending: PendingRequest, rights: Rights) -> datetime:
    """When the member of `rights` could first answer `pending`: when it opened, or when its escalation added a group
    of theirs (or of a member they stand in for) to a request they could not answer before (SPEC section 14)."""
    widened = pending.widened or {}
    if not widened or rights.any_group:
        return pending.opened_at
    groups = rights.all_groups
    if any(group in groups for group in pending.groups if group not in widened):
        return pending.opened_at
    added = [datetime.fromisoformat(widened[group]) for group in groups if group in widened]
    return min(added, default=pending.opened_at)


def send_digest(digest: Digest, now: datetime) -> bool:
    """Send the member their digest when one is due and lists something; True when it went out."""
    if digest.sent_at is not None and now - digest.sent_at < timedelta(minutes=digest.after_minutes):
        return False
    requests, through = _listing(digest, now)
    if not requests:
        return False
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
