"""Routing (SPEC section 11): tenant groups (`manage.py create_group`), `"approvers": "<group>"` on a tool, a
client tool, an MCP server, a policy escalation or a request kind, stored on the request when it opens; only
the group's members and admins answer it (403 `not_an_approver` otherwise, nothing changed), the card is
read-only for others ("for finance"), and `GET /api/requests?for=me` lists what the caller may answer."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from agents.definitions import DefinitionContent
from approvals.models import ApproverGroup, PendingRequest
from tests.agents import test_checkpoints as forks
from tests.approvals.test_inbox_pages import HTMX, answer, card_ids
from tests.conftest import make_persona
from tests.helpers import ASSISTANT, assert_problem, make_agent, run_ok, run_queued, snapshot

EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}
SEND = f"call send_email {json.dumps(EMAIL)}"
ROUTED_TOOLS = [{"name": "send_email", "approval": "always", "approvers": "finance"}, {"name": "ask_user"}]


def create_group(*args: str) -> str:
    out = io.StringIO()
    call_command("create_group", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def finance(operator, acme) -> ApproverGroup:
    create_group("finance", "--tenant", "acme", "--member", "otto")
    return ApproverGroup.objects.get(tenant=acme, name="finance")


@pytest.fixture
def stranger(acme):
    """An operator of acme outside the finance group."""
    return make_persona("sam", acme, "operator")


@pytest.fixture
def routed(admin, finance):
    return make_agent(admin, tools=ROUTED_TOOLS)


def ask(persona, message: str = SEND, session: str = "s1") -> dict:
    result = run_ok(persona, {"message": message, "sessionId": session})
    assert result["pendingRequests"], result
    return result


# --- groups ---------------------------------------------------------------------------------------


def test_create_group_makes_a_group_and_adds_members_when_it_exists(operator, reader, acme):
    assert create_group("finance", "--tenant", "acme", "--member", "otto") == "created group finance in acme: otto\n"
    again = create_group("finance", "--tenant", "acme", "--member", "rita", "--member", "otto")

    assert again == "updated group finance in acme: otto, rita\n"
    assert set(ApproverGroup.objects.get(name="finance").members.values_list("username", flat=True)) == {"otto", "rita"}


def test_create_group_refuses_an_unknown_tenant_a_stranger_and_a_bad_name(operator, outsider, acme):
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        create_group("finance", "--tenant", "nope")
    with pytest.raises(CommandError, match="not members of acme: oscar, ghost"):
        create_group("finance", "--tenant", "acme", "--member", "oscar", "--member", "ghost")
    with pytest.raises(CommandError, match="not a group name"):
        create_group("Fin Ance", "--tenant", "acme")
    assert not ApproverGroup.objects.exists()


# --- definitions ----------------------------------------------------------------------------------


def test_a_definition_naming_an_unknown_group_is_refused_with_the_fields(admin, finance, outsider):
    create_group("legal", "--tenant", "globex")  # another tenant's group counts for nothing
    body = {
        **ASSISTANT,
        "tools": [{"name": "send_email", "approval": "always", "approvers": "finance"}],
        "mcpServers": [{"connection": "meetings", "approvers": "legal"}],
        "requestKinds": [{"kind": "question", "approvers": "support"}],
    }
    before = snapshot()

    response = admin.api("POST", "/api/agents", body)

    problem = assert_problem(response, 400, "unknown_group")
    assert problem["errors"] == [
        {"field": "mcpServers.0.approvers", "message": "no group named 'legal' in this tenant"},
        {"field": "requestKinds.0.approvers", "message": "no group named 'support' in this tenant"},
    ]
    assert snapshot() == before
    by_outsider = outsider.api("POST", "/api/agents", {**body, "mcpServers": [], "requestKinds": []})
    assert assert_problem(by_outsider, 400, "unknown_group")["errors"][0]["field"] == "tools.0.approvers"


def test_a_definition_naming_its_groups_is_stored_with_them_and_others_without(admin, finance):
    body = {**ASSISTANT, "tools": ROUTED_TOOLS}

    response = admin.api("POST", "/api/agents", body)

    assert response.status_code == 201, response.content
    assert response.json()["tools"][0]["approvers"] == "finance"
    assert "approvers" not in response.json()["tools"][1]  # unrouted: the stored content is as before
    assert "escalations" not in response.json() and "requestKinds" not in response.json()
    unknown_kind = [{"kind": "nope", "approvers": "finance"}]
    bad = admin.api("POST", "/api/agents", {**body, "name": "other", "requestKinds": unknown_kind})
    assert_problem(bad, 400, "invalid_request")


def test_the_most_specific_routing_wins():
    content = DefinitionContent.model_validate(
        {
            "name": "router",
            "tools": [{"name": "send_email", "approvers": "finance"}, {"name": "get_time"}],
            "clientTools": [{"name": "locate", "approvers": "field"}],
            "mcpServers": [
                {"connection": "meetings", "approvers": "calendar"},
                {"connection": "crm", "toolPrefix": "crm", "approvers": "sales"},
            ],
            "escalations": [{"binding": "spend", "approvers": "cfo"}, {"approvers": "security"}],
            "requestKinds": [{"kind": "approval", "approvers": "ops"}, {"kind": "continuation", "approvers": "leads"}],
        }
    )

    assert content.approvers_for("approval", "send_email") == "finance"
    assert content.approvers_for("approval", "get_time") == "ops"  # the tool names none: its kind's
    assert content.approvers_for("client_tool", "locate") == "field"
    assert content.approvers_for("input", "book_meeting") == "calendar"
    assert content.approvers_for("approval", "crm_lookup") == "sales"
    assert content.approvers_for("approval", "send_email", {"binding": "spend"}) == "cfo"
    assert content.approvers_for("approval", "send_email", {"binding": "other"}) == "security"
    assert content.approvers_for("continuation", "") == "leads"
    assert DefinitionContent.model_validate({"name": "plain"}).approvers_for("approval", "send_email") == ""


# --- answering ------------------------------------------------------------------------------------


def test_the_request_is_routed_when_it_opens_and_only_members_and_admins_answer_it(operator, stranger, admin, routed):
    asked = ask(operator)
    rid = asked["pendingRequests"][0]["requestId"]
    assert PendingRequest.objects.get(id=rid).approvers == "finance"
    assert operator.api("GET", f"/api/requests/{rid}").json()["approvers"] == "finance"
    before = snapshot()

    refused = stranger.api("POST", f"/api/runs/{asked['runId']}/responses", {"requestId": rid, "approved": True})

    problem = assert_problem(refused, 403, "not_an_approver")
    assert "for finance" in problem["detail"]
    assert snapshot() == before
    accepted = operator.api("POST", f"/api/runs/{asked['runId']}/responses", {"requestId": rid, "approved": True})
    assert accepted.json()["status"] == "accepted"

    by_admin = ask(operator, session="s2")
    body = {"requestId": by_admin["pendingRequests"][0]["requestId"], "approved": False, "reason": "no"}
    assert admin.api("POST", f"/api/runs/{by_admin['runId']}/responses", body).json()["status"] == "accepted"


def test_a_request_kind_routes_what_no_tool_routes(operator, stranger, admin, finance):
    make_agent(admin, tools=[{"name": "ask_user"}], requestKinds=[{"kind": "question", "approvers": "finance"}])
    asked = ask(operator, 'call ask_user {"question": "Which colour?"}')
    rid = asked["pendingRequests"][0]["requestId"]

    refused = stranger.api("POST", f"/api/runs/{asked['runId']}/responses", {"requestId": rid, "text": "red"})

    assert_problem(refused, 403, "not_an_approver")
    assert PendingRequest.objects.get(id=rid).approvers == "finance"


def test_for_me_lists_what_the_caller_may_answer(operator, stranger, reader, admin, routed):
    routed_ask = ask(operator, session="s1")
    plain_ask = ask(operator, 'call ask_user {"question": "Which colour?"}', session="s2")
    routed_id, plain_id = routed_ask["pendingRequests"][0]["requestId"], plain_ask["pendingRequests"][0]["requestId"]

    def listed(persona, query: str = "?for=me") -> list[str]:
        response = persona.api("GET", f"/api/requests{query}")
        assert response.status_code == 200, response.content
        return [r["requestId"] for r in response.json()["items"]]

    assert listed(operator) == [routed_id, plain_id]
    assert listed(stranger) == [plain_id]
    assert listed(reader) == []
    assert listed(admin) == [routed_id, plain_id]
    assert listed(stranger, "") == [routed_id, plain_id]  # everyone still sees every request
    assert_problem(stranger.api("GET", "/api/requests?for=you"), 400, "invalid_request")


def test_the_card_is_read_only_for_others_and_says_for_whom(operator, stranger, reader, routed):
    asked = ask(operator)
    rid = asked["pendingRequests"][0]["requestId"]

    theirs = stranger.client.get("/inbox/").content.decode()
    ours = operator.client.get("/inbox/").content.decode()

    assert card_ids(theirs) == [rid] and "For <strong>finance</strong>" in theirs
    assert f'hx-post="/inbox/{rid}/answer/"' not in theirs and 'name="selected"' not in theirs
    assert f'hx-post="/inbox/{rid}/answer/"' in ours and "for finance" in ours
    posted = answer(stranger, rid, {"decision": "approve"}, htmx=True)
    assert "only members of that group and admins answer it" in posted.content.decode()
    assert PendingRequest.objects.get(id=rid).answer is None
    claimed = stranger.api("POST", f"/api/requests/{rid}/claim")
    assert_problem(claimed, 403, "not_an_approver")
    selection = stranger.client.post("/inbox/selection/", {"selected": [rid], "decision": "approve"}, **HTMX)
    assert "only members of that group" in selection.content.decode()
    assert PendingRequest.objects.get(id=rid).answer is None


def test_answers_sent_with_a_run_request_are_refused_to_a_non_member(routed, stranger, operator):
    asked = ask(operator)
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    before = snapshot()

    refused = stranger.api("POST", "/api/agents/assistant/runs", {"sessionId": "s1", "approvals": [approval]})

    assert_problem(refused, 403, "not_an_approver")
    assert snapshot() == before
    continued = run_ok(operator, {"sessionId": "s1", "approvals": [approval]})  # a member of finance may
    assert continued["status"] == "completed", continued


def test_a_forks_copies_stay_routed_to_the_group(routed, stranger, operator):
    asked = ask(operator, f"{SEND}\n{SEND}")
    earlier = forks.checkpoint_of(asked["runId"])
    forks.answer(operator, asked, 0)
    run_queued(forks.answer(operator, asked, 1)["continuationRunId"])

    outcome = forks.answer(operator, asked, 0, approved=False, checkpointId=earlier)

    fork = forks.session_of(operator, outcome)
    _, waiting = forks.state(operator, fork)["pendingRequests"]
    assert PendingRequest.objects.get(pk=waiting["requestId"]).approvers == "finance"
    body = {"requestId": waiting["requestId"], "approved": True}
    assert_problem(stranger.api("POST", f"/api/runs/{asked['runId']}/responses", body), 403, "not_an_approver")


# --- closing without an answer takes the same right -------------------------------------------------


def test_an_operator_outside_the_group_cannot_cancel_the_run_from_the_inbox(operator, stranger, routed):
    """The card hides Cancel the run from them; the endpoint refuses it too."""
    asked = ask(operator)
    rid = asked["pendingRequests"][0]["requestId"]
    assert f'hx-post="/inbox/{rid}/cancel-run/"' not in stranger.client.get("/inbox/").content.decode()
    before = snapshot()

    refused = stranger.client.post(f"/inbox/{rid}/cancel-run/", **HTMX)
    without_js = stranger.client.post(f"/inbox/{rid}/cancel-run/", follow=True)

    assert "only members of that group and admins answer it, or close it unanswered" in refused.content.decode()
    assert f'hx-post="/inbox/{rid}/cancel-run/"' not in refused.content.decode()
    assert "only members of that group and admins answer it" in without_js.content.decode()
    assert snapshot() == before
    assert operator.client.post(f"/inbox/{rid}/cancel-run/", **HTMX).content == b""
    assert PendingRequest.objects.get(id=rid).status == "cancelled"


def test_an_operator_outside_the_group_cannot_abandon_its_request_with_the_next_turn(operator, stranger, routed):
    ask(operator)
    before = snapshot()

    refused = stranger.api(
        "POST", "/api/agents/assistant/runs", {"sessionId": "s1", "message": "never mind", "abandonPending": True}
    )

    assert_problem(refused, 403, "not_an_approver")
    assert snapshot() == before
    moved_on = run_ok(operator, {"sessionId": "s1", "message": "never mind", "abandonPending": True})
    assert moved_on["status"] == "completed", moved_on


def test_an_operator_outside_the_group_cannot_delete_the_session_of_its_request(operator, stranger, admin, routed):
    asked = ask(operator)
    before = snapshot()

    refused = stranger.api("DELETE", "/api/sessions/s1")

    assert_problem(refused, 403, "not_an_approver")
    assert snapshot() == before
    assert admin.api("DELETE", "/api/sessions/s1").status_code == 204
    assert PendingRequest.objects.get(id=asked["pendingRequests"][0]["requestId"]).status == "abandoned"
    assert stranger.api("DELETE", "/api/sessions/s2").status_code == 404


def test_an_operator_outside_the_group_cannot_cancel_its_run_by_the_api_or_the_run_page(operator, stranger, routed):
    asked = ask(operator)
    run_id, rid = asked["runId"], asked["pendingRequests"][0]["requestId"]
    before = snapshot()

    refused = stranger.api("POST", f"/api/runs/{run_id}/cancel")
    page = stranger.client.post(f"/runs/{run_id}/cancel/", follow=True)

    assert_problem(refused, 403, "not_an_approver")
    assert "only members of that group and admins answer it" in page.content.decode()
    assert snapshot() == before
    assert operator.api("POST", f"/api/runs/{run_id}/cancel").json()["status"] == "cancelled"
    assert PendingRequest.objects.get(id=rid).status == "cancelled"
