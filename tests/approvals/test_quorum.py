"""Decisions that need more than one person (SPEC section 14): quorum, separation of duties, the race."""

import io
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.actions import answer_request, apply_due
from approvals.decisions import Actor
from approvals.models import Approval, ApproverGroup, HeldAnswer, PendingRequest, Receipt, RequestStatus, Via
from approvals.responses import Response
from approvals.signing import sign_heads
from tests.approvals.test_audit import exported_json
from tests.approvals.test_inbox_pages import HTMX
from tests.conftest import Persona, make_persona
from tests.helpers import EMAIL, assert_problem, call_line, drain_queued, make_agent, run_ok, stored_events

pytestmark = pytest.mark.django_db

DEPLOY = {
    "name": "deploy",
    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}},
    "approval": "always",
    "approvers": ["sre", "security"],
    "require": {"approvals": 2, "fromEach": ["sre", "security"]},
}


@pytest.fixture
def people(admin: Persona, operator: Persona) -> dict[str, Persona]:
    """sam and sid of sre, sue of security; otto (an operator of neither) opens the requests."""
    tenant = admin.tenant
    found = {name: make_persona(name, tenant, "operator") for name in ("sam", "sid", "sue")}
    sre = ApproverGroup.objects.create(tenant=tenant, name="sre")
    sre.members.add(found["sam"].user, found["sid"].user, operator.user)
    ApproverGroup.objects.create(tenant=tenant, name="security").members.add(found["sue"].user)
    content = DefinitionContent.model_validate({"name": "releaser", "runtime": "external", "tools": [DEPLOY]})
    Agent.create(tenant, content, admin.user)
    return found | {"otto": operator, "ada": admin}


def open_deploy(persona: Persona, service: str = "billing") -> str:
    body = {"kind": "approval", "toolName": "deploy", "arguments": {"service": service}}
    opened = persona.api("post", "/api/agents/releaser/requests", body)
    assert opened.status_code == 201, opened.content
    return str(opened.json()["requestId"])


def respond(persona: Persona, rid: str, **answer: Any) -> Any:
    return persona.api("post", f"/api/requests/{rid}/responses", {"approved": True, **answer})


def test_two_people_one_from_each_group_decide_it(people, settings, tmp_path):
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "keys" / "receipt-signing.key")
    settings.RECEIPT_HEADS_FILE = str(tmp_path / "keys" / "receipt-heads.jsonl")
    rid = open_deploy(people["otto"])
    first = respond(people["sam"], rid, reason="checked the diff")
    assert first.status_code == 200, first.content
    assert first.json()["status"] == "recorded"
    assert first.json()["approvals"] == {"given": 1, "required": 2, "by": ["sam"]}
    assert "waiting for security" in first.json()["message"]
    # The same member again: nothing changes.
    again = respond(people["sam"], rid)
    assert again.json()["status"] == "already_approved_by_you" and again.json()["approvals"]["given"] == 1
    # Two of sre make two approvals, but none is from security yet.
    second = respond(people["sid"], rid)
    assert second.json()["status"] == "recorded" and second.json()["approvals"]["given"] == 2
    assert "waiting for security" in second.json()["message"]
    got = people["ada"].api("get", f"/api/requests/{rid}").json()
    assert got["status"] == "pending" and got["decision"] is None
    assert got["approvers"] == ["sre", "security"]
    assert [a["by"] for a in got["approvals"]] == ["sam", "sid"]
    assert {a["authMethod"] for a in got["approvals"]} == {"token:" + str(people["sam"].membership.tokens.get().id)} | {
        "token:" + str(people["sid"].membership.tokens.get().id)
    }

    third = respond(people["sue"], rid)
    assert third.json()["status"] == "accepted", third.content
    pending = PendingRequest.objects.get(id=rid)
    assert pending.status == RequestStatus.ANSWERED and pending.answer["approved"] is True
    assert [a["by"] for a in pending.answer["approvals"]] == ["sam", "sid", "sue"]
    # One receipt, written when it was decided, listing every approval that counted.
    receipt = Receipt.objects.get(request_id=rid)
    assert receipt.body["answeredBy"] == "sue"
    assert [a["by"] for a in receipt.body["approvals"]] == ["sam", "sid", "sue"]
    events = stored_events(str(pending.run_id))
    recorded = [e.data for e in events if e.type == "request.approval_recorded"]
    assert [[a["by"] for a in r["approvals"]] for r in recorded] == [["sam"], ["sam", "sid"]]
    assert all(r["required"] == 2 for r in recorded)
    answered = next(e.data for e in events if e.type == "request.answered")
    assert [a["by"] for a in answered["approvals"]] == ["sam", "sid", "sue"]
    assert "permission.completed" in [e.type for e in events]
    assert [e.type for e in events].count("permission.completed") == 1
    sign_heads()
    said = io.StringIO()
    entries = [e for e in exported_json(people["ada"]) if e["requestId"] == rid]
    assert [(e["who"], e["decision"], e["reason"]) for e in entries] == [
        ("sue", "approved", None),
        ("sid", "approval-recorded", "2 of 2 approvals, waiting for security"),
        ("sam", "approval-recorded", "1 of 2 approvals, waiting for security"),
    ]
    assert [a["by"] for a in entries[0]["approvals"]] == ["sam", "sid", "sue"]
    assert [e["requestId"] for e in exported_json(people["ada"], "?format=json&who=sid")] == [rid]
    assert exported_json(people["ada"], "?format=json&decision=denied") == []
    assert "approved by sam, sid, sue" in people["ada"].client.get("/audit/").content.decode()
    call_command("verify_receipts", "--tenant", people["ada"].tenant.slug, stdout=said)
    assert "1 receipts verified" in said.getvalue() or "receipt verified" in said.getvalue(), said.getvalue()


