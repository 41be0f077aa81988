"""The inbox pages as an operator and a reader see them: the tenant's open requests, filters, answering
from the card forms (with htmx and without JavaScript), batch answers, and every refusal."""

import json
import re
from typing import Any

import pytest
from django.core import mail

from agents.definitions import DefinitionContent
from agents.models import Agent, Run, RunStatus
from approvals.models import PendingRequest, Rule
from approvals.push import render_request
from tests.helpers import (
    answer_said,
    answer_told,
    ask_for_a_day,
    call_line,
    drain_queued,
    run_queued,
    snapshot,
    swapped_out,
)

EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}
SEND = f"call send_email {json.dumps(EMAIL)}"
HTMX = {"HTTP_HX_REQUEST": "true"}


def make_agent(persona, name: str = "mailer", **fields: Any) -> Agent:
    content = {"name": name, "tools": [{"name": "send_email", "approval": "always"}], **fields}
    return Agent.create(persona.tenant, DefinitionContent.model_validate(content), persona.user)


@pytest.fixture
def mailer(admin) -> Agent:
    return make_agent(admin)


def ask(persona, message: str = SEND, session: str = "s1", agent: str = "mailer") -> dict[str, Any]:
    response = persona.api("post", f"/api/agents/{agent}/runs", {"message": message, "sessionId": session})
    assert response.status_code == 200, response.content
    result = response.json()
    assert result["status"] != "completed", result
    return result


def request_id(result: dict[str, Any], index: int = 0) -> str:
    return result["pendingRequests"][index]["requestId"]


def answer(persona, rid: str, data: dict[str, Any], htmx: bool = False):
    return persona.client.post(f"/inbox/{rid}/answer/", data, **(HTMX if htmx else {}))


def answer_always(persona, rid: str, data: dict[str, Any]):
    """Remember "always" as an operator does: the answer shows what the rule covers first, then is confirmed
    (tests/approvals/test_remember_confirm.py)."""
    shown = answer(persona, rid, data, htmx=True).content.decode()
    covers = re.search(r'name="always_covers" value="([^"]+)"', shown)
    assert covers is not None, shown
    return answer(persona, rid, {**data, "always": "confirm", "always_covers": covers[1]})


def card_ids(html: str) -> list[str]:
    return re.findall(r'<article class="request-card[^"]*" id="request-([0-9a-f-]+)"', html)


def continuation(asked: dict[str, Any]) -> Run:
    return Run.objects.get(previous_run_id=asked["runId"])


# --- the list -------------------------------------------------------------------------------------


def test_it_lists_the_tenants_open_requests_oldest_first(operator, mailer, outsider):
    first, second = ask(operator, session="s1"), ask(operator, session="s2")
    make_agent(outsider)
    theirs = ask(outsider)
    answered = ask(operator, session="s3")
    assert answer(operator, request_id(answered), {"decision": "approve"}).status_code == 302

    response = operator.client.get("/inbox/")

    assert response.status_code == 200
    assert card_ids(response.content.decode()) == [request_id(first), request_id(second)]
    assert request_id(theirs) not in response.content.decode()
    assert "<title>(2) Inbox · Airlock</title>" in response.content.decode()


def test_it_pages_the_open_requests_25_at_a_time_oldest_first(operator, mailer):
    # One run asking for 30 approvals at once: 30 open requests in call order.
    asked = ask(operator, message="\n".join([SEND] * 30))
    ids = [r["requestId"] for r in asked["pendingRequests"]]
    assert len(ids) == 30

    first = operator.client.get("/inbox/").content.decode()
    second = operator.client.get("/inbox/?page=2").content.decode()

    assert card_ids(first) == ids[:25]
    assert card_ids(second) == ids[25:]
    assert 'href="?page=2"' in first and 'rel="prev"' not in first
    assert "1–25 of 30" in first
    assert 'href="?page=1"' in second and 'rel="next"' not in second
    assert card_ids(operator.client.get("/inbox/?page=nonsense").content.decode()) == ids[:25]
    assert "No open request on this page." in operator.client.get("/inbox/?page=9").content.decode()


