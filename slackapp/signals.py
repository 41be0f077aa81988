"""A request opened anywhere wakes this process's outbox once committed, so its messages go out now rather than at
its next tick (its sync finds them either way): one saved on its own (`post_save`: an external agent's) or those a
turn or a fork bulk-creates (`agents.signals.requests_opened`, sent once committed). `manage.py serve`
(`console.periodic.serving`) starts the outbox's loop."""

from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from agents.signals import requests_opened
from approvals.models import PendingRequest
from console.periodic import serving
from slackapp.outbox import start_outbox, wake_outbox


@receiver(post_save, sender=PendingRequest)
def post_saved(sender: Any, created: bool, **kwargs: Any) -> None:
    if created:
        transaction.on_commit(wake_outbox)


@receiver(requests_opened)
def post_opened(sender: Any, **kwargs: Any) -> None:
    wake_outbox()


@receiver(serving)
def start_sending(sender: Any, **kwargs: Any) -> None:
    if settings.SLACK_OUTBOX_SECONDS:
        start_outbox(settings.SLACK_OUTBOX_SECONDS)