def test_the_requester_cannot_approve_and_remember_is_refused(people):
    rid = open_deploy(people["otto"])  # otto is of sre, but he asked
    refused = respond(people["otto"], rid)
    problem = assert_problem(refused, 403, "not_an_approver")
    assert problem["reason"] == "self_approval"
    remembering = respond(people["sam"], rid, remember="always")
    assert_problem(remembering, 400, "remember_not_allowed")
    assert not Approval.objects.exists()
    # The requester may still withdraw it by denying.
    assert respond(people["otto"], rid, approved=False, reason="wrong service").json()["status"] == "accepted"


def test_a_deny_decides_at_once(people):
    rid = open_deploy(people["otto"])
    assert respond(people["sam"], rid).json()["status"] == "recorded"
    denied = respond(people["sue"], rid, approved=False, reason="freeze week")
    assert denied.json()["status"] == "accepted"
    pending = PendingRequest.objects.get(id=rid)
    assert pending.answer["approved"] is False and pending.status == RequestStatus.ANSWERED
    assert respond(people["sid"], rid).json()["status"] == "already_resolved"


def test_edited_arguments_start_the_count_again(people):
    rid = open_deploy(people["otto"])
    edited = respond(people["sam"], rid, overrideArguments={"service": "billing-canary"})
    assert edited.json()["status"] == "recorded"
    # sue approves the arguments as asked: sam's approval was of others, so it does not count.
    original = respond(people["sue"], rid)
    assert original.json()["status"] == "recorded"
    assert original.json()["approvals"] == {"given": 1, "required": 2, "by": ["sue"]}
    assert Approval.objects.filter(request_id=rid).count() == 2  # both kept for the record
    assert respond(people["sam"], rid).json()["status"] == "accepted"
    approvals = PendingRequest.objects.get(id=rid).answer["approvals"]
    assert [a["by"] for a in approvals] == ["sue", "sam"]