def test_a_backlog_past_the_counted_open_requests_reads_as_more(operator, mailer, monkeypatch):
    """Open requests are counted up to PENDING_COUNTED (1000; 25 here), so the count costs the same however long
    the backlog: past it the badge, the title and the page read "25+", and pushes carry one more than it."""
    from approvals import push

    monkeypatch.setattr(push, "PENDING_COUNTED", 25)
    ask(operator, message="\n".join([SEND] * 25))
    assert "<title>(25) Inbox" in operator.client.get("/inbox/").content.decode()
    assert push.pending_count(operator.tenant.pk) == 25

    ask(operator, message="\n".join([SEND] * 5), session="s2")
    page = operator.client.get("/inbox/").content.decode()
    assert "<title>(25+) Inbox" in page
    assert "1–25 of 25+ ·" in page
    assert re.search(r'id="pending-count" data-live-pending data-pending-counted="25">25\+</span>', page)
    assert push.pending_count(operator.tenant.pk) == 26


def test_a_reconnecting_inbox_refreshes_the_page_it_shows(operator, mailer):
    asked = ask(operator, message="\n".join([SEND] * 30))
    ids = [r["requestId"] for r in asked["pendingRequests"]]

    refreshed = operator.client.get(
        "/inbox/",
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/inbox/?page=2",
        HTTP_X_INBOX_REFRESH="1",
    )

    assert card_ids(refreshed.content.decode()) == ids[25:]


def test_it_says_when_nothing_is_waiting(operator):
    response = operator.client.get("/inbox/")

    assert "Nothing is waiting for an answer." in response.content.decode()
    assert "<title>Inbox · Airlock</title>" in response.content.decode()


def test_it_answers_an_outsider_with_404_and_keeps_the_request_open(operator, mailer, outsider):
    asked = ask(operator)

    assert request_id(asked) not in outsider.client.get("/inbox/").content.decode()
    assert answer(outsider, request_id(asked), {"decision": "approve"}).status_code == 404
    assert outsider.client.post("/inbox/", {"run": asked["runId"], "decision": "approve"}).status_code == 404
    assert PendingRequest.objects.get(id=request_id(asked)).answer is None


def test_it_shows_readers_the_cards_without_answer_forms(operator, reader, mailer):
    asked = ask(operator)
    ask(operator, message=f"{SEND}\n{SEND}", session="s2")  # a run with two approvals: a batch bar for operators

    page = reader.client.get("/inbox/").content.decode()

    assert request_id(asked) in card_ids(page)
    assert "Waiting for an operator to answer." in page
    assert 'class="answer"' not in page
    assert "batch-bar" not in page
    assert ">Approve<" not in page
    assert "batch-bar" in operator.client.get("/inbox/").content.decode()


def test_it_refuses_a_readers_answer_with_403(operator, reader, mailer):
    asked = ask(operator)

    assert answer(reader, request_id(asked), {"decision": "approve"}).status_code == 403
    assert reader.client.post("/inbox/", {"run": asked["runId"], "decision": "approve"}).status_code == 403
    assert PendingRequest.objects.get(id=request_id(asked)).answer is None
    assert mail.outbox == []


def test_it_filters_by_agent_kind_and_tool(operator, admin, mailer):
    mail_request = ask(operator)
    make_agent(admin, "clock", tools=[{"name": "get_time", "approval": "always"}])
    time_request = ask(operator, message="call get_time", session="t1", agent="clock")
    both = [request_id(mail_request), request_id(time_request)]

    def listed(query: str, **headers: str) -> list[str]:
        return card_ids(operator.client.get(f"/inbox/?{query}", **headers).content.decode())

    assert listed("") == both
    assert listed("agent=mailer") == [request_id(mail_request)]
    assert listed("tool=get_time") == [request_id(time_request)]
    assert listed("kind=approval&agent=clock") == [request_id(time_request)]
    assert listed("kind=client_tool") == []
    assert listed("kind=nonsense") == both  # an invalid filter is ignored
    assert "No open request matches these filters." in operator.client.get("/inbox/?kind=input").content.decode()


