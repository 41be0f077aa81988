"""Where tenants' policies run: a few worker processes (agents.policy_worker), each task under a budget.

A Rego query can cost seconds of CPU to compile or to evaluate, and the engine's native code holds the GIL
while it compiles: run in the console's process, one tenant's save stalled every other request. Here the
work runs in another process, at a lower priority, and a task that overruns its budget gets its worker
killed (a fresh one starts for the next task); the caller gets `BudgetExceeded` and denies (fail-closed).

`SANDBOX.check(manifest, bundles)` compiles a policy (what saving a definition asks);
`await SANDBOX.evaluate(key, manifest, bundles, point, context)` is one interception (what a turn asks).
Both may be called from any thread, the latter from any event loop: a worker serves one task at a time and
the caller waits on its pipe (the GIL is free meanwhile). The process-wide instance is created on first use
with `POLICY_WORKERS` workers at most; the budgets are the settings `POLICY_COMPILE_BUDGET_MS` and
`POLICY_EVAL_BUDGET_MS` when a task starts.
"""

import asyncio
import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

# The worker's first frame says it is ready; its start (an interpreter and the policy engine) is not
# charged to the first task's budget.
START_SECONDS = 30.0


class BudgetExceeded(Exception):
    """The task ran past its budget; its worker was killed."""


class WorkerFailed(Exception):
    """The worker died or answered nothing readable (for example, out of memory); it was replaced."""


class PolicyInvalid(ValueError):
    """The policy does not compile; the message is the compiler's."""


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    buffer: bytearray = field(default_factory=bytearray)
    ready: bool = False

    @classmethod
    def start(cls) -> "_Worker":
        process = subprocess.Popen(
            [sys.executable, "-m", "agents.policy_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=settings.BASE_DIR,
            # Nothing of the console's environment (keys, secrets) reaches a policy.
            env={"PYTHONPATH": str(settings.BASE_DIR), "PYTHONDONTWRITEBYTECODE": "1"},
            start_new_session=True,
        )
        assert process.stdout is not None
        os.set_blocking(process.stdout.fileno(), False)
        return cls(process)

    @property
    def fd(self) -> int:
        assert self.process.stdout is not None
        return self.process.stdout.fileno()

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(len(body).to_bytes(4, "big") + body)
            self.process.stdin.flush()
        except OSError:
            raise WorkerFailed from None

    def take(self) -> dict[str, Any] | None:
        """A whole frame read so far, or None; WorkerFailed when the worker closed its end."""
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            chunk = None
        if chunk == b"":
            raise WorkerFailed
        if chunk:
            self.buffer += chunk
        if len(self.buffer) < 4:
            return None
        size = int.from_bytes(self.buffer[:4], "big")
        if len(self.buffer) < 4 + size:
            return None
        body = bytes(self.buffer[4 : 4 + size])
        del self.buffer[: 4 + size]
        try:
            return dict(json.loads(body))
        except ValueError:
            raise WorkerFailed from None

    def wait(self, seconds: float) -> dict[str, Any]:
        """The next frame within `seconds`, blocking this thread (not the GIL)."""
        deadline = time.monotonic() + seconds
        while (frame := self.take()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BudgetExceeded
            select.select([self.fd], [], [], left)
        return frame

    async def wait_async(self, seconds: float) -> dict[str, Any]:
        """The next frame within `seconds`, on the running event loop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (frame := self.take()) is None:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(self.fd, _settle, readable)
            try:
                async with asyncio.timeout_at(deadline):
                    await readable
            except TimeoutError:
                raise BudgetExceeded from None
            finally:
                loop.remove_reader(self.fd)
        return frame

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def _settle(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


class Sandbox:
    def __init__(self, size: int) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(size)

    def _take_worker(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Worker.start()

    def _give_back(self, worker: _Worker | None) -> None:
        if worker is not None:
            with self._lock:
                self._idle.append(worker)
        self._slots.release()

    @contextlib.contextmanager
    def _lent(self) -> Iterator[_Worker]:
        """A worker for one task (its slot taken): given back after, or killed when the task failed on the
        worker's side — over budget, dead, or abandoned by its caller (a timeout): it must not run on."""
        worker = self._take_worker()
        try:
            yield worker
        except PolicyInvalid:  # the policy's own fault: the worker is fine
            self._give_back(worker)
            raise
        except BaseException:
            worker.kill()
            self._give_back(None)
            raise
        self._give_back(worker)

    def check(self, key: str, manifest: str, bundles: dict[str, Any]) -> list[str]:
        """Why the policy does not compile (the compiler's words), empty when it does; BudgetExceeded when
        compiling took longer than the compile budget."""
        self._slots.acquire()
        with self._lent() as worker:
            if not worker.ready:
                worker.wait(START_SECONDS)
                worker.ready = True
            worker.send({"op": "check", "key": key, "manifest": manifest, "bundles": bundles})
            answer = worker.wait(self.compile_budget)
            return list(answer.get("problems", []))

    async def evaluate(
        self, key: str, manifest: str, bundles: dict[str, Any], point: str, context: dict[str, Any]
    ) -> dict[str, Any]:
        """The verdict (wire) of the policy `key` at `point`; BudgetExceeded past the budget (plus the compile
        budget when this worker has not compiled it yet), WorkerFailed when the worker died, PolicyInvalid
        with the compiler's words when it does not compile."""
        while not self._slots.acquire(blocking=False):
            await asyncio.sleep(0.002)  # every worker busy: each task ends within its budget
        with self._lent() as worker:
            if not worker.ready:
                await worker.wait_async(START_SECONDS)
                worker.ready = True
            # The policy itself travels only when this worker says it does not hold it (not yet, or no more).
            request = {"op": "evaluate", "key": key, "point": point, "context": context}
            worker.send(request)
            answer = await worker.wait_async(self.eval_budget)
            if answer.get("missing"):
                worker.send(request | {"manifest": manifest, "bundles": bundles})
                answer = await worker.wait_async(self.eval_budget + self.compile_budget)
            if "problems" in answer:
                raise PolicyInvalid("; ".join(answer["problems"]))
            if "verdict" not in answer:
                raise WorkerFailed(answer.get("failed"))
            return dict(answer["verdict"])

    @property
    def compile_budget(self) -> float:
        return float(settings.POLICY_COMPILE_BUDGET_MS) / 1000

    @property
    def eval_budget(self) -> float:
        return float(settings.POLICY_EVAL_BUDGET_MS) / 1000

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


_SANDBOX: Sandbox | None = None
_CREATING = threading.Lock()


def sandbox() -> Sandbox:
    """The process's sandbox, created on first use from the settings."""
    global _SANDBOX
    if _SANDBOX is None:
        with _CREATING:
            if _SANDBOX is None:
                _SANDBOX = Sandbox(settings.POLICY_WORKERS)
                atexit.register(_SANDBOX.close)
    return _SANDBOX
