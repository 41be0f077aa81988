"""Who answered, how they signed in and their words reach the receipt by every way of answering (issue 50 item 1),
the console's held answers included: they apply later, in a timer or a sweep, outside the request that gave them,
where a receipt once said `authMethod: "cli"` and `reason: null`."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Event
from approvals.actions import apply_due
from approvals.models import Receipt
from tests.approvals.test_audit import exported_csv, exported_json
from tests.approvals.test_inbox_pages import HTMX, answer, ask, mailer, request_id  # noqa: F401
from tests.helpers import run_queued

LATER = timedelta(seconds=6)
# The inbox tests' agent with send_email always asked about.
pytestmark = pytest.mark.usefixtures("mailer")


@pytest.fixture(autouse=True)
def window(settings):
    """The production default: console answers are held before they apply."""
    settings.ANSWER_UNDO_SECONDS = 5


def receipt_of(rid: str) -> dict:
    return Receipt.objects.get(request_id=rid).wire()


def test_a_held_card_answer_keeps_the_session_sign_in_and_the_reason(operator):
    rid = request_id(ask(operator))

    answer(operator, rid, {"decision": "deny", "reason": "not on a Friday"}, htmx=True)
    assert not Receipt.objects.filter(request_id=rid).exists()  # held: nothing decided yet
    [applied] = apply_due(timezone.now() + LATER)  # the sweep, as after a restart: no request around it

    receipt = receipt_of(rid)
    assert applied.auth_method == "session"
    assert (receipt["answeredBy"], receipt["authMethod"], receipt["reason"]) == (
        operator.user.username,
        "session",
        "not on a Friday",
    )
    assert receipt["result"] == "denied-interactively-by-user"
    entry = next(e for e in exported_json(operator) if e["requestId"] == rid)
    assert (entry["authMethod"], entry["reason"]) == ("session", "not on a Friday")
    assert next(row for row in exported_csv(operator) if row["requestId"] == rid)["authMethod"] == "session"


def test_a_held_bulk_answer_keeps_the_session_sign_in(operator):
    rids = [request_id(ask(operator, session=f"s{n}")) for n in range(2)]

    response = operator.client.post("/inbox/selection/", {"selected": rids, "decision": "approve"}, **HTMX)
    assert response.status_code == 200
    assert len(apply_due(timezone.now() + LATER)) == 2

    assert [receipt_of(rid)["authMethod"] for rid in rids] == ["session", "session"]


def test_an_api_answer_keeps_the_token_and_the_reason(operator):
    rid = request_id(ask(operator))

    response = operator.api("post", f"/api/requests/{rid}/responses", {"approved": False, "reason": "too risky"})
    assert response.status_code == 200, response.content
    run_queued(response.json()["continuationRunId"])

    receipt = receipt_of(rid)
    assert receipt["authMethod"].startswith("token:") and receipt["reason"] == "too risky"
    # The continuation's `request.answered` and the audit say it too (SPEC section 13: one record, three views).
    answered = Event.objects.get(type="request.answered", data__requestId=rid).data
    entry = next(e for e in exported_json(operator) if e["requestId"] == rid)
    assert answered["authMethod"] == entry["authMethod"] == receipt["authMethod"]


def test_an_approval_without_words_has_no_reason(operator):
    rid = request_id(ask(operator))

    operator.api("post", f"/api/requests/{rid}/responses", {"approved": True})

    assert receipt_of(rid)["reason"] is None


def test_a_trial_page_answer_keeps_the_session_sign_in_the_reason_and_says_trial(operator):
    """The trial page answers with the card's widget, posted with `via=trial` (static/console/trial.js)."""
    rid = request_id(ask(operator))

    answer(operator, rid, {"decision": "deny", "reason": "wrong recipient", "via": "trial"}, htmx=True)
    apply_due(timezone.now() + LATER)

    receipt = receipt_of(rid)
    assert (receipt["authMethod"], receipt["reason"]) == ("session", "wrong recipient")
    entry = next(e for e in exported_json(operator) if e["requestId"] == rid)
    assert (entry["who"], entry["via"], entry["reason"]) == (operator.user.username, "trial", "wrong recipient")
