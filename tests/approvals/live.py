"""Fixtures of the tests that drive the console websocket and its pushes (import them by name)."""

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connections


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
