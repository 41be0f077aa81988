"""Membership changes reach the open consoles of that user at once."""

from functools import partial
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from approvals.push import notify_membership_changed
from console.models import Membership


@receiver(post_save, sender=Membership)
@receiver(post_delete, sender=Membership)
def membership_changed(sender: type[Membership], instance: Membership, **kwargs: Any) -> None:
    # Only once committed: a console told earlier re-reads the old membership and keeps it (for up to
    # its periodic re-check) when the change is made inside a transaction (`create_user`, the admin).
    transaction.on_commit(partial(notify_membership_changed, instance.tenant_id, instance.user_id))
