"""External agents' requests through the API (SPEC section 12): open, decide, wait, cancel, report."""

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from agents.definitions import DefinitionContent
from agents.models import Agent, Run, RunStatus
from approvals.actions import expire_due
from approvals.models import PendingRequest, RequestStatus, Rule
from console.asgi import application
from tests.conftest import Persona
from tests.helpers import assert_problem, snapshot, stored_events

pytestmark = pytest.mark.django_db

DEPLOY = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {
        "type": "object",
        "properties": {"service": {"type": "string"}, "environment": {"enum": ["staging", "production"]}},
        "required": ["service", "environment"],
        "additionalProperties": False,
    },
}
STATUS = {"name": "status", "description": "Read a service's status", "approval": "never"}


@pytest.fixture
def deployer(admin: Persona) -> Agent:
    content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": [DEPLOY, STATUS]})
    return Agent.create(admin.tenant, content, admin.user)


def open_deploy(persona: Persona, **fields: Any) -> Any:
    body = {"kind": "approval", "toolName": "deploy", "arguments": {"service": "billing", "environment": "staging"}}
    return persona.api("post", "/api/agents/deployer/requests", {**body, **fields})


def test_an_approval_waits_in_the_inbox_and_its_answer_completes_its_run(deployer, operator, admin):
    opened = open_deploy(operator, sessionId="ci-42")
    assert opened.status_code == 201, opened.content
    body = opened.json()
    assert body["status"] == "pending" and body["decision"] is None and body["sessionId"] == "ci-42"
    rid = body["requestId"]
    listed = admin.api("get", "/api/requests?agent=deployer").json()["items"]
    assert [r["requestId"] for r in listed] == [rid]
    assert Run.objects.get(id=body["runId"]).status == RunStatus.AWAITING_APPROVAL

    answered = admin.api("post", f"/api/requests/{rid}/responses", {"approved": False, "reason": "not today"})
    assert answered.json()["status"] == "accepted"
    got = operator.api("get", f"/api/requests/{rid}?wait=0").json()
    assert got["status"] == "answered"
    decision = got["decision"]
    assert decision["approved"] is False and decision["text"] == "not today" and decision["answeredBy"] == "ada"
    assert decision["result"] == {"kind": "denied-interactively-by-user", "feedback": "not today"}
    assert decision["via"] == "api"
    run = Run.objects.get(id=body["runId"])
    assert run.status == RunStatus.COMPLETED
    types = [e.type for e in stored_events(body["runId"])]
    assert types == [
        "run.started",
        "permission.requested",
        "run.awaiting",
        "permission.completed",
        "request.answered",
        "run.completed",
    ]
    assert not PendingRequest.objects.open().exists()
    # A second answer changes nothing.
    again = admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
    assert again.json()["status"] == "already_resolved"


def test_a_retry_with_the_same_request_id_is_the_same_request_and_another_body_conflicts(deployer, operator):
    rid = str(uuid.uuid4())
    first = open_deploy(operator, requestId=rid)
    assert first.status_code == 201
    before = snapshot()
    second = open_deploy(operator, requestId=rid)
    assert second.status_code == 200 and second.json()["requestId"] == first.json()["requestId"]
    assert second.json()["runId"] == first.json()["runId"]
    other = open_deploy(operator, requestId=rid, arguments={"service": "billing", "environment": "production"})
    assert_problem(other, 409, "request_conflict")
    assert snapshot() == before


@pytest.fixture
def their_deployer(outsider: Persona) -> Agent:
    """Another tenant's agent of the same name and tools."""
    content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": [DEPLOY, STATUS]})
    return Agent.create(outsider.tenant, content, outsider.user)


