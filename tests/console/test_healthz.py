"""/healthz answers 200 when the database and the channel layer work, 503 (quickly) when one does not."""

import socket
import time

import pytest
from django.test import Client


def redis_layer(url: str) -> dict:
    return {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}}


def get_healthz() -> tuple[int, dict, float]:
    Client().get("/login/")  # the first request of a process imports the URLconf; keep that out of the timing
    started = time.monotonic()
    response = Client().get("/healthz")
    return response.status_code, response.json(), time.monotonic() - started


def test_it_reports_healthy_without_a_login(db):
    status, body, _ = get_healthz()
    assert status == 200
    assert body == {"status": "ok", "database": True, "channel_layer": True}


def test_it_reports_a_channel_layer_that_refuses_connections(db, settings):
    settings.CHANNEL_LAYERS = redis_layer("redis://127.0.0.1:1")
    status, body, elapsed = get_healthz()
    assert status == 503
    assert body == {"status": "unavailable", "database": True, "channel_layer": False}
    assert elapsed < 4


@pytest.fixture
def silent_server():
    """A port that accepts connections and never answers, like Redis behind a dead network path."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def test_it_does_not_hang_on_a_channel_layer_that_never_answers(db, settings, silent_server, monkeypatch):
    # Redis's own read timeout is 5 s (and a dead network path can take minutes); the probe stops first.
    monkeypatch.setattr("console.views.health_pages.HEALTHZ_TIMEOUT_SECONDS", 0.5)
    settings.CHANNEL_LAYERS = redis_layer(f"redis://127.0.0.1:{silent_server}")
    status, body, elapsed = get_healthz()
    assert status == 503
    assert body["channel_layer"] is False
    assert elapsed < 3


def local_redis_is_running() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.skipif(not local_redis_is_running(), reason="no Redis on 127.0.0.1:6379")
def test_it_reports_healthy_over_a_real_redis(db, settings):
    settings.CHANNEL_LAYERS = redis_layer("redis://127.0.0.1:6379/15")
    for _ in range(2):  # a second probe must not trip over the first one's leftovers
        status, body, _ = get_healthz()
        assert (status, body["channel_layer"]) == (200, True)
