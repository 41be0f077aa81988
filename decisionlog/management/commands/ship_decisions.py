import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from decisionlog.shipping import BATCH, ship


class Command(BaseCommand):
    help = (
        "Ship the decision log (SPEC section 18): each tenant's receipts to the log sinks granted to it, from where"
        " each sink's cursor stands; once, or every N seconds with --every (`manage.py serve` does it itself every"
        " DECISION_LOG_SECONDS)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0, help="repeat every N seconds")
        parser.add_argument("--batch", type=int, default=BATCH, help=f"receipts a delivery carries (default {BATCH})")

    def handle(self, *args: Any, every: float, batch: int, **options: Any) -> None:
        if batch < 1 or every < 0:
            raise CommandError("--batch is at least 1 and --every at least 0.")
        while True:
            done = ship(batch=batch)
            if done.shipped or done.failed or not every:
                self.stdout.write(f"{done.shipped} receipt(s) shipped, {done.failed} batch(es) failed")
                self.stdout.flush()
            if not every:
                return
            if not done.more:
                time.sleep(every)
