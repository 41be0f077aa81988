"""Routed requests over the real websocket: the group's members and admins get the card with its forms, an
operator outside the group gets it read-only ("for finance"); a claim reaches every open inbox."""

import pytest
from asgiref.sync import sync_to_async

from tests.approvals.test_push import APPROVE_BUTTON, ask, close_all, connect, opened, request_id
from tests.approvals.test_routing import ROUTED_TOOLS, create_group
from tests.conftest import make_persona
from tests.helpers import make_agent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("empty_channel_layer", "close_worker_thread_connections"),
]


@pytest.fixture
def routed(admin, operator, acme):
    create_group("finance", "--tenant", "acme", "--member", "otto")
    return make_agent(admin, tools=ROUTED_TOOLS)


async def test_it_pushes_a_routed_card_with_forms_to_members_and_admins_only(operator, admin, acme, routed):
    stranger = await sync_to_async(make_persona)("sam", acme, "operator")
    member, boss, other = await connect(operator), await connect(admin), await connect(stranger)

    asked = await ask(operator)

    for ws in (member, boss):
        pushed = await opened(ws)
        assert pushed["ids"] == [request_id(asked)] and APPROVE_BUTTON in pushed["html"]
    theirs = await opened(other)
    assert theirs["ids"] == [request_id(asked)]
    assert "<form" not in theirs["html"] and "For <strong>finance</strong>" in theirs["html"]
    await close_all(member, boss, other)


async def test_it_pushes_a_claim_to_every_open_inbox(operator, reader, routed):
    member, watcher = await connect(operator), await connect(reader)
    asked = await ask(operator)
    await opened(member)
    await opened(watcher)

    response = await sync_to_async(operator.api)("POST", f"/api/requests/{request_id(asked)}/claim")

    assert response.status_code == 200
    for ws in (member, watcher):
        pushed = await ws.receive_json_from(timeout=5)
        assert (pushed["type"], pushed["id"], pushed["claimedBy"]) == ("request_claimed", request_id(asked), "otto")
        assert pushed["claimedAt"] == response.json()["claimedAt"]
    await close_all(member, watcher)