def test_it_filters_by_every_kind_a_question_and_a_plan_too(operator, admin, mailer):
    mail_request = ask(operator)
    make_agent(admin, "planner", tools=[{"name": "ask_user"}, {"name": "propose_plan"}])
    question = ask(operator, message=call_line("ask_user", {"question": "Which colour?"}), session="q", agent="planner")
    plan = ask(operator, message=call_line("propose_plan", {"steps": ["Read the logs"]}), session="p", agent="planner")

    def listed(query: str) -> list[str]:
        return card_ids(operator.client.get(f"/inbox/?{query}").content.decode())

    assert listed("kind=question") == [request_id(question)]
    assert listed("kind=plan") == [request_id(plan)]
    assert listed("kind=approval") == [request_id(mail_request)]
    assert listed("kind=continuation") == []
    page = operator.client.get("/inbox/").content.decode()
    assert all(f'<option value="{kind}"' in page for kind in ("question", "plan", "continuation"))


def test_it_serves_only_the_list_to_htmx(operator, mailer):
    asked = ask(operator)

    partial = operator.client.get("/inbox/?agent=mailer", **HTMX)

    assert card_ids(partial.content.decode()) == [request_id(asked)]
    assert "<html" not in partial.content.decode()
    assert "HX-Request" in partial["Vary"]


# --- answering an approval ------------------------------------------------------------------------


def test_it_approves_from_the_form_and_the_run_continues(operator, mailer, answer_window):
    asked = ask(operator)

    response = answer(operator, request_id(asked), {"decision": "approve"})

    assert response.status_code == 302
    assert response["Location"] == "/inbox/"
    stored = PendingRequest.objects.get(id=request_id(asked))
    assert stored.answer["approved"] is True
    assert (stored.answered_by, stored.answered_via) == (operator.user, "inbox")
    # The continuation waits in the queue until a worker runs it.
    assert mail.outbox == []
    run = run_queued(continuation(asked).id)
    assert run.status == RunStatus.COMPLETED
    assert run.output == "send_email: sent to a@b.co"
    assert [m.to for m in mail.outbox] == [["a@b.co"]]
    said = answer_said(answer_window, "Approved send_email. The run continues.", "Approved send_email")
    assert said in answer_told(operator, answer_window)
    assert card_ids(operator.client.get("/inbox/").content.decode()) == []


def test_it_swaps_the_card_out_when_htmx_posts_the_answer(operator, mailer, answer_window):
    asked = ask(operator)

    response = answer(operator, request_id(asked), {"decision": "approve"}, htmx=True)

    swapped_out(response, answer_window, "Approved send_email")
    assert run_queued(continuation(asked).id).status == RunStatus.COMPLETED


def test_it_denies_with_a_reason(operator, mailer):
    asked = ask(operator)

    answer(operator, request_id(asked), {"decision": "deny", "reason": "not during the freeze"})

    assert PendingRequest.objects.get(id=request_id(asked)).answer["reason"] == "not during the freeze"
    drain_queued()
    assert continuation(asked).output == "send_email denied: not during the freeze"
    assert mail.outbox == []


def test_it_approves_the_edited_arguments(operator, mailer):
    asked = ask(operator)
    edited = {**EMAIL, "to": "ops@example.com"}

    answer(operator, request_id(asked), {"decision": "approve", "arguments": json.dumps(edited, indent=2)})

    assert PendingRequest.objects.get(id=request_id(asked)).answer["overrideArguments"] == edited
    drain_queued()
    assert [m.to for m in mail.outbox] == [["ops@example.com"]]


@pytest.mark.parametrize(("said", "kept"), [("trial", "trial"), ("", "inbox"), ("api", "inbox")])
def test_it_records_where_the_answer_was_given(operator, mailer, said, kept):
    # The trial page posts its widget here with via=trial; nothing else can claim another place.
    asked = ask(operator)

    answer(operator, request_id(asked), {"decision": "approve", "via": said})

    assert PendingRequest.objects.get(id=request_id(asked)).answered_via == kept


def test_it_refuses_edited_arguments_that_do_not_fit_the_tool(operator, mailer):
    asked = ask(operator)
    before = snapshot()

    response = answer(
        operator, request_id(asked), {"decision": "approve", "arguments": json.dumps({"to": 5})}, htmx=True
    )

    html = response.content.decode()
    assert "The arguments do not fit the parameters of send_email" in html
    assert "to: fits none of the forms it may take" in html
    assert "subject: is required" in html
    assert snapshot() == before
    assert PendingRequest.objects.get(id=request_id(asked)).answer is None


def test_it_sends_no_override_when_the_arguments_are_left_as_they_were(operator, mailer):
    asked = ask(operator)

    answer(operator, request_id(asked), {"decision": "approve", "arguments": json.dumps(EMAIL, indent=4)})

    assert PendingRequest.objects.get(id=request_id(asked)).answer["overrideArguments"] is None


