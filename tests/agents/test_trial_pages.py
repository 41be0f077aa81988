"""The trial page's turn fragment (`/trial/turns/<id>/`, swapped in after each streamed turn): an
operator gets the turn with its answer widgets; a reader is refused, another tenant's member finds nothing.
The widgets are the inbox card's, posted to the inbox's answer view: without JavaScript the answer comes back
to the trial page, and an earlier turn's widget forks the session."""

import json
import re
import uuid

import pytest

from agents.models import Checkpoint, Session
from agents.starter_policy import starter_hooks
from approvals.models import ApproverGroup, PendingRequest
from tests.helpers import EMAIL, ask_for_a_day, ask_to_send, drain_queued, make_agent, swapped_out


@pytest.fixture
def asked(operator, assistant) -> dict:
    """A turn of acme's assistant waiting for approval of an email to ada@example.com."""
    return ask_to_send(operator, "trial-1")


def turn_page(client, run_id) -> tuple[int, str]:
    response = client.get(f"/trial/turns/{run_id}/")
    return response.status_code, response.content.decode()


def test_it_serves_an_operator_the_turn_with_its_answer_form(operator, asked):
    status, html = turn_page(operator.client, asked["runId"])

    assert status == 200
    assert f'id="turn-{asked["runId"]}"' in html
    assert f'data-request-id="{asked["pendingRequests"][0]["requestId"]}"' in html
    assert "Approve <code>send_email</code>?</h2>" in html
    assert EMAIL["to"] in html
    assert "<html" not in html  # the fragment only


def test_it_finds_no_turn_of_another_tenant(outsider, asked):
    make_agent(outsider)  # the outsider has an agent of the same name, and turns of its own
    theirs = ask_to_send(outsider, "trial-1")
    assert turn_page(outsider.client, theirs["runId"])[0] == 200

    status, html = turn_page(outsider.client, asked["runId"])

    assert status == 404
    # The console's 404 page repeats the id the caller sent ("No run … in this tenant."), nothing of the turn.
    assert f'id="turn-{asked["runId"]}"' not in html
    assert EMAIL["to"] not in html


def test_it_refuses_the_turn_to_a_reader(reader, asked):
    status, html = turn_page(reader.client, asked["runId"])

    assert status == 403
    assert asked["runId"] not in html
    assert EMAIL["to"] not in html


def test_it_finds_no_turn_that_does_not_exist(operator, asked):
    assert turn_page(operator.client, uuid.uuid4())[0] == 404


def test_it_sends_a_visitor_to_log_in(client, asked):
    response = client.get(f"/trial/turns/{asked['runId']}/")

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


# --- answering with the inbox's widget --------------------------------------------------------------


def test_the_turn_answers_with_the_inbox_cards_widget(operator, asked):
    rid = asked["pendingRequests"][0]["requestId"]

    html = turn_page(operator.client, asked["runId"])[1]

    form = re.search(r'<form class="answer" method="post" action="/inbox/([0-9a-f-]+)/answer/".*?</form>', html, re.S)
    assert form is not None and form.group(1) == rid
    widget = form.group(0)
    assert 'name="csrfmiddlewaretoken"' in widget
    back = "/trial/?agent=assistant&amp;version=1&amp;session=trial-1"
    assert f'<input type="hidden" name="next" value="{back}">' in widget
    assert '<button name="decision" value="approve">Approve</button>' in widget
    assert '<button name="decision" value="deny" class="danger">Deny</button>' in widget
    assert "Don't ask again for this tool" in widget
    assert "Edit arguments before approving" in widget
    assert '<input type="radio" name="remember" value="session">' in widget
    # The old answer bar's decision radios are gone: only "don't ask again" offers a choice.
    assert "Send answers" not in html and 'type="radio" name="decision' not in html


def test_an_answer_without_javascript_comes_back_to_the_trial_page(operator, asked):
    rid = asked["pendingRequests"][0]["requestId"]
    back = "/trial/?agent=assistant&version=1&session=trial-1"

    response = operator.client.post(f"/inbox/{rid}/answer/", {"decision": "deny", "reason": "no", "next": back})

    assert response.status_code == 302 and response["Location"] == back
    assert PendingRequest.objects.get(id=rid).answer["approved"] is False
    drain_queued()
    page = operator.client.get(back).content.decode()
    assert "send_email denied: no" in page
    assert "Waiting for your answer" not in page  # only the fork's widget is left, to answer differently
    assert page.count(f'action="/inbox/{rid}/answer/"') == page.count('name="checkpoint"') == 1


@pytest.mark.parametrize("elsewhere", ["https://evil.example/trial/", "//evil.example/", "javascript:alert(1)"])
def test_it_returns_to_no_other_site(operator, asked, elsewhere):
    rid = asked["pendingRequests"][0]["requestId"]

    response = operator.client.post(f"/inbox/{rid}/answer/", {"decision": "approve", "next": elsewhere})

    assert response.status_code == 302 and response["Location"] == "/inbox/"


