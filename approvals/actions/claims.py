"""Claiming a request and letting the claim go (SPEC section 11): the card's button (`/inbox/<id>/claim/`) and
`POST`/`DELETE /api/requests/{id}/claim`. A claim is a signal, not a lock: anyone who may answer still can."""

from functools import partial

from django.db import transaction
from django.utils import timezone

from approvals.models import NotAnApprover, PendingRequest, refuse_unless_answerable
from approvals.push import notify_request_claimed
from console.models import Membership
from console.problems import Refused


class ClaimRefused(Refused):
    """A claim or a release that cannot be made: a 4xx (409 unless said), nothing changed."""

    status = 409


def claim(membership: Membership, pending: PendingRequest) -> None:
    """Mark the open request as handled by the member and show it in every open inbox."""
    try:
        refuse_unless_answerable(membership, [pending])
    except NotAnApprover as refused:
        raise ClaimRefused(refused.code, refused.detail, refused.status) from None
    if not pending.claim(membership.user, timezone.now()):
        raise ClaimRefused("request_closed", "The request was answered or closed; there is nothing to claim.")
    transaction.on_commit(partial(notify_request_claimed, pending))


def release(membership: Membership, pending: PendingRequest) -> None:
    """Let the claim go: the member who claimed it, or an admin."""
    holder = pending.claimed_by
    if holder is None:
        return
    if holder.pk != membership.user_id and not membership.allows("admin"):
        detail = f"The request is claimed by {holder.username}; only they or an admin can release it."
        raise ClaimRefused("claimed_by_another", detail)
    pending.release()
    transaction.on_commit(partial(notify_request_claimed, pending))