@pytest.mark.parametrize(
    ("edited", "problem"),
    [
        ("{not json", "Not valid JSON: Expecting property name enclosed in double quotes (line 1, column 2)."),
        ("[1, 2]", "Give a JSON object"),
    ],
)
def test_it_shows_the_field_error_of_edited_arguments_and_stores_nothing(operator, mailer, edited, problem):
    asked = ask(operator)

    response = answer(operator, request_id(asked), {"decision": "approve", "arguments": edited}, htmx=True)

    page = response.content.decode()
    assert card_ids(page) == [request_id(asked)]
    assert problem in page
    assert '<details class="edit-args" open>' in page
    assert edited.replace('"', "&quot;") in page  # the typed text is kept for correcting
    assert PendingRequest.objects.get(id=request_id(asked)).answer is None


def test_it_remembers_the_rule_and_the_next_identical_call_does_not_ask(operator, mailer):
    asked = ask(operator)

    answer_always(operator, request_id(asked), {"decision": "approve", "remember": "always"})

    rule = Rule.objects.get()
    assert (rule.agent, rule.tool_name, rule.arguments_hash) == (mailer, "send_email", "")
    assert rule.created_by == operator.user
    drain_queued()  # the continuation runs first: one turn at a time per session
    again = operator.api("post", "/api/agents/mailer/runs", {"message": SEND, "sessionId": "s1"}).json()
    assert again["status"] == "completed"
    assert again["output"] == "send_email: sent to a@b.co"
    assert card_ids(operator.client.get("/inbox/").content.decode()) == []


def test_it_remembers_only_the_exact_arguments_when_asked(operator, mailer):
    asked = ask(operator)

    answer_always(
        operator, request_id(asked), {"decision": "approve", "remember": "always", "remember_arguments_only": "1"}
    )

    assert Rule.objects.get().arguments_hash
    other = ask(operator, message=SEND.replace("a@b.co", "x@y.co"), session="s2")
    assert other["status"] == "awaiting_approval"


@pytest.mark.parametrize("htmx", [True, False])
def test_it_refuses_to_remember_a_denial_and_stores_nothing(operator, mailer, htmx):
    asked = ask(operator)

    response = answer(operator, request_id(asked), {"decision": "deny", "remember": "always"}, htmx=htmx)

    page = (operator.client.get("/inbox/") if not htmx else response).content.decode()
    assert "applies to approvals only, not to a denial" in page
    assert card_ids(page) == [request_id(asked)]
    assert 'class="answer"' in page  # still answerable
    assert PendingRequest.objects.get(id=request_id(asked)).answer is None
    assert not Rule.objects.exists()
    assert not Run.objects.filter(previous_run_id=asked["runId"]).exists()


def test_it_offers_no_remember_for_a_tool_that_asks_every_time(operator, admin):
    make_agent(admin, tools=[{"name": "send_email", "approval": "every_time"}])
    asked = ask(operator)

    page = operator.client.get("/inbox/").content.decode()

    assert request_id(asked) in card_ids(page)
    assert "Don&#x27;t ask again" not in page and "Don't ask again" not in page


def test_it_says_the_second_answer_changed_nothing(operator, admin, mailer):
    asked = ask(operator)
    answer(operator, request_id(asked), {"decision": "approve"})
    drain_queued()

    late = answer(admin, request_id(asked), {"decision": "deny", "reason": "too late"}, htmx=True)

    page = late.content.decode()
    assert "answered before; this answer changed nothing" in page
    assert "data-dismiss" in page and 'class="answer"' not in page
    assert PendingRequest.objects.get(id=request_id(asked)).answer["approved"] is True
    assert len(mail.outbox) == 1
    answer(admin, request_id(asked), {"decision": "approve"})
    assert "answered before" in admin.client.get("/inbox/").content.decode()
    drain_queued(0)


# --- batch answers --------------------------------------------------------------------------------


