"""The run routes of the JSON API: start a run (JSON, SSE or queued), history, records, events (SSE: followed
until the run ends), the event schema, cancel."""

import uuid
from typing import Any

from django.http import JsonResponse, StreamingHttpResponse
from ninja import Field, Query, Router

from agents import actions
from agents.api.stream_routes import follow_run, stream_run, wants_sse
from agents.events import event_envelope
from agents.getters import get_run_for
from agents.models import Run, RunStatus
from agents.payloads import event_schema
from agents.prepare import RunRejected
from agents.queries import runs_matching
from agents.run_lifecycle import run_result
from agents.run_requests import RunRequest
from console.api import ApiError, Paging, Problem, page_of, require_role
from console.tenancy import ConsoleRequest

router = Router(tags=["runs"])
EVENT_SCHEMA = event_schema()


def prefers_async(request: ConsoleRequest) -> bool:
    preferences = request.headers.get("Prefer", "").lower().replace(";", ",").split(",")
    return "respond-async" in (p.strip() for p in preferences)


def accepted(run: Run, **linked: Any) -> JsonResponse:
    """The 202 of a queued run: where it and its events are, with what else the route says of it (`linked`). Its
    status says `queued` (SPEC section 4) also when a worker thread of this process took the run on its way in."""
    location = f"/api/runs/{run.id}"
    body = {"runId": str(run.id), "status": RunStatus.QUEUED, "location": location, **linked}
    response = JsonResponse({**body, "eventsLocation": f"{location}/events"}, status=202)
    response["Location"] = location
    response["Preference-Applied"] = "respond-async"
    return response


@router.post("/agents/{name}/runs", response={200: dict, 202: dict, 409: Problem})
def create_run(request: ConsoleRequest, name: str, payload: RunRequest) -> Any:
    """Start a run. `Prefer: respond-async` queues it on its lane (202); `Accept: text/event-stream`
    streams its events; otherwise the result comes when the turn ends."""
    membership = require_role(request, "operator")
    queued = prefers_async(request)
    try:
        started = actions.start_run(membership, request.user, name, payload, queued=queued)
    except RunRejected as rejected:
        raise ApiError.of(rejected) from None
    if queued:
        return accepted(started.run)
    if wants_sse(request):
        response = StreamingHttpResponse(stream_run(started), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    return JsonResponse(actions.run_to_end(started).result())


class RunFilters(Paging):
    agent: str | None = None
    status: RunStatus | None = None
    sessionId: str | None = None
    verdicts: bool | None = Field(default=None, description="Only runs where a policy gave a verdict other than allow.")


@router.get("/runs", response=dict)
def list_runs(request: ConsoleRequest, filters: Query[RunFilters]) -> dict[str, Any]:
    runs = runs_matching(
        Run.objects.select_related("agent", "version", "session__forked_from_session").filter(tenant=request.tenant),
        agent=filters.agent,
        status=filters.status,
        session=filters.sessionId,
        verdicts=filters.verdicts,
    )
    # The id breaks ties between runs created in the same microsecond, so pages never overlap.
    return page_of(runs.order_by("-created_at", "-id"), filters.limit, filters.offset, run_result)


@router.get("/runs/{run_id}", response=dict)
def get_run(request: ConsoleRequest, run_id: uuid.UUID) -> dict[str, Any]:
    return run_result(get_run_for(request, run_id, "agent", "version", "session"))


@router.get("/runs/{run_id}/records", response=dict)
def run_records(request: ConsoleRequest, run_id: uuid.UUID) -> dict[str, Any]:
    """The interception records of the run's policies, in order (SPEC section 8; AGENT-HOOKS-0.1 wire shape)."""
    run = get_run_for(request, run_id)
    return {"items": run.records}


@router.get("/events/schema.json", response=dict)
def events_schema(request: ConsoleRequest) -> dict[str, Any]:
    """The JSON schema of the event envelope and of each event type's `data` (SPEC sections 5 and 10)."""
    return EVENT_SCHEMA


@router.get("/runs/{run_id}/events", response=dict)
def run_events(request: ConsoleRequest, run_id: uuid.UUID) -> Any:
    """The stored events; with `Accept: text/event-stream` they stream, live until the run ends,
    resuming after `Last-Event-ID`."""
    run = get_run_for(request, run_id, "agent", "version", "session")
    if not wants_sse(request):
        return {"items": [event_envelope(e) for e in run.events.all()]}
    after = request.headers.get("Last-Event-ID", "0")
    # str.isdigit() also takes digits int() cannot read, such as "²".
    if not (after.isascii() and after.isdigit()):
        raise ApiError(400, "invalid_last_event_id", "Last-Event-ID must be a sequence number.")
    response = StreamingHttpResponse(follow_run(run.id, int(after)), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    return response


@router.post("/runs/{run_id}/cancel", response={200: dict, 409: Problem})
def cancel_run(request: ConsoleRequest, run_id: uuid.UUID) -> Any:
    membership = require_role(request, "operator")
    run = get_run_for(request, run_id, "agent", "version", "session")
    try:
        status = actions.do_cancel_run(membership, request.user, run)
    except RunRejected as rejected:
        raise ApiError.of(rejected) from None
    if status is None:
        detail = f"The run has finished ({run.status}) and waits on nothing; there is nothing to cancel."
        raise ApiError(409, "run_finished", detail)
    return {"runId": str(run.id), "status": status}
