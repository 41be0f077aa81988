import asyncio
import gc
import inspect
from collections.abc import Awaitable
from typing import Any

from daphne.cli import CommandLineInterface
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

import console.asgi  # noqa: F401  (loaded here, before tune_collector(), so the freeze covers it)
from agents.keeper import start_keeper
from agents.workers import WorkerPool
from approvals.deadlines import start_digests, start_signer, start_sweeper
from console.metric_files import share_metrics
from console.periodic import serving, stopping
from console.telemetry import configure


def last_writes() -> Any:
    """What the apps still have to write as daphne stops (`console.periodic.stopping`), as a Deferred the reactor
    waits for before it shuts down; None when nothing waits."""
    from twisted.internet import defer

    answers: list[Any] = [answer for _, answer in stopping.send(sender=Command)]
    waits: list[Awaitable[Any]] = [answer for answer in answers if inspect.isawaitable(answer)]
    if not waits:
        return None
    return defer.Deferred.fromFuture(asyncio.ensure_future(asyncio.gather(*waits, return_exceptions=True)))


def tune_collector() -> None:
    """A server's collector: everything loaded so far lives as long as the process, so full collections skip
    it (gc.freeze), and young collections run every 10,000 allocations rather than 700. With the default
    thresholds a console with a few hundred open sockets ran a full collection every second or two, each
    stopping every push for 200 ms and more on a 2-core machine (bench/README.md, push_latency)."""
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


class Command(BaseCommand):
    help = (
        "Serve the console with daphne; this process also sweeps request deadlines, sends the e-mail digests,"
        " signs the chains of receipts and works queued runs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        share_metrics()  # this process's metrics in the folder the installation's processes share (SPEC section 18)
        configure()  # before the worker threads start their first turn
        if settings.DEADLINE_SWEEP_SECONDS:
            start_sweeper(settings.DEADLINE_SWEEP_SECONDS)
        if settings.DIGEST_SWEEP_SECONDS:
            start_digests(settings.DIGEST_SWEEP_SECONDS)
        start_signer(settings.RECEIPT_SIGN_SECONDS)
        # The keeper renews the leases of the turns this process runs (and reclaims lost ones); the
        # worker threads make the one-command default work queued runs without a second process.
        start_keeper()
        if settings.WORKER_THREADS:
            WorkerPool(settings.WORKER_THREADS).start()
        serving.send(sender=self.__class__)  # the apps' own loops (slackapp's outbox)
        # daphne.cli's import installed its asyncio reactor: this is the one it runs.
        from twisted.internet import reactor

        reactor.addSystemEventTrigger("before", "shutdown", last_writes)  # type: ignore[attr-defined,arg-type]
        tune_collector()
        CommandLineInterface().run(["-b", host, "-p", str(port), "console.asgi:application"])
