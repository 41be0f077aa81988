"""The session routes of the JSON API: state, checkpoints, events (SSE: the session followed live), deletion."""

from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse
from ninja import Field, Query, Router, Schema, Status

from agents import actions, checkpoints
from agents.api.stream_routes import (
    SESSION_STREAMS,
    STREAMS_RETRY_AFTER_SECONDS,
    follow_session,
    session_position,
    wants_sse,
)
from agents.events import event_envelope
from agents.models import Event, Session
from agents.prepare import RunRejected
from approvals.models import RequestStatus
from console.api import ApiError, Paging, Problem, page_of, problem, require_role
from console.sql import Prepared
from console.tenancy import ConsoleRequest

router = Router(tags=["runs"])


# A live session by its key, its agent joined in, as the routes below read it: compiled once (issue 56: a stream's
# open reads it), and without its history (`conversation`), which none of them shows. One at most
# (`session_key_unique_live`).
_LIVE = Prepared(
    lambda tenant, key: (
        Session.objects.live().defer("conversation").select_related("agent").filter(tenant=tenant, key=key)
    ),
    tenant=int,
    key=str,
)


def _session_for(request: ConsoleRequest, session_id: str) -> Session:
    """The caller's live session `session_id`, else 404 `session_not_found`."""
    session = _LIVE.first(tenant=request.tenant.pk, key=session_id)
    if session is None:
        raise ApiError(404, "session_not_found", f"No session {session_id!r} in this tenant.")
    return session


class SessionState(Schema):
    sessionId: str
    agent: str
    lastRunId: str | None
    pendingRequests: list[dict[str, Any]]
    forkedFrom: dict[str, Any] | None = Field(
        default=None, description="A fork's `{sessionId, checkpointId}` (SPEC section 9); absent for other sessions."
    )


@router.get("/sessions/{session_id}/state", response=SessionState, exclude_unset=True)
def session_state(request: ConsoleRequest, session_id: str) -> dict[str, Any]:
    session = _session_for(request, session_id)
    pending = session.requests.filter(status=RequestStatus.PENDING)
    forked_from = checkpoints.forked_from(session)
    return {
        "sessionId": session.key,
        "agent": session.agent.name,
        "lastRunId": str(session.last_run_id) if session.last_run_id else None,
        "pendingRequests": [p.wire() for p in pending],
        **({"forkedFrom": forked_from} if forked_from is not None else {}),
    }


@router.get("/sessions/{session_id}/checkpoints", response=dict)
def session_checkpoints(request: ConsoleRequest, session_id: str, paging: Query[Paging]) -> dict[str, Any]:
    """The session's checkpoints, newest first: its state after each of its runs ended (SPEC section 9). An
    answer given at an earlier one forks the session (`checkpointId` on the respond route)."""
    session = _session_for(request, session_id)
    return page_of(checkpoints.checkpoints_of(session), paging.limit, paging.offset, checkpoints.wire)


@router.get("/sessions/{session_id}/events", response={200: dict, 429: Problem})
def session_events(request: ConsoleRequest, session_id: str) -> Any:
    """The stored events of every run of the session (a fork's own runs only): runs in the order they were
    created, each run's events in sequence. With `Accept: text/event-stream` they stream and the stream
    follows the session live: a later run (an answer's continuation) comes on the same connection, each turn
    that ends is followed by an ephemeral `session.idle` frame without an id (`{"aborted": true}` when the
    turn was cancelled), the session's first message by an ephemeral `session.title_changed` (`{"title"}`:
    its first line), and the stream ends once the session is deleted and its last turn has ended.

    A frame's id is `<run>.<sequence>`: the index of the event's run among the session's runs (0 for the
    first, in creation order) and the event's sequence in that run. Frames come in the order of these pairs
    of integers; `Last-Event-ID` resumes after one (400 `invalid_last_event_id` for anything else).

    A user holds at most `SESSION_STREAMS_PER_USER` streams open at once (per console process): the next is
    429 `too_many_streams`, with `Retry-After`."""
    session = _session_for(request, session_id)
    if not wants_sse(request):
        events = Event.objects.filter(run__session=session).order_by("run__created_at", "run_id", "sequence")
        return {"items": [event_envelope(e) for e in events]}
    after = session_position(session, request.headers.get("Last-Event-ID"))
    slot = SESSION_STREAMS.take(request.membership.user_id)
    if slot is None:
        held = settings.SESSION_STREAMS_PER_USER
        detail = f"You have {held} session streams open, the most one user may; close one and try again."
        refused = problem(429, "too_many_streams", detail)
        refused["Retry-After"] = str(STREAMS_RETRY_AFTER_SECONDS)
        return refused
    response = StreamingHttpResponse(follow_session(session.pk, after, slot), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    return response


@router.delete("/sessions/{session_id}", response={204: None})
def delete_session(request: ConsoleRequest, session_id: str) -> Status[None]:
    """Delete a session's future (SPEC section 9): its turns are cancelled, its open requests close
    `abandoned`, and a later run with this id starts a new session. Its finished runs stay."""
    membership = require_role(request, "operator")
    session = _session_for(request, session_id)
    try:
        deleted = actions.do_delete_session(membership, session)
    except RunRejected as rejected:
        raise ApiError.of(rejected) from None
    if not deleted:
        raise ApiError(404, "session_not_found", f"No session {session_id!r} in this tenant.")
    return Status(204, None)
