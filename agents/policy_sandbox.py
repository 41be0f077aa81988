"""Where tenants' policies run: a few worker processes (agents.policy_worker), each task under a budget.

A Rego query can cost seconds of CPU to compile or to evaluate, and the engine's native code holds the GIL
while it compiles: run in the console's process, one tenant's save stalled every other request. Here the
work runs in another process, at a lower priority, and a task that overruns its budget gets its worker
killed (a fresh one starts for the next task); the caller gets `BudgetExceeded` and denies (fail-closed).

`SANDBOX.check(key, manifest, bundles)` compiles a policy and `SANDBOX.sample(key, manifest, bundles, contexts)`
evaluates it at sample contexts (what saving a definition asks); `await SANDBOX.evaluate(key, manifest, bundles,
point, context)` is one interception (what a turn asks), with the cause when the policy failed.
Both may be called from any thread, the latter from any event loop: a worker serves one task at a time and
the caller waits on its pipe (the GIL is free meanwhile). The process-wide instance is created on first use
with `POLICY_WORKERS` workers at most; the budgets are the settings `POLICY_COMPILE_BUDGET_MS` and
`POLICY_EVAL_BUDGET_MS` when a task starts.

Fair between tenants: a task is its tenant's (`for_tenant(tenant)` around the call; the server says whose,
never the policy's context), and one tenant's tasks hold at most `POLICY_WORKERS_PER_TENANT` workers at once.
Its further tasks wait in its own queue, and a worker that comes free goes to the tenants with tasks waiting
in turn, so a tenant whose policy costs seconds keeps the other workers busy with nobody's work but its own
queue's. A task waits for its turn at most its budget (then `BudgetExceeded`, a deny): a queue too long is
its own tenant's timeout, never another's.
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
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents.policy_probe import explainable
from agents.policy_worker import HELD, NICENESS
from console import metrics

# The worker's first frame says it is ready; its start (an interpreter and the policy engine) is not
# charged to the first task's budget.
START_SECONDS = 30.0


class BudgetExceeded(Exception):
    """The task ran past its budget; its worker was killed."""


class WorkerFailed(Exception):
    """The worker died or answered nothing readable (for example, out of memory); it was replaced."""


class PolicyInvalid(ValueError):
    """The policy does not compile; the message is the compiler's."""


class _Unexplained(Exception):
    """The cause of a failed evaluation was not found within its budget: the verdict (`args[0]`) goes on."""


# Whose tasks these are: the tenant the server acts for (a context's own `tenant` is the caller's word).
_TENANT: ContextVar[str] = ContextVar("policy_tenant", default="")


