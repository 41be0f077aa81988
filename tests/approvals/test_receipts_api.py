"""The receipts API (SPEC section 13): the list with filters and a cursor, a request's receipt, the export."""

import io
import json

import pytest

from approvals.receipts import Receipt
from approvals.signing import sign_heads, signing_key, verify_file
from tests.approvals.test_respond_api import approve, ask, request_id
from tests.helpers import assert_problem, make_agent, snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def receipt_key(settings, tmp_path):
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "receipt-signing.key")
    settings.RECEIPT_HEADS_FILE = str(tmp_path / "receipt-heads.jsonl")


@pytest.fixture
def history(operator, admin) -> list[dict]:
    """Seven decisions: five approvals, two denials, each in a session of its own."""
    make_agent(admin)
    asked = []
    for n in range(7):
        run = ask(operator, session=f"h{n}")
        approve(operator, run) if n < 5 else approve(operator, run, approved=False, reason="no")
        asked.append(run)
    return asked


def test_it_lists_newest_first_filters_and_pages_with_a_cursor(history, reader):
    listed = reader.api("GET", "/api/receipts?limit=3").json()
    assert [r["sequence"] for r in listed["items"]] == [7, 6, 5]
    rest = reader.api("GET", f"/api/receipts?limit=3&cursor={listed['nextCursor']}").json()
    assert [r["sequence"] for r in rest["items"]] == [4, 3, 2]
    last = reader.api("GET", f"/api/receipts?limit=3&cursor={rest['nextCursor']}").json()
    assert [r["sequence"] for r in last["items"]] == [1] and last["nextCursor"] is None

    denied = reader.api("GET", "/api/receipts?result=denied-interactively-by-user").json()["items"]
    assert [r["requestId"] for r in denied] == [request_id(history[6]), request_id(history[5])]
    assert reader.api("GET", "/api/receipts?agent=nobody").json()["items"] == []
    assert len(reader.api("GET", "/api/receipts?tool=send_email&from=2000-01-01&to=2999-12-31").json()["items"]) == 7
    assert reader.api("GET", "/api/receipts?to=2000-01-01").json()["items"] == []
    # The calendar's last day: its day after was an overflow (500).
    assert len(reader.api("GET", "/api/receipts?to=9999-12-31").json()["items"]) == 7
    assert len(reader.client.get("/receipts/?date_to=9999-12-31").context["receipts"]) == 7


def test_it_refuses_bad_cursors_and_dates_and_changes_nothing(history, reader):
    before = snapshot()
    for query in (
        "cursor=%%%",
        "cursor=eA",
        "cursor=cjEyYQ",
        "from=yesterday",
        "to=2026-13-40",
        "to=9999-12-31T23:59:59-12:00",  # the year 10000 in UTC
        "limit=0",
        "limit=501",
    ):
        response = reader.api("GET", f"/api/receipts?{query}")
        assert response.status_code == 400, (query, response.content)
        assert response["Content-Type"] == "application/problem+json"
    assert snapshot() == before


def test_a_requests_receipt_its_decision_and_another_tenants(history, operator, outsider):
    rid = request_id(history[0])
    receipt = operator.api("GET", f"/api/requests/{rid}/receipt").json()
    assert receipt["requestId"] == rid and receipt["result"] == "approved"
    assert operator.api("GET", f"/api/requests/{rid}").json()["decision"]["receiptId"] == receipt["receiptId"]
    listed = operator.api("GET", "/api/requests?status=answered").json()["items"]
    by_request = {str(r.request_id): str(r.id) for r in Receipt.objects.all()}
    assert len(listed) == 7 and {r["requestId"]: r["decision"]["receiptId"] for r in listed} == by_request
    assert_problem(outsider.api("GET", f"/api/requests/{rid}/receipt"), 404, "request_not_found")
    waiting = ask(operator, session="open")
    assert_problem(operator.api("GET", f"/api/requests/{request_id(waiting)}/receipt"), 404, "receipt_not_found")


def test_the_unfiltered_export_verifies_and_a_filtered_one_holds_only_its_receipts(history, reader):
    sign_heads()
    exported = reader.api("GET", "/api/receipts/export")
    assert exported.status_code == 200 and exported["Content-Type"] == "application/x-ndjson"
    assert "attachment" in exported["Content-Disposition"]
    text = b"".join(exported.streaming_content).decode()
    verified = verify_file(io.StringIO(text), signing_key().public_key())
    assert verified.broken is None and verified.receipts == 7
    filtered = b"".join(reader.api("GET", "/api/receipts/export?result=approved").streaming_content).decode()
    lines = [json.loads(line) for line in filtered.splitlines()]
    assert "receiptsOf" in lines[0] and "chainHead" in lines[1]
    assert [line["sequence"] for line in lines[2:]] == [1, 2, 3, 4, 5]


def test_another_tenant_sees_none_of_them(history, outsider):
    assert outsider.api("GET", "/api/receipts").json()["items"] == []
    text = b"".join(outsider.api("GET", "/api/receipts/export").streaming_content).decode()
    assert len(text.splitlines()) == 1
