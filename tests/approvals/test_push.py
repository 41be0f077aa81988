"""Inbox pushes as an open console receives them over the real websocket: new requests with the card of
the member's role, closed requests with the new pending count, nothing across tenants, and membership
changes taking effect on sockets already open."""

import asyncio
import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals import push
from approvals.actions import escalate_due, expire_due
from approvals.models import ApproverGroup, PendingRequest
from approvals.push import tenant_group
from console.asgi import application
from console.models import Membership
from tests.conftest import PASSWORD, Persona, make_persona
from tests.helpers import assert_nothing_pushed, make_agent, run_ok

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("empty_channel_layer", "close_worker_thread_connections"),
]

EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}
SEND = f"call send_email {json.dumps(EMAIL)}"
LOCAL = b"http://localhost"
APPROVE_BUTTON = '<button name="decision" value="approve">'


@pytest.fixture
def assistant(admin) -> Agent:
    return make_agent(admin)


@sync_to_async
def session_cookie(persona: Persona) -> bytes:
    """Log in through the real login page and return the browser's session cookie."""
    client = Client()
    assert client.login(username=persona.user.username, password=PASSWORD)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def connect(persona: Persona) -> WebsocketCommunicator:
    """An open console of `persona`, past its greeting."""
    cookie = await session_cookie(persona)
    headers = [(b"host", b"localhost"), (b"cookie", cookie), (b"origin", LOCAL)]
    ws = WebsocketCommunicator(application, "/ws/console/", headers=headers)
    connected, _ = await ws.connect()
    assert connected
    greeting = await ws.receive_json_from()
    assert greeting["type"] == "heartbeat"
    return ws


@sync_to_async
def ask(persona: Persona, message: str = SEND, session: str = "s1") -> dict[str, Any]:
    result = run_ok(persona, {"message": message, "sessionId": session})
    assert result["pendingRequests"], result
    return result


@sync_to_async
def respond(persona: Persona, asked: dict[str, Any], index: int = 0) -> dict[str, Any]:
    body = {"requestId": request_id(asked, index), "approved": True}
    response = persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)
    assert response.status_code == 200, response.content
    return response.json()


def request_id(result: dict[str, Any], index: int = 0) -> str:
    return result["pendingRequests"][index]["requestId"]


async def opened(ws: WebsocketCommunicator) -> dict[str, Any]:
    pushed = await ws.receive_json_from(timeout=5)
    assert pushed["type"] == "requests_opened", pushed
    return pushed


async def closed(ws: WebsocketCommunicator) -> dict[str, Any]:
    """The next push, which must close requests, without its `sentAt` (when it left)."""
    pushed = await ws.receive_json_from(timeout=5)
    assert pushed["type"] == "requests_closed", pushed
    assert isinstance(pushed.pop("sentAt"), float)
    return pushed


async def close_all(*sockets: WebsocketCommunicator) -> None:
    for ws in sockets:
        await ws.disconnect()


async def test_it_pushes_a_new_request_with_answer_buttons_to_an_operator(operator, assistant):
    ws = await connect(operator)

    asked = await ask(operator)

    pushed = await opened(ws)
    rid = request_id(asked)
    assert pushed["ids"] == [rid]
    assert pushed["titles"] == ["assistant: send_email"]
    assert pushed["pending"] == 1
    html = pushed["html"]
    assert f'id="request-{rid}"' in html
    assert "<code>send_email</code>" in html
    assert "a@b.co" in html
    assert APPROVE_BUTTON in html
    assert '<button name="decision" value="deny" class="danger">' in html
    await assert_nothing_pushed(operator.tenant.pk, ws)  # pushed once
    await close_all(ws)


async def test_it_pushes_the_card_without_answer_buttons_to_a_reader(operator, reader, assistant):
    ws = await connect(reader)

    asked = await ask(operator)

    pushed = await opened(ws)
    assert pushed["ids"] == [request_id(asked)]
    assert "<code>send_email</code>" in pushed["html"]
    assert "<form" not in pushed["html"]
    # The only button is the card's row in the dense inbox (it selects the card, it answers nothing).
    assert pushed["html"].count("<button") == pushed["html"].count('<button type="button" class="card-row"') == 1
    assert "Waiting for an operator to answer." in pushed["html"]
    await close_all(ws)


