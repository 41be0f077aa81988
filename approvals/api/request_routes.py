"""The inbox routes of the JSON API: pending requests and answering them."""

import uuid
from collections.abc import Callable
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema, Status
from pydantic import BaseModel, ConfigDict, Field

from agents.definitions import UnknownGroup
from agents.getters import get_run_for
from agents.policies import POINTS
from agents.prepare import RunRejected
from agents.request_kinds import RequestKind
from approvals import waiting
from approvals.actions import (
    ClaimRefused,
    PoliciesUnavailable,
    RequestRefused,
    answer_request,
    cancel_request,
    claim,
    open_request,
    release,
    report_outcome,
    verdict_for,
)
from approvals.decisions import Actor, Via
from approvals.external_wire import SHOWN, OpenRequest, decision, request_wire, with_receipt_ids
from approvals.getters import get_request_for
from approvals.models import PendingRequest, PendingRequestQuerySet
from approvals.responses import Response, ResponseRefused
from console.api import ApiError, Paging, Problem, api, page_of, problem, require_role
from console.models import Membership
from console.tenancy import ConsoleRequest

router = Router(tags=["requests"])


@api.exception_handler(UnknownGroup)
def _unknown_group(request: HttpRequest, exc: UnknownGroup) -> HttpResponse:
    errors = [{"field": field, "message": message} for field, message in exc.errors.items()]
    detail = "The definition routes requests to groups this tenant does not have (manage.py create_group)."
    return problem(400, exc.code, detail, errors=errors)


class RequestFilters(Paging):
    status: Literal["pending", "answered", "expired", "cancelled", "abandoned"] | None = "pending"
    agent: str | None = None
    kind: RequestKind | None = None
    tool: str | None = None
    # `for=me`: only what the caller may answer (its role, and the groups requests are routed to).
    for_: Literal["me"] | None = Field(default=None, alias="for")


def _requests(request: ConsoleRequest) -> PendingRequestQuerySet:
    tenant = request.tenant
    requests = PendingRequest.objects.select_related(*SHOWN)
    return requests.filter(tenant=tenant)


@router.get("/requests", response=dict)
def list_requests(request: ConsoleRequest, filters: Query[RequestFilters]) -> dict[str, Any]:
    """The inbox: `status=pending` (the default) lists the requests still waiting for an answer; `for=me`
    those the caller may answer."""
    requests = _requests(request).matching(
        status=filters.status, agent=filters.agent, kind=filters.kind, tool=filters.tool
    )
    if filters.for_ == "me":
        requests = requests.answerable_by(request.membership)
    # The approvals of a page's requests in one query (their `approvals` and `quorum`), with whom a delegate stood for.
    listed = with_receipt_ids(requests.order_by("opened_at", "id")).prefetch_related("approvals__on_behalf_of")
    return page_of(listed, filters.limit, filters.offset, request_wire)


class ApprovalCount(Schema):
    """Where a request that needs several approvals stands (SPEC section 14)."""

    given: int
    required: int
    by: list[str]


class RespondResult(Schema):
    status: str
    requestId: str
    message: str
    continuationRunId: str | None
    # A request that needs several approvals: the approvals counted now (`recorded`, `already_approved_by_you`).
    approvals: ApprovalCount | None = None
    # When the answer forked the session from an earlier checkpoint: the fork, and where it came from.
    sessionId: str | None = None
    forkedFrom: dict[str, Any] | None = None


class Wait(Schema):
    wait: int = Field(default=0, ge=0, le=waiting.MAX_WAIT, description="seconds to hold until the decision")


@router.get("/requests/{request_id}", response=dict)
def get_request(
    request: ConsoleRequest, request_id: uuid.UUID, held: Query[Wait], response: HttpResponse
) -> dict[str, Any]:
    """One request; `wait=N` holds the answer until the request is decided or N seconds (at most 60) pass (SPEC
    section 12): `decision` is null until then."""
    wire = request_wire(get_request_for(request, request_id, *SHOWN))
    if held.wait and wire["decision"] is None:
        if wire["requestId"] != str(request_id):
            # console.asgi listens for, and reads again, the request the path names: on an external agent's own
            # requestId that may be another tenant's request (approvals.external_wire.request_ids).
            detail = f"A long poll waits on the request's id in Airlock, {wire['requestId']} (its opening's answer)."
            raise ApiError(400, "wait_on_request_id", detail)
        response[waiting.WAIT_HEADER] = str(held.wait)  # console.asgi holds it, without a thread
    return wire


class OpenedResult(Schema):
    requestId: str
    sessionId: str
    runId: str
    status: Literal["pending", "decided"]
    decision: dict[str, Any] | None


@router.post("/agents/{name}/requests", response={200: OpenedResult, 201: OpenedResult, 409: Problem})
def open_external_request(request: ConsoleRequest, name: str, payload: OpenRequest) -> Status[dict[str, Any]]:
    """Open a request of an external agent (SPEC section 12): a remembered rule or a tool that needs no approval
    decides it at once, else it waits in the inbox. `requestId` makes a retry safe: the same id with the same
    body answers the same request (200), with another body 409 `request_conflict`."""
    membership = require_role(request, "operator")
    try:
        opened = open_request(membership, membership.user, name, payload)
    except RequestRefused as refused:
        raise ApiError(refused.status, refused.code, refused.detail, **_errors(refused)) from None
    pending = opened.request
    decided = decision(pending)
    wire = {
        "requestId": str(pending.id),
        "sessionId": pending.session.key,
        "runId": str(pending.run_id),
        "status": "pending" if decided is None else "decided",
        "decision": decided,
    }
    return Status(201 if opened.created else 200, wire)