@contextlib.contextmanager
def for_tenant(tenant: str | None) -> Iterator[None]:
    """The policy tasks started within (in this thread, or tasks of this coroutine) are `tenant`'s: they wait for
    its share of the workers. Outside any, tasks share the queue of the tenant ""."""
    token = _TENANT.set(tenant or "")
    try:
        yield
    finally:
        _TENANT.reset(token)


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    buffer: bytearray = field(default_factory=bytearray)
    ready: bool = False
    # The policies the worker holds, as it keeps them (least recently used first): a task goes to a worker
    # that holds its policy when one is idle, so a tenant's cheap policy is not compiled again after another
    # tenant's task had its worker.
    held: OrderedDict[str, None] = field(default_factory=OrderedDict)

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
        # Lowered at once, not when the worker gets to it: its start-up (an interpreter and the engine) would
        # otherwise compete with the console's requests at their priority, once per task a tenant's policy has
        # killed.
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, process.pid, NICENESS)
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

    def holds(self, key: str) -> None:
        self.held[key] = None
        self.held.move_to_end(key)
        while len(self.held) > HELD:
            self.held.popitem(last=False)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def _settle(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


@dataclass(eq=False)
class _Turn:
    """A task waiting in its tenant's queue; `wake` is called (under the sandbox's lock) when it is given a
    worker's place."""

    tenant: str
    wake: Callable[[], object]
    given: bool = False


class Sandbox:
    """At most `size` workers, at most `share` of them (ceil(size / 2) unless given) busy with one tenant's tasks."""

    def __init__(self, size: int, share: int | None = None) -> None:
        self.size = size
        self.share = min(size, share or -(-size // 2))
        self._idle: list[_Worker] = []
        self._alive = 0  # workers started and not killed, idle or lent
        self._lock = threading.Lock()
        self._busy = 0
        self._running: Counter[str] = Counter()
        # Tenants with tasks waiting, the next to be served first; each one's tasks in the order they came.
        self._queues: OrderedDict[str, deque[_Turn]] = OrderedDict()

    # ---- turns: the workers' places, shared between tenants ----------------------------------------------

    def _queue(self, tenant: str, wake: Callable[[], object]) -> _Turn | None:
        """None when `tenant` may start a task now (its place taken), else its turn, queued."""
        with self._lock:
            # Free places are only ever left when no waiting tenant may take one: nobody is overtaken.
            if self._busy < self.size and self._running[tenant] < self.share and tenant not in self._queues:
                self._busy += 1
                self._running[tenant] += 1
                return None
            turn = _Turn(tenant, wake)
            self._queues.setdefault(tenant, deque()).append(turn)
            return turn

    def _hand_out(self) -> None:
        """Free places to the waiting tenants under their share, one task each in turn (under the lock)."""
        while self._busy < self.size:
            tenant = next((t for t in self._queues if self._running[t] < self.share), None)
            if tenant is None:
                return
            waiting = self._queues[tenant]
            turn = waiting.popleft()
            if waiting:
                self._queues.move_to_end(tenant)
            else:
                del self._queues[tenant]
            self._busy += 1
            self._running[tenant] += 1
            turn.given = True
            turn.wake()

    def _leave(self, tenant: str) -> None:
        with self._lock:
            self._busy -= 1
            self._running[tenant] -= 1
            if not self._running[tenant]:
                del self._running[tenant]
            self._hand_out()

    def _give_up(self, turn: _Turn) -> bool:
        """Take `turn` out of its queue; True when it was given its place meanwhile (the caller holds it)."""
        with self._lock:
            if turn.given:
                return True
            waiting = self._queues[turn.tenant]
            waiting.remove(turn)
            if not waiting:
                del self._queues[turn.tenant]
            return False

    def _wait_turn(self, tenant: str, seconds: float) -> None:
        given = threading.Event()
        turn = self._queue(tenant, given.set)
        if turn is not None and not given.wait(seconds) and not self._give_up(turn):
            raise BudgetExceeded

    async def _wait_turn_async(self, tenant: str, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        given: asyncio.Future[None] = loop.create_future()
        # The place may be handed out from another thread (a task ending there) or from within this loop.
        turn = self._queue(tenant, lambda: loop.call_soon_threadsafe(_settle, given))
        if turn is None:
            return
        try:
            async with asyncio.timeout(seconds):
                await given
        except TimeoutError:
            if not self._give_up(turn):
                raise BudgetExceeded from None
        except BaseException:  # the caller gave up (cancelled): its place, if it got one, goes on
            if self._give_up(turn):
                self._leave(tenant)
            raise

    # ---- workers ------------------------------------------------------------------------------------------

    def _take_worker(self, key: str) -> _Worker:
        """An idle worker that holds the policy `key`, else one that holds none yet, else a new one while
        there is room: another tenant's warm worker is taken last (its next task would compile again)."""
        with self._lock:
            fitting = [w for w in self._idle if key in w.held] or [w for w in self._idle if not w.held]
            if fitting or (self._idle and self._alive >= self.size):
                worker = (fitting or sorted(self._idle, key=lambda w: len(w.held)))[0]
                self._idle.remove(worker)
                return worker
            self._alive += 1
        return self._started()

    def _started(self) -> _Worker:
        """A new worker, counted alive (by the caller, under the lock) before it starts."""
        try:
            return _Worker.start()
        except BaseException:
            with self._lock:
                self._alive -= 1
            raise

    def _kill(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._alive -= 1

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    @contextlib.contextmanager
    def _lent(self, key: str) -> Iterator[_Worker]:
        """A worker for one task: given back after, or killed when the task failed on the worker's side — over
        budget, dead, or abandoned by its caller (a timeout): it must not run on. A killed worker's successor
        starts at once, so the next task (another tenant's, likely) does not wait for an interpreter."""
        worker = self._take_worker(key)
        try:
            yield worker
        except PolicyInvalid:  # the policy's own fault: the worker is fine
            self._give_back(worker)
            raise
        except BaseException:
            self._kill(worker)
            with self._lock:
                self._alive += 1
            with contextlib.suppress(OSError):  # no process to spare: the next task starts one, or fails
                self._give_back(self._started())
            raise
        self._give_back(worker)

    def check(self, key: str, manifest: str, bundles: dict[str, Any]) -> list[str]:
        """Why the policy does not compile (the compiler's words), empty when it does; BudgetExceeded when
        compiling took longer than the compile budget (or its tenant's turn did not come within it)."""
        request = {"op": "check", "key": key, "manifest": manifest, "bundles": bundles}
        return list(self._task(key, request).get("problems", []))

    def sample(
        self, key: str, manifest: str, bundles: dict[str, Any], contexts: list[tuple[str, dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """The policy evaluated at each (point, context), what saving a definition asks: `{point, verdict,
        cause}` each, the cause of a failed evaluation found (agents.policy_probe) or None. One task under the
        compile budget and the evaluation budget of each context; PolicyInvalid when it does not compile."""
        request = {"op": "sample", "key": key, "manifest": manifest, "bundles": bundles, "contexts": contexts}
        answer = self._task(key, request, self.eval_budget * len(contexts))
        if "problems" in answer:
            raise PolicyInvalid("; ".join(answer["problems"]))
        if "results" not in answer:
            raise WorkerFailed(answer.get("failed"))
        return list(answer["results"])

    def _task(self, key: str, request: dict[str, Any], more: float = 0.0) -> dict[str, Any]:
        """`request`'s answer, one task of the calling thread's tenant within the compile budget (and `more`
        seconds); the worker holds the policy after an answer without problems."""
        tenant, budget = _TENANT.get(), self.compile_budget + more
        self._wait_turn(tenant, budget)
        try:
            with self._lent(key) as worker:
                if not worker.ready:
                    worker.wait(START_SECONDS)
                    worker.ready = True
                worker.send(request)
                answer = worker.wait(budget)
                if not answer.get("problems"):
                    worker.holds(key)
                return answer
        finally:
            self._leave(tenant)

    async def evaluate(
        self, key: str, manifest: str, bundles: dict[str, Any], point: str, context: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The verdict (wire) of the policy `key` at `point`, and the cause when it failed there (agents.policy_probe,
        within the compile budget; else None). BudgetExceeded past the budget (plus the compile budget on a worker
        yet to compile it) or when the tenant's turn did not come within it; WorkerFailed; PolicyInvalid."""
        tenant, began = _TENANT.get(), time.monotonic()
        await self._wait_turn_async(tenant, self.eval_budget)
        try:
            with self._lent(key) as worker:
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
                worker.holds(key)
                verdict = dict(answer["verdict"])
                if not explainable(verdict):
                    return verdict, None
                worker.send(
                    request | {"op": "explain", "manifest": manifest, "bundles": bundles, "reason": verdict["reason"]}
                )
                try:
                    return verdict, (await worker.wait_async(self.compile_budget)).get("cause")
                except BudgetExceeded:  # the verdict stands; the worker, still explaining, is killed
                    raise _Unexplained(verdict) from None
        except _Unexplained as unexplained:
            return unexplained.args[0], None
        finally:
            self._leave(tenant)
            metrics.policy_evaluated(tenant, point, time.monotonic() - began)

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
            self._kill(worker)


_SANDBOX: Sandbox | None = None
_CREATING = threading.Lock()


def sandbox() -> Sandbox:
    """The process's sandbox, created on first use from the settings."""
    global _SANDBOX
    if _SANDBOX is None:
        with _CREATING:
            if _SANDBOX is None:
                _SANDBOX = Sandbox(settings.POLICY_WORKERS, settings.POLICY_WORKERS_PER_TENANT)
                atexit.register(_SANDBOX.close)
    return _SANDBOX
