"""`/healthz`: whether the database and the channel layer answer, for load balancers and probes."""

import asyncio

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

# Load balancers give up after a few seconds; answer before they do.
HEALTHZ_TIMEOUT_SECONDS = 2


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database_ok(), "channel_layer": _channel_layer_ok()}
    return JsonResponse(
        {"status": "ok" if all(checks.values()) else "unavailable", **checks},
        status=200 if all(checks.values()) else 503,
    )


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        return False


def _channel_layer_ok() -> bool:
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        return async_to_sync(_round_trip)(layer)
    except Exception:
        return False


async def _round_trip(layer: BaseChannelLayer) -> bool:
    """Send a message to a fresh channel of our own and read it back, within a bounded time.

    A channel of our own keeps concurrent probes (several daphne processes on one Redis) from reading
    each other's messages; the timeout makes an unreachable layer a 503 rather than a hung probe.
    """
    async with asyncio.timeout(HEALTHZ_TIMEOUT_SECONDS):
        channel = await layer.new_channel("healthz.")
        await layer.send(channel, {"type": "healthz.probe"})
        message = await layer.receive(channel)
    return message.get("type") == "healthz.probe"
