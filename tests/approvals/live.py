"""Fixtures and checks of the tests that drive the console websocket and its pushes (import them by name)."""

import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connections

from approvals.push import notify_requests_closed


@pytest.fixture(autouse=True)
async def empty_channel_layer():
    """The in-memory layer lives as long as the process; start each test without earlier groups."""
    await get_channel_layer().flush()


@pytest.fixture(autouse=True)
async def close_worker_thread_connections():
    """ORM calls from async code run in asgiref's worker thread, whose connection outlives the test;
    on PostgreSQL that open session keeps the test database from being dropped at the end."""
    yield
    await sync_to_async(connections.close_all)()


async def assert_nothing_pushed(tenant_id: int, *sockets: WebsocketCommunicator) -> None:
    """Nothing reached `sockets` (open consoles of the tenant) since their last message. A marker pushed to
    the tenant now must be the next message of each: a socket gets its messages in the order they were sent,
    so a push sent before the marker cannot slip past, however late it arrives (a short `receive_nothing()`
    wait can miss one)."""
    marker = f"marker-{uuid.uuid4()}"
    await sync_to_async(notify_requests_closed)(tenant_id, [marker])
    for ws in sockets:
        pushed = await ws.receive_json_from(timeout=5)
        assert pushed.get("ids") == [marker], f"pushed before the marker: {pushed}"