def test_a_require_must_be_reachable(admin):
    ApproverGroup.objects.create(tenant=admin.tenant, name="sre")
    tool = {**DEPLOY, "approvers": "sre"}
    made = admin.api("post", "/api/agents", {"name": "r2", "runtime": "external", "tools": [tool]})
    assert made.status_code == 400 and "fromEach names 'security'" in made.content.decode()
    unknown = {**DEPLOY, "approvers": ["sre", "nobody"], "require": {"approvals": 1}}
    made = admin.api("post", "/api/agents", {"name": "r3", "runtime": "external", "tools": [unknown]})
    problem = assert_problem(made, 400, "unknown_group")
    assert "tools.0.approvers.1" in str(problem)
    tight = {**DEPLOY, "require": {"approvals": 1, "fromEach": ["sre", "security"]}}
    made = admin.api("post", "/api/agents", {"name": "r4", "runtime": "external", "tools": [tight]})
    assert made.status_code == 400 and "at least the number of fromEach groups" in made.content.decode()


@pytest.mark.django_db(transaction=True)
def test_two_completing_approvals_at_once_decide_it_once(people):
    """sam's approval is in; two of security complete the quorum at the same moment: one decides it."""
    tenant = people["ada"].tenant
    extra = make_persona("sal", tenant, "operator")
    ApproverGroup.objects.get(tenant=tenant, name="security").members.add(extra.user)
    for round_ in range(3):
        rid = open_deploy(people["otto"], service=f"svc-{round_}")
        assert respond(people["sam"], rid).json()["status"] == "recorded"
        barrier, outcomes = threading.Barrier(2), []

        def approve(persona: Persona, barrier: threading.Barrier, outcomes: list[Any], rid: str) -> None:
            try:
                barrier.wait()
                actor = Actor.person(persona.user, Via.API, "session")
                outcomes.append(answer_request(persona.membership, actor, Response(request_id=rid, approved=True)))
            finally:
                connection.close()

        threads = [threading.Thread(target=approve, args=(p, barrier, outcomes, rid)) for p in (people["sue"], extra)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        statuses = sorted(o.status for o in outcomes)
        assert statuses == ["accepted", "already_resolved"], statuses
        assert Receipt.objects.filter(request_id=rid).count() == 1
        pending = PendingRequest.objects.get(id=rid)
        assert len(pending.answer["approvals"]) == 2
        # The losing approval was not kept as counted toward anything: only the decided one's rows remain.
        assert Approval.objects.filter(request_id=rid).count() == 2


def test_the_inbox_holds_each_approval_and_refuses_the_requester_at_once(people, settings):
    """Each approval given on the card is held for its undo window (SPEC section 14), then counted; the one who asked
    is refused before anything is held."""
    settings.ANSWER_UNDO_SECONDS = 5
    rid = open_deploy(people["otto"])
    refused = people["otto"].client.post(f"/inbox/{rid}/answer/", {"decision": "approve"}, **HTMX)
    assert "someone else must approve it" in refused.content.decode()
    assert not HeldAnswer.objects.exists()
    people["sam"].client.post(f"/inbox/{rid}/answer/", {"decision": "approve"}, **HTMX)
    assert HeldAnswer.objects.get().state == "held" and not Approval.objects.exists()
    apply_due(timezone.now() + timedelta(seconds=6))
    assert [a.username for a in Approval.objects.all()] == ["sam"]
    assert PendingRequest.objects.get(id=rid).status == RequestStatus.PENDING
    card = people["sue"].client.get("/inbox/").content.decode()
    assert "1 of 2" in card and "waiting for security" in card
    # The notice says the approval was counted, not that the request was approved.
    notice = people["sam"].client.get(reverse("held_answer", args=[HeldAnswer.objects.get().batch]), **HTMX)
    assert "Approved deploy. Approval recorded: 1 of 2, waiting for security." in " ".join(
        notice.content.decode().split()
    )


def test_a_rule_remembered_before_the_requirement_does_not_skip_the_quorum(people):
    """A rule is one person's say (SPEC section 14): once the tool needs two approvals, no rule stands for them."""
    ada = people["ada"]
    plain = {**DEPLOY, "approvers": None, "require": None}
    plain = {key: value for key, value in plain.items() if value is not None}
    put = {"name": "releaser", "runtime": "external", "tools": [plain]}
    assert ada.api("put", "/api/agents/releaser", put).status_code == 200
    rid = open_deploy(people["otto"])
    assert respond(ada, rid, remember="always").json()["status"] == "accepted"
    decided = people["otto"].api(
        "post", "/api/agents/releaser/requests", {"toolName": "deploy", "arguments": {"service": "billing"}}
    )
    assert decided.json()["status"] == "decided"  # the rule decides while one approval is enough
    assert ada.api("put", "/api/agents/releaser", put | {"tools": [DEPLOY]}).status_code == 200
    asked = people["otto"].api(
        "post", "/api/agents/releaser/requests", {"toolName": "deploy", "arguments": {"service": "billing"}}
    )
    assert asked.json()["status"] == "pending", asked.content


def test_a_turns_input_decides_no_quorum_and_no_self_approval(admin, operator, people):
    """Approvals that ride as the next turn's input (SPEC section 4) go through the same requirement: one person's
    approval there would decide what needs several (409 `approvals_required`), and the starter's own is refused."""
    both = {"name": "send_email", "approval": "always", "require": {"approvals": 2}}
    make_agent(admin, name="two-keys", tools=[both])
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "q1"}, agent="two-keys")
    rid = asked["pendingRequests"][0]["requestId"]
    said = people["sam"].api(
        "post", "/api/agents/two-keys/runs", {"sessionId": "q1", "approvals": [{"requestId": rid, "approved": True}]}
    )
    assert_problem(said, 409, "approvals_required")
    assert PendingRequest.objects.get(id=rid).answer is None
    # A deny in the input still decides at once.
    denied = people["sam"].api(
        "post", "/api/agents/two-keys/runs", {"sessionId": "q1", "approvals": [{"requestId": rid, "approved": False}]}
    )
    assert denied.status_code == 200, denied.content

    one = {"name": "send_email", "approval": "always", "require": {"approvals": 1}}
    make_agent(admin, name="not-mine", tools=[one])
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "q2"}, agent="not-mine")
    rid = asked["pendingRequests"][0]["requestId"]
    mine = operator.api(
        "post", "/api/agents/not-mine/runs", {"sessionId": "q2", "approvals": [{"requestId": rid, "approved": True}]}
    )
    assert assert_problem(mine, 403, "not_an_approver")["reason"] == "self_approval"
    other = people["sam"].api(
        "post", "/api/agents/not-mine/runs", {"sessionId": "q2", "approvals": [{"requestId": rid, "approved": True}]}
    )
    assert other.status_code == 200 and other.json()["status"] == "completed", other.content


