"""The base of the commands that make one sweep, once or every N seconds (`--every`): `sweep_deadlines` and
`send_digests` (`manage.py serve` runs both in its own threads instead, approvals/deadlines.py)."""

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class RepeatingCommand(BaseCommand):
    """`sweep()` once, or every `--every` seconds until stopped; what a sweep did, when it did anything, is
    printed."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0, help="repeat every N seconds")

    def sweep(self) -> str:
        """Make one sweep; what it did, or "" when nothing."""
        raise NotImplementedError

    def handle(self, *args: Any, every: float, **options: Any) -> None:
        while True:
            done = self.sweep()
            if done:
                self.stdout.write(done)
            if not every:
                return
            time.sleep(every)
