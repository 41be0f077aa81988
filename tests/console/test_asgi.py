"""The console's ASGI handler keeps its request threads: a later request runs on a thread an earlier one
left idle (with that thread's database connection and event loop), and a request whose view is still
running keeps its thread to itself."""

import asyncio
import threading

import pytest
from channels.testing import HttpCommunicator

from console.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def request_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("request")}


async def healthz() -> int:
    response = await HttpCommunicator(application, "GET", "/healthz", headers=[(b"host", b"localhost")]).get_response(
        timeout=10
    )
    return response["status"]


async def settle() -> None:
    """Let the executors handed back after the last responses reach the idle list."""
    for _ in range(50):
        await asyncio.sleep(0.01)


async def test_it_runs_one_request_after_another_on_the_threads_it_has():
    assert await healthz() == 200
    await settle()
    kept = request_threads()
    assert kept

    for _ in range(5):
        assert await healthz() == 200
        await settle()

    assert request_threads() == kept


async def test_it_gives_concurrent_requests_threads_of_their_own_and_keeps_them():
    statuses = await asyncio.gather(*(healthz() for _ in range(3)))
    await settle()
    kept = request_threads()
    assert statuses == [200, 200, 200]
    assert len(kept) >= 1

    assert await asyncio.gather(*(healthz() for _ in range(3))) == [200, 200, 200]
    await settle()
    assert request_threads() == kept