async def test_it_pushes_a_client_tool_request_with_its_result_form(operator, assistant):
    ws = await connect(operator)

    await ask(operator, "call get_user_location {}")

    pushed = await opened(ws)
    assert pushed["titles"] == ["assistant: get_user_location"]
    assert '<button name="decision" value="result">' in pushed["html"]
    await close_all(ws)


async def test_it_pushes_parallel_requests_together(operator, assistant):
    ws = await connect(operator)

    asked = await ask(operator, f"{SEND}\n{SEND}")

    pushed = await opened(ws)
    assert pushed["ids"] == [request_id(asked, 0), request_id(asked, 1)]
    assert pushed["pending"] == 2
    assert pushed["html"].count(APPROVE_BUTTON) == 2
    await close_all(ws)


async def test_it_never_pushes_one_tenants_requests_to_another(operator, outsider, assistant):
    ours, theirs = await connect(operator), await connect(outsider)
    await sync_to_async(make_agent)(outsider)

    asked = await ask(operator)

    assert (await opened(ours))["ids"] == [request_id(asked)]
    await assert_nothing_pushed(outsider.tenant.pk, theirs)

    their_request = await ask(outsider)

    pushed = await opened(theirs)
    assert (pushed["ids"], pushed["pending"]) == ([request_id(their_request)], 1)
    await assert_nothing_pushed(operator.tenant.pk, ours)
    await respond(outsider, their_request)
    assert (await theirs.receive_json_from())["type"] == "requests_closed"
    await assert_nothing_pushed(operator.tenant.pk, ours)
    await assert_nothing_pushed(outsider.tenant.pk, theirs)
    await close_all(ours, theirs)


async def test_it_pushes_an_answered_request_as_closed_to_everyone(operator, reader, admin, assistant):
    sockets = [await connect(p) for p in (operator, reader, admin)]
    asked = await ask(operator)
    for ws in sockets:
        await opened(ws)

    await respond(operator, asked)

    for ws in sockets:
        assert await closed(ws) == {"type": "requests_closed", "ids": [request_id(asked)], "pending": 0}
    # Closed once, and the continuation (queued) pushed nothing.
    await assert_nothing_pushed(operator.tenant.pk, *sockets)
    await close_all(*sockets)


async def test_it_counts_the_requests_still_pending_when_one_of_two_is_answered(operator, assistant):
    ws = await connect(operator)
    asked = await ask(operator, f"{SEND}\n{SEND}")
    await opened(ws)

    await respond(operator, asked, 1)

    assert await closed(ws) == {"type": "requests_closed", "ids": [request_id(asked, 1)], "pending": 1}
    await respond(operator, asked, 0)
    assert await closed(ws) == {"type": "requests_closed", "ids": [request_id(asked, 0)], "pending": 0}
    await close_all(ws)


@sync_to_async
def statements_of(step: Any) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        step()
    return [query["sql"] for query in captured.captured_queries]


async def test_nothing_is_read_or_rendered_for_a_tenant_without_an_open_console(operator, assistant, monkeypatch):
    rendered: list[bool] = []
    render = push.render_request
    monkeypatch.setattr(push, "render_request", lambda *a, **kw: rendered.append(True) or render(*a, **kw))
    asked: list[dict[str, Any]] = []
    sent = await statements_of(lambda: asked.append(run_ok(operator, {"message": f"{SEND}\n{SEND}", "sessionId": "s"})))
    sent += await statements_of(lambda: async_to_sync(respond)(operator, asked[0], 1))
    assert not [sql for sql in sent if 'FROM "console_membership"' in sql]  # the members a push goes to: not read
    assert not rendered

    # The first console opened is pushed to from then on, with the count read then.
    ws = await connect(operator)
    await respond(operator, asked[0], 0)
    assert await closed(ws) == {"type": "requests_closed", "ids": [request_id(asked[0], 0)], "pending": 0}
    assert rendered == []  # a closing has no card
    await ask(operator, session="s2")
    assert (await opened(ws))["pending"] == 1
    assert len(rendered) == 2  # the card as an operator and as a reader sees it
    await close_all(ws)


async def test_it_pushes_requests_answered_by_a_run_request_as_closed(operator, assistant):
    ws = await connect(operator)
    asked = await ask(operator)
    await opened(ws)

    await sync_to_async(run_ok)(
        operator, {"sessionId": "s1", "approvals": [{"requestId": request_id(asked), "approved": True}]}
    )

    assert await closed(ws) == {"type": "requests_closed", "ids": [request_id(asked)], "pending": 0}
    await close_all(ws)