def test_it_opens_the_same_request_id_in_two_tenants_as_two_requests(deployer, their_deployer, operator, outsider):
    rid = str(uuid.uuid4())
    # The other tenant uses the id first (an adapter's ids are predictable): it neither blocks it nor tells of it.
    theirs = open_deploy(outsider, requestId=rid, sessionId="theirs")
    assert theirs.status_code == 201, theirs.content
    ours = open_deploy(operator, requestId=rid, arguments={"service": "api", "environment": "production"})
    assert ours.status_code == 201, ours.content
    their_id, our_id = theirs.json()["requestId"], ours.json()["requestId"]
    assert their_id != our_id and PendingRequest.objects.filter(id__in=[their_id, our_id]).count() == 2
    # The agent's own id and the returned one both name the tenant's own request; the other's is a 404.
    for persona, own, other, service in [(operator, our_id, their_id, "api"), (outsider, their_id, our_id, "billing")]:
        for path_id in (rid, own):
            got = persona.api("get", f"/api/requests/{path_id}")
            assert got.status_code == 200 and got.json()["requestId"] == own
            assert got.json()["arguments"]["service"] == service
        assert_problem(persona.api("get", f"/api/requests/{other}"), 404, "request_not_found")
    # A retry is idempotent within the tenant, and another body conflicts there only.
    again = open_deploy(operator, requestId=rid, arguments={"service": "api", "environment": "production"})
    assert again.status_code == 200 and again.json()["requestId"] == our_id
    assert_problem(open_deploy(operator, requestId=rid), 409, "request_conflict")
    assert open_deploy(outsider, requestId=rid, sessionId="theirs").json()["requestId"] == their_id


def test_the_agents_own_id_answers_cancels_and_reports_its_request(deployer, their_deployer, operator, admin, outsider):
    rid = str(uuid.uuid4())
    open_deploy(outsider, requestId=rid)
    ours = open_deploy(operator, requestId=rid).json()
    answered = admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
    assert answered.json()["status"] == "accepted" and answered.json()["requestId"] == ours["requestId"]
    reported = operator.api("post", f"/api/requests/{rid}/outcome", {"success": True})
    assert reported.status_code == 200, reported.content
    assert operator.api("get", f"/api/requests/{rid}/receipt").json()["requestId"] == ours["requestId"]
    # The other tenant's request of that id is untouched, and cancelled by its own agent.
    cancelled = outsider.api("delete", f"/api/requests/{rid}")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert PendingRequest.objects.get(id=ours["requestId"]).status == RequestStatus.ANSWERED


def test_a_request_stored_under_its_agents_own_id_is_still_found(deployer, operator, admin, outsider):
    """Requests opened before ids were derived per tenant are stored under the id their agent sent: a row whose id
    is the `requestId` a retry sends (as one opened without a `requestId` is)."""
    rid = open_deploy(operator).json()["requestId"]
    retried = open_deploy(operator, requestId=rid)
    assert retried.status_code == 200 and retried.json()["requestId"] == rid
    assert_problem(
        open_deploy(operator, requestId=rid, arguments={"service": "x", "environment": "staging"}),
        409,
        "request_conflict",
    )
    assert operator.api("get", f"/api/requests/{rid}").json()["requestId"] == rid
    assert admin.api("post", f"/api/requests/{rid}/responses", {"approved": False}).json()["status"] == "accepted"
    assert_problem(outsider.api("get", f"/api/requests/{rid}"), 404, "request_not_found")
    assert PendingRequest.objects.count() == 1


@pytest.mark.parametrize("session_id", ["ci/42", "ci\n42", "ci\t42"], ids=["slash", "newline", "tab"])
def test_it_refuses_a_session_id_a_path_cannot_name(deployer, operator, session_id):
    before = snapshot()
    refused = assert_problem(open_deploy(operator, sessionId=session_id), 400, "invalid_request")
    assert refused["errors"] == [
        {"field": "sessionId", "message": "a session id may not contain '/' or control characters"}
    ]
    assert snapshot() == before


def test_unknown_tools_and_arguments_that_do_not_fit_are_refused_and_change_nothing(deployer, operator):
    before = snapshot()
    assert_problem(open_deploy(operator, toolName="launch"), 400, "unknown_tool")
    missing = assert_problem(open_deploy(operator, arguments={"service": "billing"}), 400, "invalid_arguments")
    assert missing["errors"] == [{"field": "arguments", "message": "environment: is required"}]
    assert_problem(open_deploy(operator, arguments={"service": 3, "environment": "staging"}), 400, "invalid_arguments")
    assert_problem(operator.api("post", "/api/agents/deployer/requests", {"kind": "question"}), 400, "invalid_request")
    assert_problem(operator.api("post", "/api/agents/nobody/requests", {"kind": "question"}), 404, "agent_not_found")
    assert snapshot() == before


