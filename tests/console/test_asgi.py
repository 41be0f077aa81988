"""The console's ASGI handler keeps its request threads: a later request runs on a thread an earlier one
left idle (with that thread's database connection and event loop), and a request whose view is still
running keeps its thread to itself, so other requests are served meanwhile on threads of their own."""

import asyncio
import threading
from dataclasses import dataclass, field

import pytest
from channels.testing import HttpCommunicator
from django.http import HttpRequest, HttpResponse
from django.urls import path

from console.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Gate:
    """What the views of this module wait for, and the threads they ran on."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    together: threading.Barrier = field(default_factory=lambda: threading.Barrier(3))
    threads: dict[str, threading.Thread] = field(default_factory=dict)


GATE = Gate()


def blocked(request: HttpRequest) -> HttpResponse:
    """Holds its request thread until the test releases it."""
    GATE.threads["blocked"] = threading.current_thread()
    GATE.entered.set()
    return HttpResponse("released" if GATE.release.wait(10) else "never released")


def quick(request: HttpRequest) -> HttpResponse:
    GATE.threads["quick"] = threading.current_thread()
    return HttpResponse("quick")


def meet(request: HttpRequest, number: int) -> HttpResponse:
    """Answers once three requests are in this view at the same time (each must have a thread)."""
    GATE.threads[f"meet-{number}"] = threading.current_thread()
    try:
        GATE.together.wait(timeout=5)
    except threading.BrokenBarrierError:
        return HttpResponse("alone", status=504)
    return HttpResponse("met")


urlpatterns = [path("blocked/", blocked), path("quick/", quick), path("meet/<int:number>/", meet)]


@pytest.fixture
def gate(settings):
    """This module's views, in place of the console's URLs."""
    global GATE
    GATE = Gate()
    settings.ROOT_URLCONF = __name__
    yield GATE
    GATE.release.set()


def request_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("request")}


async def get(path: str, timeout: float = 10) -> tuple[int, bytes]:
    communicator = HttpCommunicator(application, "GET", path, headers=[(b"host", b"localhost")])
    response = await communicator.get_response(timeout=timeout)
    return response["status"], response["body"]


async def settle() -> None:
    """Wait until every request thread's executor is back on the idle list (it goes back once the work
    its request queued has run, just after the response)."""
    handler = application.application_mapping["http"]
    for _ in range(400):
        if len(handler.requests.idle) == len(request_threads()):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{len(request_threads())} request threads, {len(handler.requests.idle)} idle")


async def test_it_runs_one_request_after_another_on_the_threads_it_has(gate):
    assert await get("/quick/") == (200, b"quick")
    await settle()
    kept = request_threads()
    assert gate.threads["quick"] in kept

    for _ in range(5):
        assert await get("/quick/") == (200, b"quick")
        await settle()
        assert gate.threads["quick"] in kept

    assert request_threads() == kept


async def test_it_serves_a_second_request_while_the_first_ones_view_is_blocked(gate):
    first = asyncio.ensure_future(get("/blocked/", timeout=20))
    assert await asyncio.to_thread(gate.entered.wait, 10)

    try:
        # Were the second request queued behind the first one's thread, it would wait for the release.
        second = await get("/quick/", timeout=5)
    finally:
        gate.release.set()

    assert second == (200, b"quick")
    assert await first == (200, b"released")
    assert gate.threads["quick"] is not gate.threads["blocked"]


async def test_it_gives_concurrent_requests_threads_of_their_own_and_keeps_them(gate):
    met = await asyncio.gather(*(get(f"/meet/{n}/") for n in range(3)))
    first_round = {gate.threads.pop(f"meet-{n}") for n in range(3)}
    await settle()

    assert met == [(200, b"met")] * 3
    assert len(first_round) == 3

    gate.together.reset()
    assert await asyncio.gather(*(get(f"/meet/{n}/") for n in range(3))) == [(200, b"met")] * 3
    # The three threads went back to the idle list and served the next three requests.
    assert {gate.threads[f"meet-{n}"] for n in range(3)} == first_round
