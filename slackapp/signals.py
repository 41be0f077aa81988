"""Requests a turn or a fork opened (`agents.signals.requests_opened`, sent once committed) wake this process's
outbox, so their messages go out now rather than at its next tick; its sync finds them either way. `manage.py serve`
(`console.periodic.serving`) starts the outbox's loop."""

from typing import Any

from django.conf import settings
from django.dispatch import receiver

from agents.signals import requests_opened
from console.periodic import serving
from slackapp.outbox import start_outbox, wake


@receiver(requests_opened)
def post_opened(sender: Any, **kwargs: Any) -> None:
    wake()


@receiver(serving)
def start_sending(sender: Any, **kwargs: Any) -> None:
    if settings.SLACK_OUTBOX_SECONDS:
        start_outbox(settings.SLACK_OUTBOX_SECONDS)