def test_a_tool_that_needs_no_approval_and_a_remembered_rule_decide_at_once(deployer, operator, admin):
    quick = operator.api("post", "/api/agents/deployer/requests", {"toolName": "status", "arguments": {}})
    assert quick.status_code == 201
    assert quick.json()["status"] == "decided" and quick.json()["decision"]["approved"] is True
    asked = open_deploy(operator).json()
    remembered = admin.api(
        "post", f"/api/requests/{asked['requestId']}/responses", {"approved": True, "remember": True}
    )
    assert remembered.json()["status"] == "accepted"
    repeated = open_deploy(operator)
    assert repeated.status_code == 201
    decided = repeated.json()
    assert decided["status"] == "decided"
    assert decided["decision"]["via"] == "rule" and decided["decision"]["result"] == {"kind": "approved"}
    assert not PendingRequest.objects.open().exists()
    # The audit has each decision once: the person's, the rule's, and the tool's mode `never`.
    exported = admin.client.get("/audit/?format=json")
    entries = [e for e in json.loads(b"".join(exported.streaming_content)) if e["agent"] == "deployer"]
    assert [(e["actor"], e["who"], e["via"], e["toolName"]) for e in entries] == [
        ("rule", f"rule {Rule.objects.get().id}", None, "deploy"),
        ("user", admin.user.username, "api", "deploy"),
        ("system", "system", "never", "status"),
    ]


def test_a_reader_is_refused_and_another_tenant_sees_nothing(deployer, operator, reader, outsider):
    before = snapshot()
    assert_problem(open_deploy(reader), 403, "forbidden")
    assert_problem(open_deploy(outsider), 404, "agent_not_found")
    assert snapshot() == before
    rid = open_deploy(operator).json()["requestId"]
    for method, path, body in [
        ("get", f"/api/requests/{rid}?wait=0", None),
        ("post", f"/api/requests/{rid}/responses", {"approved": True}),
        ("delete", f"/api/requests/{rid}", None),
        ("post", f"/api/requests/{rid}/outcome", {"success": True}),
    ]:
        assert_problem(outsider.api(method, path, body), 404, "request_not_found")
    assert_problem(reader.api("post", f"/api/requests/{rid}/responses", {"approved": True}), 403, "forbidden")
    assert PendingRequest.objects.open().count() == 1


def test_the_agent_cancels_its_request_and_it_leaves_the_inbox(deployer, operator, admin):
    rid = open_deploy(operator).json()["requestId"]
    cancelled = operator.api("delete", f"/api/requests/{rid}")
    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["decision"]["result"] == {"kind": "cancelled", "reason": "cancelled"}
    assert not PendingRequest.objects.open().exists()
    assert_problem(operator.api("delete", f"/api/requests/{rid}"), 409, "request_closed")
    late = admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
    assert late.json()["status"] == "cancelled"


def test_the_outcome_of_an_approved_call_is_recorded_once(deployer, operator, admin):
    opened = open_deploy(operator).json()
    rid = opened["requestId"]
    assert_problem(operator.api("post", f"/api/requests/{rid}/outcome", {"success": True}), 409, "request_not_approved")
    admin.api("post", f"/api/requests/{rid}/responses", {"approved": True})
    reported = operator.api("post", f"/api/requests/{rid}/outcome", {"success": True, "result": {"url": "x"}})
    assert reported.status_code == 200
    assert_problem(operator.api("post", f"/api/requests/{rid}/outcome", {"success": True}), 409, "outcome_reported")
    events = stored_events(opened["runId"])
    assert [e.type for e in events][-2:] == ["tool.execution_start", "tool.execution_complete"]
    assert events[-1].data["success"] is True