def test_an_earlier_turns_widget_forks_the_session(operator, asked):
    rid = asked["pendingRequests"][0]["requestId"]
    operator.client.post(f"/inbox/{rid}/answer/", {"decision": "approve"})
    drain_queued()
    checkpoint = Checkpoint.objects.get(run_id=asked["runId"])
    html = turn_page(operator.client, asked["runId"])[1]
    assert "Answer differently (fork)" in html
    assert f'<input type="hidden" name="checkpoint" value="{checkpoint.id}">' in html

    denial = {"decision": "deny", "reason": "not now", "checkpoint": checkpoint.id}
    forked = operator.client.post(f"/inbox/{rid}/answer/", denial, HTTP_HX_REQUEST="true")

    fork = Session.objects.get(forked_from_session=checkpoint.session)
    assert forked.status_code == 200 and forked.content == b""
    assert json.loads(forked["HX-Trigger"]) == {"airlock:forked": {"sessionId": fork.key}}
    assert PendingRequest.objects.get(id=rid).answer["approved"] is True  # the original keeps its answer

    back = "/trial/?agent=assistant&version=1&session=trial-1"
    again = operator.client.post(
        f"/inbox/{rid}/answer/", {"decision": "approve", "checkpoint": checkpoint.id, "next": back}
    )
    second = Session.objects.filter(forked_from_session=checkpoint.session).exclude(pk=fork.pk).get()
    assert again["Location"] == f"/trial/?agent=assistant&version=1&session={second.key}"


def test_a_request_routed_to_a_group_of_others_waits_for_them_without_a_widget(admin, operator, acme):
    ApproverGroup.objects.create(tenant=acme, name="finance")
    tools = [{"name": "send_email", "approval": "always", "approvers": "finance"}]
    make_agent(admin, tools=tools)
    asked = ask_to_send(operator, "trial-1")

    html = turn_page(operator.client, asked["runId"])[1]

    assert "For <strong>finance</strong>: waiting for one of its members (or an admin) to answer." in html
    assert "data-answer-form" not in html
    assert "data-answer-form" in turn_page(admin.client, asked["runId"])[1]


def test_an_elicitation_is_answered_with_the_form_its_schema_generates(operator, asked, answer_window):
    day = ask_for_a_day(asked)

    html = turn_page(operator.client, asked["runId"])[1]

    assert f'<input id="f-{day.id}-day" name="field-day" type="text"' in html
    assert '<button name="action" value="accept">Accept</button>' in html
    # What trial.js shows in the widget: the card's message the answer view sends back, nothing stored.
    refused = operator.client.post(f"/inbox/{day.id}/answer/", {"action": "accept"}, HTTP_HX_REQUEST="true")
    assert "does not fit the requested schema: Day is required." in refused.text
    assert PendingRequest.objects.get(id=day.id).answer is None
    accepted = operator.client.post(
        f"/inbox/{day.id}/answer/", {"action": "accept", "field-day": "Monday"}, HTTP_HX_REQUEST="true"
    )
    swapped_out(accepted, answer_window, "Answered book_meeting")
    assert PendingRequest.objects.get(id=day.id).answer["content"] == {"day": "Monday"}


@pytest.mark.parametrize(
    ("tools", "hint"),
    [
        ([{"name": "send_email"}, {"name": "get_time"}], "call send_email {&quot;to&quot;"),
        ([{"name": "ask_user"}, {"name": "get_time"}], "call get_time"),
        ([{"name": "ask_user"}], "hello"),
    ],
)
def test_the_empty_page_suggests_a_message_the_agent_can_take(operator, tools, hint):
    # It suggested send_email to every agent, and the scripted model then asked for a tool the agent lacks.
    make_agent(
        operator, name="hinted", tools=tools, clientTools=[], parameters=[], instructions="", instructionsByCulture={}
    )

    html = operator.client.get("/trial/?agent=hinted").content.decode()

    assert f"Try <code>{hint}" in html


def pill_of(html: str, run_id: str) -> str:
    turn = html[html.index(f'id="turn-{run_id}"') :]
    return re.search(r'<span class="pill status-[a-z_]+">([^<]*)</span>', turn).group(1)  # type: ignore[union-attr]


def test_a_turn_says_it_was_answered_once_its_request_is_not_awaiting_for_good(operator, asked):
    back = "/trial/?agent=assistant&version=1&session=trial-1"
    assert pill_of(operator.client.get(back).content.decode(), asked["runId"]) == "Awaiting approval"

    rid = asked["pendingRequests"][0]["requestId"]
    operator.client.post(f"/inbox/{rid}/answer/", {"decision": "approve", "next": back})

    # Stored, its continuation not run yet, and after it: the turn that asked is answered, not still awaiting.
    assert pill_of(operator.client.get(back).content.decode(), asked["runId"]) == "Answered"
    drain_queued()
    assert pill_of(operator.client.get(back).content.decode(), asked["runId"]) == "Answered"


def test_a_turn_says_what_a_policy_in_shadow_mode_would_have_done(admin):
    """In shadow mode a policy's verdict changes nothing, so the turn's reply does not show it: the turn says it (the
    newcomer's walk of issue 50 found it only under "run details")."""
    make_agent(admin, name="shadowed", hooks=starter_hooks("evaluate_only", ["get_time"]))
    outside = {**EMAIL, "to": "someone@outside.test"}
    ran = admin.api(
        "post",
        "/api/agents/shadowed/runs",
        {"message": f"call send_email {json.dumps(outside)}", "sessionId": "trial-s"},
    )
    assert ran.status_code == 200, ran.content
    _, html = turn_page(admin.client, ran.json()["runId"])
    said = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "Policy mail-guard would have given escalate (shadow mode: not enforced) on send_email" in said, said


def test_a_request_needing_two_approvals_says_for_whom_and_where_its_count_stands(admin, operator):
    """As the inbox card does (SPEC section 14): the trial page's request showed neither."""
    ApproverGroup.objects.create(tenant=admin.tenant, name="sre").members.add(admin.user, operator.user)
    send = {"name": "send_email", "approval": "always", "approvers": ["sre"], "require": {"approvals": 2}}
    make_agent(admin, tools=[send, {"name": "get_time", "approval": "never"}])
    asked = ask_to_send(operator, "trial-q")

    status, html = turn_page(admin.client, asked["runId"])

    assert status == 200
    text = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "For sre ." in text and "0 of 2 · waiting for 2 more approvals" in text
