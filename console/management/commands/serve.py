from typing import Any

from daphne.cli import CommandLineInterface
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from agents.queue import WorkerPool, start_keeper
from approvals.deadlines import start_sweeper


class Command(BaseCommand):
    help = "Serve the console with daphne; this process also sweeps request deadlines and works queued runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        if settings.DEADLINE_SWEEP_SECONDS:
            start_sweeper(settings.DEADLINE_SWEEP_SECONDS)
        # The keeper renews the leases of the turns this process runs (and reclaims lost ones); the
        # worker threads make the one-command default work queued runs without a second process.
        start_keeper()
        if settings.WORKER_THREADS:
            WorkerPool(settings.WORKER_THREADS).start()
        CommandLineInterface().run(["-b", host, "-p", str(port), "console.asgi:application"])
