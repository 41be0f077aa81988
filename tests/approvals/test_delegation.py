"""Delegation (SPEC section 14): an away member's delegate answers what they may, and the record names both."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.models import ApproverGroup, Away, PendingRequest, Receipt
from tests.approvals.test_audit import exported_csv, exported_json
from tests.conftest import Persona, make_persona
from tests.helpers import EMAIL, assert_problem, call_line, make_agent, run_ok, stored_events

pytestmark = pytest.mark.django_db

DEPLOY = {"name": "deploy", "approval": "always", "approvers": "sre"}
TWO = {"require": {"approvals": 2}}


@pytest.fixture
def team(admin: Persona, operator: Persona, reader: Persona) -> dict[str, Persona]:
    """sam of sre; dan and eve, operators of no group; otto opens the requests."""
    tenant = admin.tenant
    people = {name: make_persona(name, tenant, "operator") for name in ("sam", "dan", "eve")}
    ApproverGroup.objects.create(tenant=tenant, name="sre").members.add(people["sam"].user, operator.user)
    tools = [DEPLOY, {**DEPLOY, "name": "wipe", "require": {"approvals": 1}}, {**DEPLOY, "name": "ship", **TWO}]
    content = DefinitionContent.model_validate({"name": "releaser", "runtime": "external", "tools": tools})
    Agent.create(tenant, content, admin.user)
    return people | {"otto": operator, "ada": admin, "rita": reader}


def open_request(persona: Persona, tool: str = "deploy") -> str:
    opened = persona.api("post", "/api/agents/releaser/requests", {"toolName": tool, "arguments": {}})
    assert opened.status_code == 201, opened.content
    return str(opened.json()["requestId"])


def away(persona: Persona, delegate: str, **dates: str) -> object:
    until = (timezone.now() + timedelta(days=2)).isoformat()
    return persona.api("put", "/api/me/away", {"until": until, "delegate": delegate, **dates})


def test_the_delegate_answers_for_the_away_member_and_the_record_names_both(team):
    rid = open_request(team["otto"])
    dan = team["dan"]
    assert_problem(dan.api("post", f"/api/requests/{rid}/responses", {"approved": True}), 403, "not_an_approver")
    set_ = away(team["sam"], "dan")
    assert set_.status_code == 200 and set_.json()["away"]["delegate"] == "dan" and set_.json()["away"]["active"]
    assert team["sam"].api("get", "/api/me/away").json()["away"]["delegate"] == "dan"
    listed = dan.api("get", "/api/requests?for=me").json()["items"]
    assert [r["requestId"] for r in listed] == [rid]
    answered = dan.api("post", f"/api/requests/{rid}/responses", {"approved": True, "reason": "for sam"})
    assert answered.json()["status"] == "accepted", answered.content
    got = team["ada"].api("get", f"/api/requests/{rid}").json()
    assert (got["answeredBy"], got["onBehalfOf"]) == ("dan", "sam")
    decision = got["decision"]
    assert (decision["answeredBy"], decision["onBehalfOf"]) == ("dan", "sam")
    receipt = Receipt.objects.get(request_id=rid).body
    assert (receipt["answeredBy"], receipt["onBehalfOf"]) == ("dan", "sam")
    run_id = str(PendingRequest.objects.get(id=rid).run_id)
    answered_event = next(e.data for e in stored_events(run_id) if e.type == "request.answered")
    assert (answered_event["answeredBy"], answered_event["onBehalfOf"]) == ("dan", "sam")
    run_page = " ".join(team["ada"].client.get(reverse("run", args=[run_id])).content.decode().split())
    assert "Answered by <strong>dan</strong> for <strong>sam</strong>" in run_page
    entry = next(e for e in exported_json(team["ada"]) if e["requestId"] == rid)
    assert (entry["who"], entry["onBehalfOf"]) == ("dan", "sam")
    assert next(r for r in exported_csv(team["ada"]) if r["requestId"] == rid)["onBehalfOf"] == "sam"
    assert "for sam" in team["ada"].client.get("/audit/").content.decode()
    # An answer in one's own right names nobody else.
    own = open_request(team["otto"])
    team["ada"].api("post", f"/api/requests/{own}/responses", {"approved": True})
    assert "onBehalfOf" not in Receipt.objects.get(request_id=own).body
    assert team["ada"].api("get", f"/api/requests/{own}").json()["onBehalfOf"] is None


def test_back_ends_it_and_chains_are_not_followed(team):
    rid = open_request(team["otto"])
    away(team["sam"], "dan")
    away(team["dan"], "eve")  # eve stands in for dan, not for whom dan stands in for
    refused = team["eve"].api("post", f"/api/requests/{rid}/responses", {"approved": True})
    assert_problem(refused, 403, "not_an_approver")
    assert team["sam"].api("delete", "/api/me/away").json() == {"away": None}
    refused = team["dan"].api("post", f"/api/requests/{rid}/responses", {"approved": True})
    assert_problem(refused, 403, "not_an_approver")


def test_an_absence_not_begun_gives_nothing(team):
    rid = open_request(team["otto"])
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    assert away(team["sam"], "dan", **{"from": later}).json()["away"]["active"] is False
    assert_problem(
        team["dan"].api("post", f"/api/requests/{rid}/responses", {"approved": True}), 403, "not_an_approver"
    )


def test_a_delegate_of_the_requester_cannot_approve_for_them(team):
    rid = open_request(team["otto"], "wipe")  # otto asked; the tool separates duties
    away(team["otto"], "dan")
    refused = team["dan"].api("post", f"/api/requests/{rid}/responses", {"approved": True})
    assert assert_problem(refused, 403, "not_an_approver")["reason"] == "self_approval"
    assert team["sam"].api("post", f"/api/requests/{rid}/responses", {"approved": True}).json()["status"] == "accepted"


@pytest.mark.parametrize(
    ("who", "delegate", "code"),
    [("sam", "sam", "invalid_delegate"), ("sam", "rita", "invalid_delegate"), ("sam", "nobody", "invalid_delegate")],
)
def test_a_bad_delegate_is_refused(team, who, delegate, code):
    assert_problem(away(team[who], delegate), 400, code)
    assert not Away.objects.exists()


def test_bad_dates_and_a_reader_are_refused(team):
    past = (timezone.now() - timedelta(hours=1)).isoformat()
    assert_problem(team["sam"].api("put", "/api/me/away", {"until": past, "delegate": "dan"}), 400, "invalid_request")
    # Without its offset (which day is it?), and the year 10000 in UTC (stored, no read of the row came back).
    for until in ("2099-01-01", "2099-01-01T00:00:00", "9999-12-31T23:59:59-12:00"):
        assert_problem(away(team["sam"], "dan", until=until), 400, "invalid_request")
    assert_problem(away(team["sam"], "dan", **{"from": "2099-01-01T00:00:00"}), 400, "invalid_request")
    assert_problem(away(team["rita"], "dan"), 403, "forbidden")
    assert not Away.objects.exists()


def test_the_notifications_page_marks_one_away_and_back(team):
    client = team["sam"].client
    until = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    refused = client.post("/notifications/away/", {"until": until, "delegate": "rita"})
    assert refused.status_code == 400 and "Select a valid choice" in refused.content.decode()
    # The page shown at /notifications/away/: its digest form still saves the digest, not an absence.
    assert '<form method="post" action="/notifications/">' in refused.content.decode()
    beyond = client.post("/notifications/away/", {"until": "9999-12-31T23:59:59-12:00", "delegate": "dan"})
    assert beyond.status_code == 400 and "This moment is out of range" in beyond.content.decode()
    assert not Away.objects.exists()
    done = client.post("/notifications/away/", {"until": until, "delegate": "dan"}, follow=True)
    assert "dan answers what you may meanwhile" in done.content.decode()
    assert Away.objects.get().delegate.user.username == "dan"
    page = client.get("/notifications/").content.decode()
    assert "Away now" in page and "I am back" in page
    client.post("/notifications/away/", {"back": "1"})
    assert not Away.objects.exists()


def test_a_delegate_of_the_requester_and_of_another_approves_for_the_other(team):
    """dan stands in for otto, who asked, and for sam (both of sre): where the requirement separates duties he
    approves for sam, not for otto (SPEC section 14), whichever absence was set first."""
    rid = open_request(team["otto"], "wipe")
    away(team["otto"], "dan")
    away(team["sam"], "dan")
    answered = team["dan"].api("post", f"/api/requests/{rid}/responses", {"approved": True})
    assert answered.json()["status"] == "accepted", answered.content
    assert Receipt.objects.get(request_id=rid).body["onBehalfOf"] == "sam"


def test_a_delegate_of_the_requester_and_of_another_approves_for_the_other_in_a_turns_input_too(team):
    tools = [{"name": "send_email", "approval": "always", "approvers": "sre", "require": {"approvals": 1}}]
    make_agent(team["ada"], name="mailer", tools=tools)
    asked = run_ok(team["otto"], {"message": call_line("send_email", EMAIL), "sessionId": "d1"}, agent="mailer")
    rid = asked["pendingRequests"][0]["requestId"]
    away(team["otto"], "dan")
    away(team["sam"], "dan")
    body = {"sessionId": "d1", "approvals": [{"requestId": rid, "approved": True}]}
    assert run_ok(team["dan"], body, agent="mailer")["status"] == "completed"
    receipt = Receipt.objects.get(request_id=rid).body
    assert (receipt["answeredBy"], receipt["onBehalfOf"]) == ("dan", "sam")
    got = team["ada"].api("get", f"/api/requests/{rid}").json()
    assert (got["answeredBy"], got["onBehalfOf"], got["decision"]["onBehalfOf"]) == ("dan", "sam", "sam")


def test_a_delegate_of_several_answers_for_the_first_of_them_by_name(team):
    """eve joins sre: dan stands in for sam (set first) and eve, and answers for eve every time."""
    ApproverGroup.objects.get(name="sre").members.add(team["eve"].user)
    away(team["sam"], "dan")
    away(team["eve"], "dan")
    for _ in range(2):
        rid = open_request(team["otto"])
        team["dan"].api("post", f"/api/requests/{rid}/responses", {"approved": True})
        assert Receipt.objects.get(request_id=rid).body["onBehalfOf"] == "eve"


def test_a_delegates_approval_toward_a_quorum_names_whom_they_stood_in_for(team):
    """SPEC section 14: the card says "dan for sam"; the request's JSON lists the approval with both and says where
    the quorum stands; the respond contract's `by` names who gave each approval."""
    rid = open_request(team["otto"], "ship")
    away(team["sam"], "dan")
    recorded = team["dan"].api("post", f"/api/requests/{rid}/responses", {"approved": True}).json()
    assert (recorded["status"], recorded["approvals"]) == ("recorded", {"given": 1, "required": 2, "by": ["dan"]})
    card = " ".join(team["ada"].client.get("/inbox/").content.decode().split())
    assert "<strong>1 of 2</strong> · dan for sam · waiting for 1 more approval" in card
    got = team["ada"].api("get", f"/api/requests/{rid}").json()
    assert [(a["by"], a.get("onBehalfOf")) for a in got["approvals"]] == [("dan", "sam")]
    assert got["quorum"] == {"given": 1, "required": 2, "by": ["dan"], "waitingFor": []}
    assert team["ada"].api("post", f"/api/requests/{rid}/responses", {"approved": True}).json()["status"] == "accepted"
    got = team["ada"].api("get", f"/api/requests/{rid}").json()
    assert (got["answeredBy"], got["onBehalfOf"]) == ("ada", None)
    assert got["quorum"] == {"given": 2, "required": 2, "by": ["dan", "ada"], "waitingFor": []}