async def test_it_pushes_an_expired_request_as_closed(operator, admin):
    await sync_to_async(make_agent)(admin, requestDeadlineSeconds=60)
    ws = await connect(operator)
    asked = await ask(operator)
    await opened(ws)

    await sync_to_async(expire_due)(timezone.now() + timedelta(seconds=61))

    assert await closed(ws) == {"type": "requests_closed", "ids": [request_id(asked)], "pending": 0}
    await assert_nothing_pushed(operator.tenant.pk, ws)
    await close_all(ws)


def escalating(admin: Persona, operator: Persona) -> Persona:
    """lena of leads, otto of sre, and an external agent whose `deploy` is for sre and escalates to leads after 15
    minutes."""
    lena = make_persona("lena", admin.tenant, "operator")
    ApproverGroup.objects.create(tenant=admin.tenant, name="sre").members.add(operator.user)
    ApproverGroup.objects.create(tenant=admin.tenant, name="leads").members.add(lena.user)
    deploy = {"name": "deploy", "approval": "always", "approvers": "sre"}
    deploy["escalation"] = [{"after": "15m", "to": ["leads"]}]
    content = DefinitionContent.model_validate({"name": "releaser", "runtime": "external", "tools": [deploy]})
    Agent.create(admin.tenant, content, admin.user)
    return lena


def open_deploy(persona: Persona) -> PendingRequest:
    opened = persona.api("post", "/api/agents/releaser/requests", {"toolName": "deploy", "arguments": {}})
    assert opened.status_code == 201, opened.content
    return PendingRequest.objects.get(id=opened.json()["requestId"])


async def test_an_escalation_step_pushes_the_card_with_its_forms_to_the_group_it_adds(operator, admin):
    """SPEC section 14: lena of leads watches sre's request without its forms; the step that adds leads shows it to
    her anew, with them, as a new request (its title for a browser notification)."""
    lena = await sync_to_async(escalating)(admin, operator)
    ws = await connect(lena)
    pending = await sync_to_async(open_deploy)(admin)
    rid = str(pending.id)
    watched = await opened(ws)
    assert watched["ids"] == [rid] and APPROVE_BUTTON not in watched["html"]

    await sync_to_async(escalate_due)(pending.opened_at + timedelta(minutes=15))

    assert await closed(ws) == {"type": "requests_closed", "ids": [rid], "pending": 1}  # out first, then anew
    shown = await opened(ws)
    assert (shown["ids"], shown["titles"], shown["pending"]) == ([rid], ["releaser: deploy"], 1)
    assert APPROVE_BUTTON in shown["html"] and "for sre or leads" in shown["html"]
    await assert_nothing_pushed(operator.tenant.pk, ws)
    await close_all(ws)


async def test_it_pushes_the_requests_of_a_cancelled_run_as_closed(operator, reader, assistant):
    sockets = [await connect(p) for p in (operator, reader)]
    asked = await ask(operator)
    for ws in sockets:
        await opened(ws)

    cancelled = await sync_to_async(operator.api)("POST", f"/api/runs/{asked['runId']}/cancel")

    assert cancelled.json()["status"] == "cancelled"
    for ws in sockets:
        assert await closed(ws) == {"type": "requests_closed", "ids": [request_id(asked)], "pending": 0}
    await assert_nothing_pushed(operator.tenant.pk, *sockets)
    await close_all(*sockets)


async def test_it_pushes_the_requests_of_a_deleted_agent_as_closed_to_everyone(operator, reader, admin, assistant):
    sockets = [await connect(p) for p in (operator, reader)]
    first, second = await ask(operator, session="s1"), await ask(operator, session="s2")
    for ws in sockets:
        await opened(ws)
        await opened(ws)

    deleted = await sync_to_async(admin.api)("DELETE", "/api/agents/assistant")

    assert deleted.status_code == 204, deleted.content
    ids = sorted([request_id(first), request_id(second)])
    for ws in sockets:
        pushed = await closed(ws)
        assert (sorted(pushed["ids"]), pushed["pending"]) == (ids, 0)
    await assert_nothing_pushed(operator.tenant.pk, *sockets)  # one push for both requests
    await close_all(*sockets)