def test_it_denies_all_of_a_runs_approvals_with_one_reason(operator, mailer):
    asked = ask(operator, message=f"{SEND}\n{SEND.replace('a@b.co', 'x@y.co')}")
    ids = [request_id(asked, 0), request_id(asked, 1)]
    page = operator.client.get("/inbox/").content.decode()
    assert page.count('name="request" value=') == 2

    response = operator.client.post(
        "/inbox/", {"run": asked["runId"], "request": ids, "decision": "deny", "reason": "no mail today"}, **HTMX
    )

    assert response.status_code == 200
    assert json.loads(response["HX-Trigger"]) == {"airlock:answered": {"ids": ids}}
    drain_queued()
    assert continuation(asked).output == "send_email denied: no mail today\nsend_email denied: no mail today"
    assert mail.outbox == []


def test_it_approves_all_without_javascript(operator, mailer, answer_window):
    asked = ask(operator, message=f"{SEND}\n{SEND}")
    ids = [request_id(asked, 0), request_id(asked, 1)]

    response = operator.client.post("/inbox/", {"run": asked["runId"], "request": ids, "decision": "approve"})

    assert response.status_code == 302
    assert continuation(asked).status == RunStatus.QUEUED
    assert mail.outbox == []
    drain_queued()
    assert continuation(asked).status == RunStatus.COMPLETED
    assert len(mail.outbox) == 2
    said = answer_said(answer_window, "Approved 2 requests of the run.", "Approved 2 requests")
    assert said in answer_told(operator, answer_window)


# --- client tools and input requests ---------------------------------------------------------


def test_it_sends_a_client_tools_result(operator, admin):
    location = {"name": "get_user_location", "parameters": {"type": "object", "properties": {"precision": {}}}}
    make_agent(admin, "locator", tools=[], clientTools=[location])
    asked = ask(operator, message="call get_user_location", agent="locator")

    page = operator.client.get("/inbox/").content.decode()
    assert "Send result" in page and "Parameters: <code>precision</code>" in page
    answer(operator, request_id(asked), {"decision": "result", "result": '{"city": "Lisbon"}'})

    assert PendingRequest.objects.get(id=request_id(asked)).answer["result"] == {"city": "Lisbon"}
    drain_queued()
    assert continuation(asked).status == RunStatus.COMPLETED


def test_it_wants_a_result_or_an_error_message(operator, admin):
    make_agent(admin, "locator", tools=[], clientTools=[{"name": "get_user_location"}])
    asked = ask(operator, message="call get_user_location", agent="locator")

    response = answer(operator, request_id(asked), {"decision": "error", "error_message": " "}, htmx=True)

    assert "Write the error message." in response.content.decode()
    assert PendingRequest.objects.get(id=request_id(asked)).answer is None


def test_it_generates_the_input_form_from_the_requested_schema(operator, mailer):
    schema = {
        "type": "object",
        "properties": {
            "day": {"type": "string", "title": "Day"},
            "people": {"type": "integer"},
            "remote": {"type": "boolean"},
            "room": {"enum": ["Blue", "Red"]},
        },
        "required": ["day"],
    }
    day = ask_for_a_day(ask(operator), schema)

    page = operator.client.get("/inbox/").content.decode()

    assert "Which day should I book?" in page
    assert f'id="f-{day.id}-day" name="field-day" type="text"' in page
    assert 'name="field-people" type="number" step="1"' in page
    assert 'type="checkbox" name="field-remote"' in page
    assert '<option value="Red">' in page
    assert re.search(r'data-field="day" data-input="text" data-required>\s*<label[^>]*>Day <span class="req"', page)
    for action in ("Accept", "Decline", "Cancel"):
        assert f'value="{action.lower()}"' in page


def test_it_shows_the_servers_message_for_content_that_does_not_fit_the_schema(operator, mailer):
    day = ask_for_a_day(ask(operator))

    response = answer(operator, str(day.id), {"action": "accept", "field-day": ""}, htmx=True)

    page = response.content.decode()
    assert "does not fit the requested schema: Day is required." in page
    day.refresh_from_db()
    assert day.answer is None


def test_it_shows_field_errors_for_values_of_the_wrong_type(operator, mailer):
    schema = {"type": "object", "properties": {"people": {"type": "integer"}, "day": {"type": "string"}}}
    day = ask_for_a_day(ask(operator), schema)
    posted = {"action": "accept", "field-people": "many", "field-day": "Monday"}

    response = answer(operator, str(day.id), posted, htmx=True)

    page = response.content.decode()
    assert re.search(r'data-error-for="people">Give a whole number.<', page)
    assert 'value="Monday"' in page  # what was typed stays
    day.refresh_from_db()
    assert day.answer is None


