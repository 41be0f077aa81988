"""The console websocket, driven through the real ASGI application."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from console.asgi import application
from console.models import Membership, Tenant
from tests.conftest import PASSWORD

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("empty_channel_layer", "close_worker_thread_connections"),
]

LOCAL = b"http://localhost"


@sync_to_async
def session_cookie(username: str, tenant: Tenant | None = None) -> bytes:
    """Log in through the real login page and return the browser's session cookie."""
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    if tenant is not None:
        assert client.post("/tenant/switch/", {"tenant": tenant.pk}).status_code == 302
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@sync_to_async
def create_member(username: str, *tenants_and_roles: tuple[str, str]) -> User:
    user = User.objects.create_user(username, password=PASSWORD)
    for slug, role in tenants_and_roles:
        tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug.title()})
        Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


def communicator(*headers: tuple[bytes, bytes], scheme: str = "ws") -> WebsocketCommunicator:
    """A handshake as a browser on http://localhost sends it (Host first), plus `headers`."""
    ws = WebsocketCommunicator(application, "/ws/console/", headers=[(b"host", b"localhost"), *headers])
    ws.scope["scheme"] = scheme
    return ws


async def opened_by(cookie: bytes, origin: bytes, host: bytes, scheme: str = "ws") -> bool:
    """Whether a handshake to `host` from a page of `origin` carrying `cookie` opens the console socket."""
    ws = WebsocketCommunicator(
        application, "/ws/console/", headers=[(b"host", host), (b"cookie", cookie), (b"origin", origin)]
    )
    ws.scope["scheme"] = scheme
    connected, _ = await ws.connect()
    if connected:
        await ws.disconnect()
    return connected


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


async def test_it_opens_for_a_page_of_its_own_origin():
    await create_member("rita", ("acme", "reader"))
    cookie = await session_cookie("rita")
    assert await opened_by(cookie, b"http://127.0.0.1:8000", host=b"127.0.0.1:8000")
    assert await opened_by(cookie, b"https://localhost", host=b"localhost", scheme="wss")


async def test_it_refuses_a_page_of_the_same_host_on_another_port():
    """Another port of the same host is another origin: a page there must not read the operator's pushes."""
    await create_member("rita", ("acme", "reader"))
    cookie = await session_cookie("rita")
    assert not await opened_by(cookie, b"http://127.0.0.1:9999", host=b"127.0.0.1:8000")
    assert not await opened_by(cookie, b"http://localhost:8000", host=b"localhost")


async def test_it_refuses_a_page_of_the_same_host_over_another_scheme():
    await create_member("rita", ("acme", "reader"))
    cookie = await session_cookie("rita")
    assert not await opened_by(cookie, b"http://localhost", host=b"localhost", scheme="wss")
    assert not await opened_by(cookie, b"https://localhost", host=b"localhost", scheme="ws")


async def test_it_refuses_a_host_outside_allowed_hosts_even_from_its_own_origin():
    await create_member("rita", ("acme", "reader"))
    cookie = await session_cookie("rita")
    assert not await opened_by(cookie, b"http://evil.example", host=b"evil.example")


async def test_it_refuses_a_handshake_without_an_origin():
    await create_member("rita", ("acme", "reader"))
    ws = communicator((b"cookie", await session_cookie("rita")))
    connected, _ = await ws.connect()
    assert not connected


async def test_it_opens_for_a_trusted_origin_behind_a_proxy(settings):
    """A TLS proxy forwards to the console's own address; the public origin is in CSRF_TRUSTED_ORIGINS."""
    settings.CSRF_TRUSTED_ORIGINS = ["https://airlock.example.com", "https://*.airlock.example.net"]
    await create_member("rita", ("acme", "reader"))
    cookie = await session_cookie("rita")
    assert await opened_by(cookie, b"https://airlock.example.com", host=b"127.0.0.1:8000")
    assert await opened_by(cookie, b"https://eu.airlock.example.net", host=b"127.0.0.1:8000")
    assert not await opened_by(cookie, b"http://airlock.example.com", host=b"127.0.0.1:8000")
    assert not await opened_by(cookie, b"https://airlock.example.com:8443", host=b"127.0.0.1:8000")