async def test_it_closes_the_socket_of_a_removed_member(operator, admin, assistant):
    removed, staying = await connect(operator), await connect(admin)

    await sync_to_async(operator.membership.delete)()

    assert await removed.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
    asked = await ask(admin)
    assert (await opened(staying))["ids"] == [request_id(asked)]
    assert await removed.receive_nothing()
    # The removed member's socket left the tenant's group; only the other console is in it.
    assert len(get_channel_layer().groups[tenant_group(admin.tenant.pk)]) == 1
    await close_all(staying)


async def test_it_closes_the_socket_of_a_deleted_user(operator, admin, assistant):
    ws = await connect(operator)

    await sync_to_async(operator.user.delete)()

    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
    await ask(admin)
    # The socket left the tenant's group when it closed: no push can reach it.
    assert tenant_group(admin.tenant.pk) not in get_channel_layer().groups
    assert await ws.receive_nothing()


async def test_it_sends_the_reader_card_once_a_members_role_drops_to_reader(operator, admin, assistant):
    ws = await connect(operator)
    operator.membership.role = "reader"

    await sync_to_async(operator.membership.save)()
    assert await ws.receive_json_from(timeout=5) == {"type": "heartbeat", "pending": 0}  # the inbox reads again

    await ask(admin)
    pushed = await opened(ws)
    assert "Waiting for an operator to answer." in pushed["html"]
    assert "<form" not in pushed["html"]
    await close_all(ws)


async def test_it_sends_the_operator_card_once_a_reader_is_promoted(reader, operator, assistant):
    ws = await connect(reader)
    reader.membership.role = "operator"

    await sync_to_async(reader.membership.save)()
    assert await ws.receive_json_from(timeout=5) == {"type": "heartbeat", "pending": 0}

    await ask(operator)
    assert APPROVE_BUTTON in (await opened(ws))["html"]
    await close_all(ws)


async def test_joining_or_leaving_an_approver_group_makes_that_members_inbox_read_again(operator, reader):
    """The cards routed to the group change hands: the member's consoles get a heartbeat (the inbox reads its
    list again and swaps the cards whose forms come or go); the other members' consoles get nothing."""
    ws, bystander = await connect(operator), await connect(reader)
    group = await sync_to_async(ApproverGroup.objects.create)(tenant=operator.tenant, name="finance")

    await sync_to_async(group.members.add)(operator.user)
    assert await ws.receive_json_from(timeout=5) == {"type": "heartbeat", "pending": 0}
    await sync_to_async(operator.user.approver_groups.remove)(group)  # from the user's side too
    assert await ws.receive_json_from(timeout=5) == {"type": "heartbeat", "pending": 0}
    await assert_nothing_pushed(operator.tenant.pk, bystander)
    await close_all(ws, bystander)


async def test_it_applies_a_change_made_without_signals_at_the_next_push(operator, admin, assistant):
    ws = await connect(operator)
    # A bulk update and a deactivated user send no membership signal; every push carries the members as
    # they are when it leaves, so the very next one applies the change.

    await sync_to_async(Membership.objects.filter(pk=operator.membership.pk).update)(role="reader")

    await ask(admin)
    assert "<form" not in (await opened(ws))["html"]
    await sync_to_async(User.objects.filter(pk=operator.user.pk).update)(is_active=False)
    await ask(admin, session="s2")
    assert await ws.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
    await close_all(ws)


# SQLite's in-memory test database locks a table another connection is writing, so the console cannot
# read the membership while the change is uncommitted; PostgreSQL can (`make test-postgres`).
@pytest.mark.postgresql
async def test_it_applies_a_role_change_once_it_is_committed(operator, admin, assistant):
    ws = await connect(operator)
    changed, release = threading.Event(), threading.Event()

    def demote_in_a_transaction() -> None:
        try:
            with transaction.atomic():
                membership = Membership.objects.get(pk=operator.membership.pk)
                membership.role = "reader"
                membership.save()
                changed.set()
                assert release.wait(10)
        finally:
            connection.close()

    demoting = asyncio.ensure_future(sync_to_async(demote_in_a_transaction, thread_sensitive=False)())
    assert await asyncio.to_thread(changed.wait, 10)
    # The console handles what it was told so far (the ping is answered after it) while the change is
    # not committed yet: it must not settle on the role it reads then.
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from())["type"] == "heartbeat"
    release.set()
    await demoting
    assert (await ws.receive_json_from(timeout=5))["type"] == "heartbeat"  # committed: the inbox reads again

    await ask(admin)
    pushed = await opened(ws)
    assert "<form" not in pushed["html"]
    await close_all(ws)
