"""Membership changes reach the open consoles of that user at once."""

from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from approvals.push import notify_membership_changed
from console.models import Membership


@receiver(post_save, sender=Membership)
@receiver(post_delete, sender=Membership)
def membership_changed(sender: type[Membership], instance: Membership, **kwargs: Any) -> None:
    notify_membership_changed(instance.tenant_id, instance.user_id)
