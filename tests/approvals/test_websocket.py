"""The console websocket, driven through the real ASGI application."""

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from console.asgi import application
from console.models import Membership, Tenant
from tests.approvals.live import close_worker_thread_connections, empty_channel_layer  # noqa: F401
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)

LOCAL = b"http://localhost"


@sync_to_async
def session_cookie(username: str, tenant: Tenant | None = None) -> bytes:
    """Log in through the real login page and return the browser's session cookie."""
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    if tenant is not None:
        assert client.post("/tenant/", {"tenant": tenant.pk}).status_code == 302
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@sync_to_async
def create_member(username: str, *tenants_and_roles: tuple[str, str]) -> User:
    user = User.objects.create_user(username, password=PASSWORD)
    for slug, role in tenants_and_roles:
        tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug.title()})
        Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def communicator(*headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/console/", headers=list(headers))


async def test_it_greets_a_member_with_a_heartbeat():
    await create_member("rita", ("acme", "reader"))
    ws = communicator((b"cookie", await session_cookie("rita")), (b"origin", LOCAL))
    connected, _ = await ws.connect()
    assert connected
    assert await ws.receive_json_from() == {"type": "heartbeat", "pending": 0}
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from() == {"type": "heartbeat", "pending": 0}
    await ws.disconnect()


async def test_it_ignores_messages_it_does_not_know():
    await create_member("rita", ("acme", "reader"))
    ws = communicator((b"cookie", await session_cookie("rita")), (b"origin", LOCAL))
    await ws.connect()
    await ws.receive_json_from()
    await ws.send_json_to({"type": "approve", "requestId": "x"})
    assert await ws.receive_nothing()
    await ws.disconnect()


async def test_it_listens_to_the_chosen_tenant_only_while_open():
    await create_member("ada", ("acme", "admin"), ("globex", "reader"))
    acme, globex = await Tenant.objects.aget(slug="acme"), await Tenant.objects.aget(slug="globex")
    ws = communicator((b"cookie", await session_cookie("ada", tenant=globex)), (b"origin", LOCAL))
    await ws.connect()
    await ws.receive_json_from()
    # No push types exist yet, so look at the in-memory layer's groups: pushes go to tenant groups.
    groups = get_channel_layer().groups
    assert len(groups.get(f"tenant.{globex.pk}", {})) == 1
    assert f"tenant.{acme.pk}" not in groups
    await ws.disconnect()
    assert not groups.get(f"tenant.{globex.pk}")


async def test_it_refuses_an_anonymous_visitor():
    ws = communicator((b"origin", LOCAL))
    connected, code = await ws.connect()
    assert not connected
    assert code == 4401


async def test_it_refuses_a_forged_session_cookie():
    ws = communicator((b"cookie", b"sessionid=forged"), (b"origin", LOCAL))
    connected, code = await ws.connect()
    assert (connected, code) == (False, 4401)


async def test_it_refuses_a_foreign_origin():
    await create_member("rita", ("acme", "reader"))
    ws = communicator((b"cookie", await session_cookie("rita")), (b"origin", b"http://evil.example"))
    connected, _ = await ws.connect()
    assert not connected


async def test_it_refuses_a_user_without_a_membership():
    await create_member("nomad")
    ws = communicator((b"cookie", await session_cookie("nomad")), (b"origin", LOCAL))
    connected, code = await ws.connect()
    assert (connected, code) == (False, 4403)


async def test_it_refuses_a_deactivated_user():
    user = await create_member("rita", ("acme", "reader"))
    cookie = await session_cookie("rita")
    user.is_active = False
    await user.asave()
    ws = communicator((b"cookie", cookie), (b"origin", LOCAL))
    connected, _ = await ws.connect()
    assert not connected
