import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from slackapp.outbox import send_due, sync


class Command(BaseCommand):
    help = (
        "Send what Slack must show (SPEC section 17): new requests' messages, their updates, ephemeral notices; once,"
        " or every N seconds with --every (`manage.py serve` runs it itself every SLACK_OUTBOX_SECONDS)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0, help="repeat every N seconds")

    def handle(self, *args: Any, every: float, **options: Any) -> None:
        while True:
            marked, sent = sync(), send_due()
            if marked or sent or not every:
                self.stdout.write(f"{marked} message(s) due, {sent} sent")
            if not every:
                return
            time.sleep(every)
