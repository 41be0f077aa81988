"""Undo (issue 31): an answer given in the console is held for its window (a HeldAnswer row), applied through
the one answer action when the window closes (a timer, or the sweep after a crash), dropped with its reason
when the request closed meanwhile, and taken back by its Undo: the request stays pending, the audit says so."""

import json
import uuid
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from agents.models import Run
from approvals.actions import apply_due, expire_due
from approvals.models import HeldAnswer, HeldState, PendingRequest
from tests.approvals.test_inbox_pages import HTMX, answer, ask, card_ids, continuation, make_agent, request_id
from tests.helpers import run_queued, snapshot

LATER = timedelta(seconds=6)


@pytest.fixture(autouse=True)
def window(settings):
    settings.ANSWER_UNDO_SECONDS = 5


def held_batch(rid: str) -> str:
    return str(HeldAnswer.objects.get(request_id=rid).batch)


def undo(persona, batch: str, htmx: bool = True):
    return persona.client.post(f"/inbox/held/{batch}/undo/", {"next": "/inbox/"}, **(HTMX if htmx else {}))


def test_it_holds_an_answer_until_its_window_closes_then_applies_it(operator, admin):
    make_agent(admin)
    asked = ask(operator)
    rid = request_id(asked)

    response = answer(operator, rid, {"decision": "approve"}, htmx=True)

    body = response.content.decode()
    assert response.status_code == 200
    assert 'hx-swap-oob="beforeend:#notices"' in body and "Approved send_email" in body and ">Undo</button>" in body
    assert PendingRequest.objects.get(id=rid).answer is None
    assert not Run.objects.filter(previous_run_id=asked["runId"]).exists()
    # Out of every inbox while held, as an answered one is; the one who answered sees its notice on any page.
    assert rid not in card_ids(operator.client.get("/inbox/").content.decode())
    assert rid not in card_ids(admin.client.get("/inbox/").content.decode())
    assert "Approved send_email" in operator.client.get("/runs/").content.decode()
    assert "Approved send_email" not in admin.client.get("/runs/").content.decode()

    assert apply_due(timezone.now()) == []  # the window is still open
    [applied] = apply_due(timezone.now() + LATER)

    assert applied.state == HeldState.APPLIED
    stored = PendingRequest.objects.get(id=rid)
    assert (stored.answer["approved"], stored.answered_by, stored.answered_via) == (True, operator.user, "inbox")
    assert mail.outbox == []
    assert run_queued(continuation(asked).id).output == "send_email: sent to a@b.co"
    settled = operator.client.get(f"/inbox/held/{applied.batch}/", **HTMX).content.decode()
    assert "Approved send_email." in settled and "Undo" not in settled


def test_undo_leaves_the_request_pending_and_the_audit_says_it_was_undone(operator, admin):
    make_agent(admin)
    asked = ask(operator)
    rid = request_id(asked)
    answer(operator, rid, {"decision": "deny", "reason": "no"}, htmx=True)
    batch = held_batch(rid)

    response = undo(operator, batch)

    assert "Undone: send_email is pending again." in response.content.decode()
    assert apply_due(timezone.now() + LATER) == []
    stored = PendingRequest.objects.get(id=rid)
    assert (stored.status, stored.answer) == ("pending", None)
    assert not Run.objects.filter(previous_run_id=asked["runId"]).exists()
    assert rid in card_ids(admin.client.get("/inbox/").content.decode())
    audit = admin.client.get("/audit/?decision=undone").content.decode()
    assert "Denied and undone before it applied; nothing ran and the request stayed pending." in audit
    assert "Undo" not in operator.client.get("/runs/").content.decode()  # no notice left
    assert "It was undone already." in undo(operator, batch).content.decode()


def test_a_bulk_answer_is_one_notice_and_one_undo(operator, admin):
    make_agent(admin)
    first, second = ask(operator, session="s1"), ask(operator, session="s2")
    ids = [request_id(first), request_id(second)]

    response = operator.client.post("/inbox/selection/", {"selected": ids, "decision": "approve"}, **HTMX)

    assert json.loads(response["HX-Trigger"]) == {"airlock:answered": {"ids": ids}}
    assert "Approved 2 requests" in response.content.decode()
    [batch] = {held_batch(rid) for rid in ids}
    assert "2 requests are pending again." in undo(operator, batch).content.decode()
    assert apply_due(timezone.now() + LATER) == []
    assert [p.answer for p in PendingRequest.objects.filter(id__in=ids)] == [None, None]
    audit = admin.client.get("/audit/?decision=undone").content.decode()
    assert audit.count("Approved and undone before it applied") == 2


