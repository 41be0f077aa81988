import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from approvals.digests import send_digests


class Command(BaseCommand):
    help = "Send the e-mail digests of waiting requests that are due (once, or every N seconds with --every)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0, help="repeat every N seconds")

    def handle(self, *args: Any, every: float, **options: Any) -> None:
        while True:
            sent = send_digests()
            if sent:
                self.stdout.write(f"sent {sent} digest(s)")
            if not every:
                return
            time.sleep(every)
