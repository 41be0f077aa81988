"""The inbox's saved views (SPEC section 11): "for me", "claimed by me", one per group, "recently answered by
me"; each a query string, scoped to the caller's tenant; a reader sees them without answer forms."""

import pytest

from approvals.models import PendingRequest
from tests.approvals.test_inbox_pages import HTMX, answer, card_ids
from tests.approvals.test_routing import SEND, ask, finance, routed  # noqa: F401 - fixtures
from tests.conftest import make_persona
from tests.helpers import make_agent


@pytest.fixture
def mixed(routed, finance, admin, operator):  # noqa: F811
    """Three open requests of acme: one for finance, one for anyone, one claimed by ada; ids in that order."""
    routed_id = ask(admin, SEND, "s1")["pendingRequests"][0]["requestId"]
    anyone = ask(admin, 'call ask_user {"question": "Which day?"}', "s2")["pendingRequests"][0]["requestId"]
    claimed = ask(admin, 'call ask_user {"question": "Which room?"}', "s3")["pendingRequests"][0]["requestId"]
    assert admin.api("post", f"/api/requests/{claimed}/claim").status_code == 200
    return routed_id, anyone, claimed


def listed(persona, query: str) -> list[str]:
    response = persona.client.get(f"/inbox/?{query}")
    assert response.status_code == 200
    return card_ids(response.content.decode())


def test_for_me_lists_what_the_caller_may_answer(mixed, admin, operator, reader, acme):
    routed_id, anyone, claimed = mixed
    outsider_of_finance = make_persona("sam", acme, "operator")

    assert listed(operator, "view=mine") == [routed_id, anyone, claimed]  # otto is in finance
    assert listed(outsider_of_finance, "view=mine") == [anyone, claimed]
    assert listed(admin, "view=mine") == [routed_id, anyone, claimed]
    assert listed(reader, "view=mine") == []  # a reader answers nothing
    assert listed(reader, "") == [routed_id, anyone, claimed]


def test_claimed_by_me_and_a_groups_view(mixed, admin, operator):
    routed_id, _, claimed = mixed

    assert listed(admin, "view=claimed") == [claimed]
    assert listed(operator, "view=claimed") == []
    assert listed(operator, "group=finance") == [routed_id]
    page = operator.client.get("/inbox/?group=finance").content.decode()
    assert 'href="?group=finance" aria-current="page">For finance</a>' in page
    assert listed(operator, "group=nosuch") == listed(operator, "")  # an unknown group is ignored


def test_recently_answered_by_me_lists_the_callers_answers_newest_first(mixed, admin, operator):
    routed_id, anyone, _ = mixed
    assert answer(operator, routed_id, {"decision": "approve"}, htmx=True).status_code == 200
    assert answer(operator, anyone, {"text": "Monday", "decision": "answer"}, htmx=True).status_code == 200

    assert listed(operator, "view=answered") == [anyone, routed_id]
    assert listed(admin, "view=answered") == []
    page = operator.client.get("/inbox/?view=answered", **HTMX).content.decode()
    assert "Receipt" in page and 'name="decision"' not in page and "data-dismiss" not in page
    old = PendingRequest.objects.get(pk=routed_id)
    old.answered_at = old.answered_at.replace(year=2000)
    old.save(update_fields=["answered_at"])
    assert listed(operator, "view=answered") == [anyone]


def test_another_tenants_requests_never_appear_in_any_view(mixed, outsider):
    make_agent(outsider, tools=[{"name": "send_email", "approval": "always"}])
    theirs = ask(outsider, SEND, "x1")["pendingRequests"][0]["requestId"]
    assert answer(outsider, theirs, {"decision": "approve"}).status_code == 302

    for query in ("", "view=mine", "view=claimed", "view=answered", "group=finance", "kind=approval"):
        assert set(listed(outsider, query)) <= {theirs}
    assert listed(outsider, "view=answered") == [theirs]
    assert listed(outsider, "") == []


def test_a_reader_sees_the_views_but_no_answer_forms(mixed, reader):
    page = reader.client.get("/inbox/?group=finance").content.decode()

    assert len(card_ids(page)) == 1
    assert 'name="decision"' not in page and "For finance" in page