async def test_it_takes_the_scheme_from_the_proxy_header_it_trusts(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    await create_member("rita", ("acme", "reader"))
    cookie = await session_cookie("rita")
    ws = WebsocketCommunicator(
        application,
        "/ws/console/",
        headers=[
            (b"host", b"localhost"),
            (b"x-forwarded-proto", b"https"),
            (b"cookie", cookie),
            (b"origin", b"https://localhost"),
        ],
    )
    connected, _ = await ws.connect()
    assert connected
    await ws.disconnect()


@pytest.mark.parametrize(
    "frame",
    [{"text_data": "not json"}, {"text_data": "{"}, {"bytes_data": b"\x00\xff"}, {"text_data": "[" * 100_000}],
    ids=["text", "truncated", "binary", "deeply-nested"],
)
async def test_it_ignores_a_malformed_frame_and_stays_open(frame):
    await create_member("rita", ("acme", "reader"))
    ws = communicator((b"cookie", await session_cookie("rita")), (b"origin", LOCAL))
    await ws.connect()
    await ws.receive_json_from()
    await ws.send_to(**frame)
    assert await ws.receive_nothing()
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from() == {"type": "heartbeat", "pending": 0}
    await ws.disconnect()


# 100 sockets' handshakes on a loaded machine (PostgreSQL, xdist): a second each is not always enough.
HANDSHAKE_SECONDS = 10


async def test_it_closes_a_users_101st_socket_while_another_user_opens_one():
    """One user's sockets are capped (WEBSOCKETS_PER_USER, 100): the next is accepted and closed with 4429 at
    once, so its client sees why."""
    await create_member("rita", ("acme", "reader"))
    await create_member("sam", ("acme", "reader"))
    rita, sam = await session_cookie("rita"), await session_cookie("sam")
    held: list[WebsocketCommunicator] = []
    try:
        for _ in range(100):
            ws = communicator((b"cookie", rita), (b"origin", LOCAL))
            held.append(ws)
            assert (await ws.connect(timeout=HANDSHAKE_SECONDS))[0]
            assert (await ws.receive_json_from(timeout=HANDSHAKE_SECONDS))["type"] == "heartbeat"

        over = communicator((b"cookie", rita), (b"origin", LOCAL))
        assert (await over.connect(timeout=HANDSHAKE_SECONDS))[0]
        assert await over.receive_output(timeout=HANDSHAKE_SECONDS) == {
            "type": "websocket.close",
            "code": 4429,
            "reason": "too many open websockets",
        }
        await over.wait()
        other = communicator((b"cookie", sam), (b"origin", LOCAL))
        held.append(other)
        assert (await other.connect(timeout=HANDSHAKE_SECONDS))[0]
        assert (await other.receive_json_from(timeout=HANDSHAKE_SECONDS))["type"] == "heartbeat"

        await held.pop(0).disconnect()  # a socket closed gives its place back
        again = communicator((b"cookie", rita), (b"origin", LOCAL))
        held.append(again)
        assert (await again.connect(timeout=HANDSHAKE_SECONDS))[0]
        assert (await again.receive_json_from(timeout=HANDSHAKE_SECONDS))["type"] == "heartbeat"
    finally:
        for ws in held:
            await ws.disconnect()


async def test_it_answers_a_ping_flood_with_at_most_one_heartbeat_a_second():
    """Each heartbeat reads the database: 3,000 pings got 3,000 of them. Pings closer together than
    PING_INTERVAL_SECONDS are dropped unread; the socket stays open."""
    from approvals.consumers import PING_INTERVAL_SECONDS

    await create_member("rita", ("acme", "reader"))
    ws = communicator((b"cookie", await session_cookie("rita")), (b"origin", LOCAL))
    await ws.connect()
    await ws.receive_json_from()
    started = asyncio.get_running_loop().time()
    for _ in range(3000):
        await ws.send_json_to({"type": "ping"})
    heartbeats = 0
    while not await ws.receive_nothing(timeout=0.5):
        assert (await ws.receive_json_from())["type"] == "heartbeat"
        heartbeats += 1
    elapsed = asyncio.get_running_loop().time() - started

    assert 1 <= heartbeats <= 1 + elapsed / PING_INTERVAL_SECONDS
    await asyncio.sleep(PING_INTERVAL_SECONDS)
    await ws.send_json_to({"type": "ping"})
    assert await ws.receive_json_from() == {"type": "heartbeat", "pending": 0}
    await ws.disconnect()