def test_an_expired_request_is_decided_cancelled_and_its_run_completes(deployer, operator):
    opened = open_deploy(operator, expiresIn=1).json()
    pending = PendingRequest.objects.get(id=opened["requestId"])
    expire_due(pending.expires_at)
    got = operator.api("get", f"/api/requests/{pending.id}").json()
    assert got["status"] == "expired"
    assert got["decision"]["result"] == {"kind": "cancelled", "reason": "expired"}
    assert Run.objects.get(id=opened["runId"]).status == RunStatus.COMPLETED


def test_questions_inputs_and_plans_open_and_take_their_answers(deployer, operator, admin):
    question = operator.api(
        "post",
        "/api/agents/deployer/requests",
        {"kind": "question", "question": "Which region?", "choices": ["eu", "us"]},
    ).json()
    form = operator.api(
        "post",
        "/api/agents/deployer/requests",
        {
            "kind": "input",
            "message": "Release notes",
            "requestedSchema": {"type": "object", "properties": {"notes": {"type": "string"}}},
        },
    ).json()
    plan = operator.api(
        "post", "/api/agents/deployer/requests", {"kind": "plan", "summary": "Roll out", "planContent": "1. a\n2. b"}
    ).json()
    admin.api("post", f"/api/requests/{question['requestId']}/responses", {"text": "eu"})
    admin.api("post", f"/api/requests/{form['requestId']}/responses", {"action": "accept", "content": {"notes": "hi"}})
    admin.api("post", f"/api/requests/{plan['requestId']}/responses", {"approved": False, "text": "smaller"})
    decided = {
        name: operator.api("get", f"/api/requests/{opened['requestId']}").json()["decision"]
        for name, opened in [("question", question), ("input", form), ("plan", plan)]
    }
    assert decided["question"]["text"] == "eu"
    assert decided["input"]["action"] == "accept" and decided["input"]["json"] == {"notes": "hi"}
    assert decided["plan"]["approved"] is False and decided["plan"]["text"] == "smaller"
    assert PendingRequest.objects.get(id=plan["requestId"]).status == RequestStatus.ANSWERED


def test_a_run_of_an_external_agent_is_refused(deployer, operator):
    assert_problem(operator.api("post", "/api/agents/deployer/runs", {"message": "hi"}), 409, "external_agent")


def test_a_hosted_request_is_answered_by_its_id(operator, admin):
    from tests.helpers import ask_to_send, make_agent

    make_agent(admin)
    asked = ask_to_send(operator)
    rid = asked["pendingRequests"][0]["requestId"]
    outcome = admin.api("post", f"/api/requests/{rid}/responses", {"approved": True}).json()
    assert outcome["status"] == "accepted" and outcome["continuationRunId"]
    assert operator.api("get", f"/api/requests/{rid}").json()["decision"]["approved"] is True


@pytest.mark.django_db(transaction=True)
async def test_a_long_poll_by_another_tenants_request_id_never_reads_that_request(
    deployer, their_deployer, operator, admin, outsider
):
    """A long poll listens for the id in its path: it is held only on the request's own id. The other tenant
    opens a request whose `requestId` is this tenant's stored id, and waits on it."""
    ours = (await sync_to_async(open_deploy)(operator, requestId=str(uuid.uuid4()))).json()["requestId"]
    theirs = await sync_to_async(open_deploy)(outsider, requestId=ours)
    assert theirs.status_code == 201 and theirs.json()["requestId"] != ours
    transport = httpx.ASGITransport(app=application)
    auth = {"Authorization": f"Bearer {outsider.token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=auth) as http:
        poll = asyncio.ensure_future(http.get(f"/api/requests/{ours}?wait=3"))
        await asyncio.sleep(0.3)
        answered = await sync_to_async(admin.api)("post", f"/api/requests/{ours}/responses", {"approved": True})
        assert answered.json()["status"] == "accepted"
        response = await poll
    assert ours not in response.text
    assert response.status_code == 400 and response.json()["code"] == "wait_on_request_id"
    assert theirs.json()["requestId"] in response.json()["detail"]
    # Its own id holds as ever.
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=auth) as http:
        held = await http.get(f"/api/requests/{theirs.json()['requestId']}?wait=1")
    assert held.status_code == 200 and held.json()["decision"] is None