def test_it_stores_an_accepted_input_answer(operator, mailer, answer_window):
    asked = ask(operator)
    day = ask_for_a_day(asked)

    response = answer(operator, str(day.id), {"action": "accept", "field-day": "Monday"}, htmx=True)

    swapped_out(response, answer_window, "Answered book_meeting")
    day.refresh_from_db()
    assert day.answer == {"requestId": str(day.id), "action": "accept", "content": {"day": "Monday"}}
    # The approval of the same session is still open: no continuation yet.
    assert not Run.objects.filter(previous_run_id=asked["runId"]).exists()


# --- the pushed fragment ----------------------------------------------------------------------


def test_the_pushed_card_is_the_inbox_card(operator, reader, mailer):
    asked = ask(operator)
    pending = PendingRequest.objects.get(id=request_id(asked))

    pushed = render_request(pending, can_answer=True)

    assert card_ids(pushed) == [request_id(asked)]
    assert f'hx-post="/inbox/{pending.id}/answer/"' in pushed
    assert "csrfmiddlewaretoken" not in pushed  # htmx sends the page's token in a header
    assert 'class="answer"' not in render_request(pending, can_answer=False)


def test_it_answers_the_rest_of_a_batch_and_says_which_was_answered_before(operator, admin, mailer):
    asked = ask(operator, message=f"{SEND}\n{SEND}")
    ids = [request_id(asked, 0), request_id(asked, 1)]
    answer(admin, ids[0], {"decision": "deny", "reason": "first"})

    response = operator.client.post("/inbox/", {"run": asked["runId"], "request": ids, "decision": "approve"}, **HTMX)

    assert json.loads(response["HX-Trigger"]) == {"airlock:answered": {"ids": [ids[1]]}}
    assert "send_email: The request was answered before" in response.content.decode()
    drain_queued()
    assert continuation(asked).output == "send_email denied: first\nsend_email: sent to a@b.co"


def test_it_wants_a_decision_for_a_batch(operator, mailer):
    asked = ask(operator, message=f"{SEND}\n{SEND}")

    response = operator.client.post("/inbox/", {"run": asked["runId"], "request": [request_id(asked, 0)]}, **HTMX)

    assert "Choose Approve all or Deny all." in response.content.decode()
    assert PendingRequest.objects.filter(answer__isnull=False).count() == 0


def test_an_operator_cancels_a_cards_run_from_the_inbox(operator, mailer):
    asked = ask(operator)
    rid = asked["pendingRequests"][0]["requestId"]
    page = operator.client.get("/inbox/").content.decode()
    assert f'hx-post="/inbox/{rid}/cancel-run/"' in page and "hx-confirm=" in page

    response = operator.client.post(f"/inbox/{rid}/cancel-run/", **HTMX)

    assert (response.status_code, response.content) == (200, b"")
    assert Run.objects.get(id=asked["runId"]).status == RunStatus.CANCELLED
    assert PendingRequest.objects.get(id=rid).closed_by == operator.user
    assert card_ids(operator.client.get("/inbox/").content.decode()) == []


def test_it_says_so_when_the_cards_run_waits_on_nothing_any_more(operator, mailer):
    asked = ask(operator)
    rid = asked["pendingRequests"][0]["requestId"]
    assert answer(operator, rid, {"decision": "deny", "reason": "no"}).status_code == 302
    before = snapshot()

    card = operator.client.post(f"/inbox/{rid}/cancel-run/", **HTMX).content.decode()
    redirected = operator.client.post(f"/inbox/{rid}/cancel-run/", follow=True).content.decode()

    assert "nothing to cancel" in card and "data-dismiss" in card
    assert "nothing to cancel" in redirected
    assert snapshot() == before


def test_it_lets_no_reader_or_outsider_cancel_a_cards_run(operator, reader, outsider, mailer):
    asked = ask(operator)
    rid = asked["pendingRequests"][0]["requestId"]
    before = snapshot()

    assert reader.client.post(f"/inbox/{rid}/cancel-run/").status_code == 403
    assert outsider.client.post(f"/inbox/{rid}/cancel-run/").status_code == 404
    assert "cancel-run" not in reader.client.get("/inbox/").content.decode()

    assert snapshot() == before
