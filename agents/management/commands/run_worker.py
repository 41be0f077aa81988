import re
import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.lanes import LANE_PATTERN
from console.metric_files import share_metrics
from console.telemetry import configure


class Command(BaseCommand):
    help = "Work queued runs: claim them from the database queue and run their turns (one process per lane or more)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--lanes", default="*", help="Lanes to work, comma-separated, or * (default).")
        parser.add_argument(
            "--threads", type=int, default=None, help="Turns this process runs at once (default: WORKER_THREADS)."
        )
        parser.add_argument("--batch", action="store_true", help="Run every ready queued run, then exit.")

    def handle(self, *args: Any, lanes: str, threads: int | None, batch: bool, **options: Any) -> None:
        from agents.claiming import drain
        from agents.keeper import reclaim_lost
        from agents.workers import WorkerPool

        chosen = None if lanes.strip() == "*" else [lane.strip() for lane in lanes.split(",")]
        for lane in chosen or []:
            if not re.match(LANE_PATTERN, lane):
                raise CommandError(f"{lane!r} is not a lane name ({LANE_PATTERN}).")
        configure()  # traces, when the OTEL_* variables ask for them (SPEC section 18)
        threads = settings.WORKER_THREADS if threads is None else threads
        if threads < 1:
            raise CommandError("--threads must be at least 1.")
        if batch:
            reclaim_lost()
            self.stdout.write(f"ran {drain(chosen)} queued runs")
            return
        share_metrics()  # this process's metrics in the folder the installation's processes share (SPEC section 18)
        pool = WorkerPool(threads, chosen).start()
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"working lanes {lanes} with {threads} threads; stop with Ctrl+C (running turns finish)")
        stop.wait()
        pool.stop()