def test_an_answer_at_an_earlier_checkpoint_decides_no_quorum(admin, operator, people):
    """A fork's copy decided by one approval would run what needs two (SPEC sections 9 and 14): refused."""
    make_agent(
        admin, name="two-keys", tools=[{"name": "send_email", "approval": "always", "require": {"approvals": 2}}]
    )
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "f"}, agent="two-keys")
    rid = asked["pendingRequests"][0]["requestId"]
    earlier = operator.api("GET", "/api/sessions/f/checkpoints").json()["items"][-1]["checkpointId"]
    assert respond(people["sam"], rid, approved=False).json()["status"] == "accepted"  # a deny decides at once
    drain_queued()
    forked = respond(people["sam"], rid, checkpointId=earlier)
    assert_problem(forked, 409, "approvals_required")
    assert PendingRequest.objects.filter(session__key="f").count() == 1  # no fork, no copy


def test_the_inbox_reads_the_approvals_of_its_cards_in_one_query(people):
    """The cards say each quorum's count (SPEC section 14): read for the page at once, not card by card."""

    def inbox_queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert people["sue"].client.get("/inbox/").status_code == 200
        return len(captured)

    respond(people["sam"], open_deploy(people["otto"], "a"))
    one = inbox_queries()
    for service in ("b", "c", "d"):
        respond(people["sam"], open_deploy(people["otto"], service))
    assert inbox_queries() == one