def _errors(refused: RequestRefused) -> dict[str, Any]:
    if not refused.errors:
        return {}
    return {"errors": [{"field": field, "message": message} for field, message in refused.errors.items()]}


class OneAnswer(Response):
    """An answer to the request the path names (its `requestId` is the path's)."""

    request_id: uuid.UUID | None = None  # type: ignore[assignment]


@router.post("/requests/{request_id}/responses", response=RespondResult)
def answer_one_request(request: ConsoleRequest, request_id: uuid.UUID, payload: OneAnswer) -> dict[str, Any]:
    """Answer one request, hosted or external, as its inbox card does (SPEC section 12); the status says what
    became of the answer."""
    membership = require_role(request, "operator")
    if payload.request_id is not None and payload.request_id != request_id:
        raise ApiError(400, "invalid_request", "The body's requestId is not the path's.")
    try:
        actor = Actor.person(membership.user, Via.API)
        outcome = answer_request(membership, actor, payload.model_copy(update={"request_id": request_id}))
    except PendingRequest.DoesNotExist:
        raise ApiError(404, "request_not_found", f"No request {request_id} in this tenant.") from None
    except ResponseRefused as refused:
        raise ApiError.of(refused) from None
    return outcome.wire()


@router.delete("/requests/{request_id}", response={200: dict, 409: Problem})
def cancel_external_request(request: ConsoleRequest, request_id: uuid.UUID) -> dict[str, Any]:
    """The agent gives up on its request: it closes `cancelled` and leaves every inbox (external requests; the
    member who opened it or an admin). 409 `request_closed` once decided or closed."""
    membership = require_role(request, "operator")
    pending = get_request_for(request, request_id, *SHOWN, "run")
    try:
        cancel_request(membership, membership.user, pending)
    except RequestRefused as refused:
        raise ApiError.of(refused) from None
    return request_wire(get_request_for(request, request_id, *SHOWN))


class ToolOutcome(Schema):
    success: bool
    result: Any = None
    error: str | None = Field(default=None, max_length=5000)


@router.post("/requests/{request_id}/outcome", response={200: dict, 409: Problem})
def report_request_outcome(request: ConsoleRequest, request_id: uuid.UUID, payload: ToolOutcome) -> dict[str, Any]:
    """What the approved tool did (`tool.execution_complete` in the session, the run history and the audit)."""
    membership = require_role(request, "operator")
    pending = get_request_for(request, request_id, *SHOWN, "run")
    try:
        report_outcome(membership, membership.user, pending, payload.success, payload.result, payload.error)
    except RequestRefused as refused:
        raise ApiError.of(refused) from None
    return request_wire(pending)


@router.post("/requests/{request_id}/claim", response={200: dict, 409: Problem})
def claim_request(request: ConsoleRequest, request_id: uuid.UUID) -> dict[str, Any]:
    """Say the caller is handling the request: every open inbox shows who (a signal, not a lock: anyone who
    may answer still can). Claiming a request claimed by someone else takes the claim over."""
    return _claim_change(request, request_id, claim)


@router.delete("/requests/{request_id}/claim", response={200: dict, 409: Problem})
def release_request(request: ConsoleRequest, request_id: uuid.UUID) -> dict[str, Any]:
    """Let the claim go: the one who claimed it or an admin (releasing an unclaimed request changes nothing)."""
    return _claim_change(request, request_id, release)


def _claim_change(
    request: ConsoleRequest, request_id: uuid.UUID, change: Callable[[Membership, PendingRequest], None]
) -> dict[str, Any]:
    """Claim or release the request for the calling operator; its JSON after the change."""
    membership = require_role(request, "operator")
    pending = get_request_for(request, request_id, "agent", "session", "answered_by", "claimed_by")
    try:
        change(membership, pending)
    except ClaimRefused as refused:
        raise ApiError.of(refused) from None
    return request_wire(pending)


@router.post("/runs/{run_id}/responses", response=RespondResult)
def respond_to_request(request: ConsoleRequest, run_id: uuid.UUID, payload: Response) -> dict[str, Any]:
    """Answer one pending request of a run. The status says what became of the answer."""
    membership = require_role(request, "operator")
    try:
        outcome = answer_request(membership, Actor.person(membership.user, Via.API), payload, run_id=run_id)
    except PendingRequest.DoesNotExist:
        get_run_for(request, run_id)  # a run not the tenant's is run_not_found
        raise ApiError(404, "request_not_found", f"The run {run_id} issued no request {payload.request_id}.") from None
    except ResponseRefused as refused:
        raise ApiError.of(refused) from None
    return outcome.wire()


class InterceptionEvent(BaseModel):
    """An AGENT-HOOKS-0.1 interception event (the agent-hooks SDK's JSON form of an `AgentContext`): every member
    is passed on as sent (the policies' emitter checks the envelope)."""

    model_config = ConfigDict(extra="allow")
    interception_point: Literal[POINTS]  # type: ignore[valid-type]


@router.post("/agents/{name}/interceptions", response={200: dict, 409: Problem})
def intercept(request: ConsoleRequest, name: str, payload: InterceptionEvent) -> dict[str, Any]:
    """The verdict of the agent's bound policies (`hooks`) on one interception event, as an agent-hooks
    interceptor answers (SPEC section 12); no policies: allow. An escalation is the caller's to resolve: its
    approval resolver opens a request (`POST /api/agents/{name}/requests`)."""
    membership = require_role(request, "operator")
    try:
        return verdict_for(membership, name, payload.model_dump())
    except RunRejected as rejected:
        raise ApiError.of(rejected) from None
    except PoliciesUnavailable as error:
        raise ApiError(409, "policy_unavailable", str(error)) from None
