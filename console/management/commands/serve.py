from typing import Any

from daphne.cli import CommandLineInterface
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from approvals.deadlines import start_sweeper


class Command(BaseCommand):
    help = "Serve the console with daphne, sweeping request deadlines in this process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        if settings.DEADLINE_SWEEP_SECONDS:
            start_sweeper(settings.DEADLINE_SWEEP_SECONDS)
        CommandLineInterface().run(["-b", host, "-p", str(port), "console.asgi:application"])
