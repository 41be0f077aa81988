"""The inbox routes of the JSON API: pending requests and answering them."""

import uuid
from collections.abc import Callable
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema
from pydantic import Field

from agents.definitions import UnknownGroup
from agents.getters import get_run_for
from approvals.actions import ClaimRefused, answer_request, claim, release
from approvals.answers import Response, ResponseRefused
from approvals.getters import get_request_for
from approvals.models import PendingRequest, PendingRequestQuerySet, RequestKind
from console.api import ApiError, Paging, Problem, api, page_of, problem, require_role
from console.models import Membership
from console.tenancy import ConsoleRequest

router = Router(tags=["requests"])


@api.exception_handler(UnknownGroup)
def _unknown_group(request: HttpRequest, exc: UnknownGroup) -> HttpResponse:
    errors = [{"field": field, "message": message} for field, message in exc.errors.items()]
    detail = "The definition routes requests to groups this tenant does not have (manage.py create_group)."
    return problem(400, exc.code, detail, errors=errors)


def request_wire(pending: PendingRequest) -> dict[str, Any]:
    return {
        **pending.wire(),
        "status": pending.status,
        "answered": pending.answer is not None,
        "agent": pending.agent.name,
        "runId": str(pending.run_id),
        "sessionId": pending.session.key,
        "openedAt": pending.opened_at.isoformat(),
        "closedAt": pending.closed_at.isoformat() if pending.closed_at else None,
        "answer": pending.answer,
        "answeredBy": pending.answered_by.username if pending.answered_by else None,
        "answeredAt": pending.answered_at.isoformat() if pending.answered_at else None,
        "claimedBy": pending.claimed_by.username if pending.claimed_by else None,
        "claimedAt": pending.claimed_at.isoformat() if pending.claimed_at else None,
        "approvers": pending.approvers or None,
    }


class RequestFilters(Paging):
    status: Literal["pending", "answered", "expired", "cancelled", "abandoned"] | None = "pending"
    agent: str | None = None
    kind: RequestKind | None = None
    tool: str | None = None
    # `for=me`: only what the caller may answer (its role, and the groups requests are routed to).
    for_: Literal["me"] | None = Field(default=None, alias="for")


def _requests(request: ConsoleRequest) -> PendingRequestQuerySet:
    tenant = request.tenant
    return PendingRequest.objects.select_related("agent", "session", "answered_by", "claimed_by").filter(tenant=tenant)


@router.get("/requests", response=dict)
def list_requests(request: ConsoleRequest, filters: Query[RequestFilters]) -> dict[str, Any]:
    """The inbox: `status=pending` (the default) lists the requests still waiting for an answer; `for=me`
    those the caller may answer."""
    requests = _requests(request).matching(
        status=filters.status, agent=filters.agent, kind=filters.kind, tool=filters.tool
    )
    if filters.for_ == "me":
        requests = requests.answerable_by(request.membership)
    return page_of(requests.order_by("opened_at", "id"), filters.limit, filters.offset, request_wire)


@router.get("/requests/{request_id}", response=dict)
def get_request(request: ConsoleRequest, request_id: uuid.UUID) -> dict[str, Any]:
    return request_wire(get_request_for(request, request_id, "agent", "session", "answered_by", "claimed_by"))


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
        raise ApiError(refused.status, refused.code, refused.detail) from None
    return request_wire(pending)


class RespondResult(Schema):
    status: str
    requestId: str
    message: str
    continuationRunId: str | None
    # When the answer forked the session from an earlier checkpoint: the fork, and where it came from.
    sessionId: str | None = None
    forkedFrom: dict[str, Any] | None = None


@router.post("/runs/{run_id}/responses", response=RespondResult)
def respond_to_request(request: ConsoleRequest, run_id: uuid.UUID, payload: Response) -> dict[str, Any]:
    """Answer one pending request of a run. The status says what became of the answer."""
    membership = require_role(request, "operator")
    try:
        outcome = answer_request(membership, membership.user, run_id, payload, via="api")
    except PendingRequest.DoesNotExist:
        get_run_for(request, run_id)  # a run not the tenant's is run_not_found
        raise ApiError(404, "request_not_found", f"The run {run_id} issued no request {payload.request_id}.") from None
    except ResponseRefused as refused:
        raise ApiError(refused.status, refused.code, refused.detail) from None
    return outcome.wire()
