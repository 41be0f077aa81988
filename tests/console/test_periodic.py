"""Periodic work in a daemon thread: runs again after a failure, starts once per name."""

import threading
import uuid

from console.periodic import start_periodic


def test_it_keeps_calling_after_a_failing_step_and_starts_once_per_name():
    calls: list[int] = []
    third = threading.Event()

    def step() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("the first round fails")
        if len(calls) >= 3:
            third.set()
            threading.Event().wait()  # park the thread: the test has seen what it needs

    name = f"test-{uuid.uuid4().hex[:6]}"
    assert start_periodic(name, 0.01, step) is True
    assert start_periodic(name, 0.01, step) is False

    assert third.wait(5), calls