def test_a_runs_batch_bar_answer_is_held_and_applied(operator, admin):
    make_agent(admin)
    asked = ask(operator, f"call send_email {json.dumps({'to': 'a@b.co', 'subject': 's', 'body': 'b'})}\n" * 2)
    ids = [request_id(asked, 0), request_id(asked, 1)]

    response = operator.client.post(
        "/inbox/", {"run": asked["runId"], "request": ids, "decision": "deny", "reason": "later"}, **HTMX
    )

    assert "Denied 2 requests" in response.content.decode()
    assert [p.answer for p in PendingRequest.objects.filter(id__in=ids)] == [None, None]
    assert len(apply_due(timezone.now() + LATER)) == 2
    assert run_queued(continuation(asked).id).output == "send_email denied: later\nsend_email denied: later"


def test_a_request_closed_meanwhile_drops_the_held_answer_and_says_why(operator, admin):
    make_agent(admin, requestDeadlineSeconds=2)
    asked = ask(operator)
    rid = request_id(asked)
    answer(operator, rid, {"decision": "approve"}, htmx=True)

    expire_due(timezone.now() + timedelta(seconds=3))
    [dropped] = apply_due(timezone.now() + LATER)

    assert dropped.state == HeldState.DROPPED and "expired" in dropped.outcome
    assert PendingRequest.objects.get(id=rid).status == "expired"
    settled = operator.client.get(f"/inbox/held/{dropped.batch}/", **HTMX).content.decode()
    assert "Approved send_email: not applied." in settled and "expired" in settled


def test_another_answer_meanwhile_wins_and_the_held_one_is_dropped(operator, admin):
    make_agent(admin)
    asked = ask(operator)
    rid = request_id(asked)
    answer(operator, rid, {"decision": "approve"}, htmx=True)

    # The respond API is not held: it applies at once.
    given = admin.api("post", f"/api/runs/{asked['runId']}/responses", {"requestId": rid, "approved": False})
    [dropped] = apply_due(timezone.now() + LATER)

    assert given.json()["status"] == "accepted"
    assert PendingRequest.objects.get(id=rid).answered_by == admin.user
    assert dropped.state == HeldState.DROPPED and dropped.outcome == "ada answered it meanwhile."


def test_a_held_answer_survives_a_crash_and_the_sweep_applies_it(operator, admin):
    make_agent(admin)
    asked = ask(operator)
    rid = request_id(asked)
    answer(operator, rid, {"decision": "approve"})  # no timer runs here: the process "went" with it
    # One whose apply began and stopped with its process is tried again a minute on.
    stalled = HeldAnswer.objects.get(request_id=rid)
    HeldAnswer.objects.filter(pk=stalled.pk).update(state=HeldState.APPLYING, due_at=timezone.now())
    assert apply_due(timezone.now() + LATER) == []

    [applied] = apply_due(timezone.now() + timedelta(minutes=2))

    assert applied.state == HeldState.APPLIED
    assert PendingRequest.objects.get(id=rid).answer["approved"] is True
    assert run_queued(continuation(asked).id).output == "send_email: sent to a@b.co"


def test_only_the_one_who_answered_may_undo_and_nobody_outside_the_tenant_sees_it(operator, admin, reader, outsider):
    make_agent(admin)
    rid = request_id(ask(operator))
    answer(operator, rid, {"decision": "approve"}, htmx=True)
    batch = held_batch(rid)
    before = snapshot(), list(HeldAnswer.objects.values())

    by_admin = undo(admin, batch)
    by_reader = undo(reader, batch)
    by_outsider = undo(outsider, batch)

    assert "Only otto, who gave this answer, can undo it." in by_admin.content.decode()
    assert (by_reader.status_code, by_outsider.status_code) == (403, 404)
    assert outsider.client.get(f"/inbox/held/{batch}/").status_code == 404
    assert admin.client.get(f"/inbox/held/{batch}/").status_code == 404
    assert undo(operator, str(uuid.uuid4())).status_code == 404
    assert (snapshot(), list(HeldAnswer.objects.values())) == before


def test_undo_works_without_javascript(operator, admin):
    make_agent(admin)
    rid = request_id(ask(operator))

    response = answer(operator, rid, {"decision": "approve"})

    assert response.status_code == 302
    page = operator.client.get("/inbox/").content.decode()
    batch = held_batch(rid)
    assert f'action="/inbox/held/{batch}/undo/"' in page and "Approved send_email" in page
    undone = undo(operator, batch, htmx=False)
    assert undone.status_code == 302
    page = operator.client.get("/inbox/").content.decode()
    assert "Undone: send_email is pending again." in page and rid in card_ids(page)
    assert "Too late" not in page


def test_a_refused_answer_is_refused_now_not_held(operator, admin):
    make_agent(admin)
    rid = request_id(ask(operator))

    response = answer(operator, rid, {"decision": "deny", "remember": "always"}, htmx=True)

    assert HeldAnswer.objects.count() == 0
    assert "remember" in response.content.decode().lower()
