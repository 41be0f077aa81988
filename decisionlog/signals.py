"""`manage.py serve` (`console.periodic.serving`) starts the decision log's shipping loop in its process."""

from typing import Any

from django.conf import settings
from django.dispatch import receiver

from console.periodic import serving, start_periodic
from decisionlog.shipping import shipping_pass


@receiver(serving)
def start_shipping(sender: Any, **kwargs: Any) -> None:
    if settings.DECISION_LOG_SECONDS:
        start_periodic("decision-log", settings.DECISION_LOG_SECONDS, shipping_pass)
