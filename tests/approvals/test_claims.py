"""Claims (SPEC section 11): POST/DELETE /api/requests/{id}/claim and the cards' Claim / Release; a claim is
a signal, not a lock; every refusal a 4xx problem, another tenant's request a 404."""

import pytest

from approvals.models import PendingRequest
from tests.approvals.test_inbox_pages import HTMX, answer, ask, make_agent, request_id
from tests.helpers import snapshot


@pytest.fixture
def asked(operator, admin):
    make_agent(admin)
    return ask(operator)


def test_it_claims_a_request_and_shows_who_in_its_json(operator, asked):
    rid = request_id(asked)

    response = operator.api("post", f"/api/requests/{rid}/claim")

    assert response.status_code == 200, response.content
    assert response.json()["claimedBy"] == "otto"
    again = operator.api("get", f"/api/requests/{rid}").json()
    assert again["claimedBy"] == "otto" and again["claimedAt"] == response.json()["claimedAt"]
    listed = operator.api("get", "/api/requests").json()["items"]
    assert [(r["requestId"], r["claimedBy"]) for r in listed] == [(rid, "otto")]


def test_a_claim_is_a_signal_not_a_lock(operator, admin, asked):
    rid = request_id(asked)
    operator.api("post", f"/api/requests/{rid}/claim")

    answered = admin.api("post", f"/api/runs/{asked['runId']}/responses", {"requestId": rid, "approved": True})

    assert answered.json()["status"] == "accepted"
    claimed_again = operator.api("post", f"/api/requests/{rid}/claim")
    assert claimed_again.status_code == 409 and claimed_again.json()["code"] == "request_closed"
    assert claimed_again["Content-Type"] == "application/problem+json"


def test_another_operator_takes_the_claim_over_but_only_the_claimer_or_an_admin_releases_it(
    operator, admin, acme, asked
):
    from tests.conftest import make_persona

    other = make_persona("olga", acme, "operator")
    rid = request_id(asked)
    operator.api("post", f"/api/requests/{rid}/claim")

    refused = other.api("delete", f"/api/requests/{rid}/claim")
    assert (refused.status_code, refused.json()["code"]) == (409, "claimed_by_another")
    assert PendingRequest.objects.get(id=rid).claimed_by == operator.user

    assert other.api("post", f"/api/requests/{rid}/claim").json()["claimedBy"] == "olga"
    released = admin.api("delete", f"/api/requests/{rid}/claim")
    assert released.status_code == 200 and released.json()["claimedBy"] is None
    assert operator.api("delete", f"/api/requests/{rid}/claim").status_code == 200  # nothing to release


def test_readers_cannot_claim_and_outsiders_do_not_find_the_request(reader, outsider, asked):
    rid = request_id(asked)
    before = snapshot()

    by_reader = reader.api("post", f"/api/requests/{rid}/claim")
    by_outsider = outsider.api("post", f"/api/requests/{rid}/claim")
    released_by_outsider = outsider.api("delete", f"/api/requests/{rid}/claim")

    assert by_reader.status_code == 403
    assert (by_outsider.status_code, by_outsider.json()["code"]) == (404, "request_not_found")
    assert released_by_outsider.status_code == 404
    assert snapshot() == before


def test_the_card_claims_and_releases(operator, asked):
    rid = request_id(asked)
    page = operator.client.get("/inbox/").content.decode()
    assert 'data-claim-button\n            value="claim">Claim</button>' in page

    claimed = operator.client.post(f"/inbox/{rid}/claim/", {"action": "claim"}, **HTMX)

    assert claimed.status_code == 204
    page = operator.client.get("/inbox/").content.decode()
    assert "claimed by <strong>otto</strong>" in page and 'value="release">Release</button>' in page
    assert operator.client.post(f"/inbox/{rid}/claim/", {"action": "release"}).status_code == 302
    assert PendingRequest.objects.get(id=rid).claimed_by is None
    bad = operator.client.post(f"/inbox/{rid}/claim/", {"action": "steal"}, **HTMX)
    assert "Choose Claim or Release." in bad.content.decode()


def test_the_card_says_when_the_request_was_answered_before_the_claim(operator, admin, asked):
    rid = request_id(asked)
    answer(admin, rid, {"decision": "approve"})

    response = operator.client.post(f"/inbox/{rid}/claim/", {"action": "claim"}, **HTMX)

    assert "there is nothing to claim" in response.content.decode()
    assert PendingRequest.objects.get(id=rid).claimed_by is None
