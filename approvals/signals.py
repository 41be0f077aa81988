"""Membership changes (a role, a tenant left, an approver group joined or left) reach the open consoles of
that user at once; requests the run lifecycle opened (`agents.signals.requests_opened`) reach every inbox."""

from functools import partial
from typing import Any

from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from agents.signals import requests_opened
from approvals.models import ApproverGroup, PendingRequest
from approvals.push import notify_membership_changed, notify_requests_opened
from console.models import Membership


@receiver(requests_opened)
def announce_opened(sender: Any, requests: list[PendingRequest], **kwargs: Any) -> None:
    """Requests a turn or a fork opened (sent once committed): every open inbox shows them."""
    notify_requests_opened(requests)


@receiver(post_save, sender=Membership)
@receiver(post_delete, sender=Membership)
def membership_changed(sender: type[Membership], instance: Membership, **kwargs: Any) -> None:
    # Only once committed: a console told earlier re-reads the old membership and keeps it (for up to
    # its periodic re-check) when the change is made inside a transaction (`create_user`, the admin).
    transaction.on_commit(partial(notify_membership_changed, instance.tenant_id, instance.user_id))


@receiver(m2m_changed, sender=ApproverGroup.members.through)
def approvers_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: set[int] | None, **kwargs: Any
) -> None:
    """Who answers a group's requests changed: their inboxes show those cards again, with or without forms."""
    if action not in ("post_add", "post_remove") or not pk_set:
        return
    # From the group's side (`group.members.add(user)`) pk_set holds users; from the user's, groups.
    pairs = (
        ApproverGroup.objects.filter(pk__in=pk_set).values_list("tenant_id", flat=True).distinct()
        if reverse
        else [instance.tenant_id]
    )
    for tenant_id in pairs:
        for user_id in [instance.pk] if reverse else pk_set:
            transaction.on_commit(partial(notify_membership_changed, tenant_id, user_id))
