"""The inbox's selection across runs (the keyboard's `x`, the selection bar): each selected request is answered
through the same answer path on its own run, each run continuing on its own; the page carries the keys."""

import json

from django.core import mail

from approvals.models import PendingRequest
from tests.approvals.test_inbox_pages import HTMX, ask, continuation, make_agent, request_id
from tests.helpers import answer_said, answer_told, drain_queued, snapshot


def test_it_denies_a_selection_of_two_runs_with_one_reason_each_run_continuing(operator, admin):
    make_agent(admin)
    first, second = ask(operator, session="s1"), ask(operator, session="s2")
    ids = [request_id(first), request_id(second)]

    response = operator.client.post(
        "/inbox/selection/", {"selected": ids, "decision": "deny", "reason": "not today"}, **HTMX
    )

    assert response.status_code == 200
    assert json.loads(response["HX-Trigger"]) == {"airlock:answered": {"ids": ids}}
    drain_queued(2)  # one continuation per run
    assert continuation(first).output == continuation(second).output == "send_email denied: not today"
    assert continuation(first).id != continuation(second).id
    assert mail.outbox == []


def test_it_leaves_another_tenants_request_alone(operator, admin, outsider):
    make_agent(admin)
    make_agent(outsider)
    ours, theirs = ask(operator), ask(outsider)
    before = PendingRequest.objects.get(id=request_id(theirs)).answer

    response = operator.client.post(
        "/inbox/selection/", {"selected": [request_id(ours), request_id(theirs)], "decision": "approve"}, **HTMX
    )

    assert json.loads(response["HX-Trigger"]) == {"airlock:answered": {"ids": [request_id(ours)]}}
    assert "not approval requests of this tenant" in response.content.decode()
    assert PendingRequest.objects.get(id=request_id(theirs)).answer == before is None


def test_it_wants_a_decision_and_an_operator(operator, reader, admin):
    make_agent(admin)
    asked = ask(operator)
    before = snapshot()

    undecided = operator.client.post("/inbox/selection/", {"selected": [request_id(asked)]}, **HTMX)
    by_reader = reader.client.post("/inbox/selection/", {"selected": [request_id(asked)], "decision": "approve"})

    assert "Choose Approve selected or Deny selected." in undecided.content.decode()
    assert by_reader.status_code == 403
    assert snapshot() == before


def test_it_answers_a_selection_without_javascript(operator, admin, answer_window):
    make_agent(admin)
    asked = ask(operator)

    response = operator.client.post("/inbox/selection/", {"selected": [request_id(asked)], "decision": "approve"})

    assert response.status_code == 302
    said = answer_said(answer_window, "Approved 1 selected request.", "Approved send_email")
    assert said in answer_told(operator, answer_window)


def test_the_inbox_offers_the_keys_the_skip_link_and_a_select_box_per_approval(operator, reader, admin):
    make_agent(admin)
    asked = ask(operator)

    page = operator.client.get("/inbox/").content.decode()
    watched = reader.client.get("/inbox/").content.decode()

    assert "Skip to the first request" in page and 'id="inbox-keys"' in page
    assert f'form="selection" name="selected" value="{request_id(asked)}"' in page
    assert 'id="selection"' not in watched and 'name="selected"' not in watched
