import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from approvals.actions import expire_due


class Command(BaseCommand):
    help = "Close requests whose deadline passed (once, or every N seconds with --every)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0, help="repeat every N seconds")

    def handle(self, *args: Any, every: float, **options: Any) -> None:
        while True:
            expired = expire_due()
            if expired:
                self.stdout.write(f"expired {len(expired)} request(s)")
            if not every:
                return
            time.sleep(every)
