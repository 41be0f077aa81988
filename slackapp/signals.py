"""Requests a turn or a fork opened (`agents.signals.requests_opened`, sent once committed) wake this process's
outbox, so their messages go out now rather than at its next tick; its sync finds them either way."""

from typing import Any

from django.dispatch import receiver

from agents.signals import requests_opened
from slackapp.outbox import wake


@receiver(requests_opened)
def post_opened(sender: Any, **kwargs: Any) -> None:
    wake()