def test_the_requesters_stand_in_cannot_approve_for_them_in_a_turns_input_either(admin, operator, people):
    """sue is of security only; otto, of sre, asked and is away with sue standing in: she answers sre's request
    only for him, which the requirement refuses, in a turn's input as in the inbox."""
    tools = [{"name": "send_email", "approval": "always", "approvers": "sre", "require": {"approvals": 1}}]
    make_agent(admin, name="not-mine", tools=tools)
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "d1"}, agent="not-mine")
    rid = asked["pendingRequests"][0]["requestId"]
    until = "2031-01-01T00:00:00Z"
    assert operator.api("put", "/api/me/away", {"until": until, "delegate": "sue"}).status_code == 200
    body = {"sessionId": "d1", "approvals": [{"requestId": rid, "approved": True}]}
    refused = people["sue"].api("post", "/api/agents/not-mine/runs", body)
    assert assert_problem(refused, 403, "not_an_approver")["reason"] == "self_approval"
    inbox = respond(people["sue"], rid)
    assert assert_problem(inbox, 403, "not_an_approver")["reason"] == "self_approval"
    assert people["sam"].api("post", "/api/agents/not-mine/runs", body).json()["status"] == "completed"


def test_an_inbox_read_again_after_an_approval_says_the_new_count(people):
    """The inbox keeps each card's HTML for the minute (approvals/cards.py): an approval given meanwhile (here by the
    API, so no push redraws the card) must show at the next read, on the card and its row, with who gave it."""
    rid = open_deploy(people["otto"])
    before = people["sue"].client.get("/inbox/").content.decode()
    assert '<span class="row-quorum">0 of 2</span>' in before and "<strong>0 of 2</strong>" in before
    assert respond(people["sam"], rid).json()["status"] == "recorded"
    after = people["sue"].client.get("/inbox/").content.decode()
    assert '<span class="row-quorum">1 of 2</span>' in after
    assert "<strong>1 of 2</strong> · sam · waiting for security" in after


def test_the_receipt_page_shows_the_approvals_as_json(people):
    rid = open_deploy(people["otto"])
    respond(people["sam"], rid)
    assert respond(people["sue"], rid).json()["status"] == "accepted"
    page = people["ada"].client.get(reverse("request_receipt", args=[rid]), follow=True).content.decode()
    shown = page.split('<pre class="json">', 1)[1].split("</pre>", 1)[0]
    assert shown.startswith("[\n  {\n    &quot;") and "&quot;by&quot;: &quot;sam&quot;" in shown  # indented JSON
    assert "&#x27;by&#x27;" not in page and "{'by'" not in page


def test_separating_duties_refuses_the_requester_approvals_only(admin, operator, people):
    """SPEC section 14: the one who asked cannot approve; a client tool's result or a question's answer is no
    approval, so they may give those (as the one who runs the client, or was asked, usually does)."""
    located = {"name": "get_user_location", "approvers": "sre", "require": {"approvals": 1}}
    make_agent(admin, name="locating", clientTools=[located])
    for session, by_turn in (("c1", False), ("c2", True)):
        asked = run_ok(operator, {"message": call_line("get_user_location", {}), "sessionId": session}, "locating")
        pending = asked["pendingRequests"][0]
        if by_turn:
            said = {"sessionId": session, "toolResults": [{"callId": pending["callId"], "result": {"city": "Oslo"}}]}
            assert run_ok(operator, said, "locating")["status"] == "completed"
        else:
            answered = respond(operator, pending["requestId"], approved=None, result={"city": "Oslo"})
            assert answered.json()["status"] == "accepted", answered.content
    kinds = [{"kind": "question", "approvers": "sre", "require": {"approvals": 1}}]
    put = {"name": "releaser", "runtime": "external", "tools": [DEPLOY], "requestKinds": kinds}
    assert people["ada"].api("put", "/api/agents/releaser", put).status_code == 200
    opened = operator.api("post", "/api/agents/releaser/requests", {"kind": "question", "question": "Which region?"})
    answered = respond(operator, opened.json()["requestId"], approved=None, text="eu-west")
    assert answered.json()["status"] == "accepted", answered.content
    assert assert_problem(respond(operator, open_deploy(operator)), 403, "not_an_approver")["reason"] == "self_approval"
