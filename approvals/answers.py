"""Answering a pending request outside a run (the inbox and the respond API), and the continuation.

An answer is stored as a durable fact on its request the moment it is given (a conditional update, so
two operators answering at once get one `accepted` and one `already_resolved`). When every open
request of the session has its answer, the console starts the continuation run itself.
"""

import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from django.utils import timezone
from pydantic import Field, StrictBool

from agents.actions import continue_session
from agents.checkpoints import fork, forked_from, request_copies
from agents.definitions import WireModel
from agents.models import Run, RunStatus, Session
from agents.runs import record_closings
from approvals.kinds import KINDS, AnswerRefused
from approvals.models import PendingRequest, RequestStatus
from approvals.push import notify_request_claimed, notify_requests_closed, notify_requests_opened
from console.models import Membership

Status = Literal[
    "accepted",
    "already_resolved",
    "expired",
    "cancelled",
    "execution_ended",
    "response_type_mismatch",
    "invalid_response",
    "runtime_unavailable",
]


class Response(WireModel):
    """One answer to one request; which fields apply depends on the request's kind."""

    request_id: uuid.UUID
    approved: StrictBool | None = None
    reason: str | None = Field(default=None, max_length=2000)
    remember: StrictBool = False
    remember_arguments_only: StrictBool = False
    override_arguments: dict[str, Any] | None = None
    result: Any = None
    error_message: str | None = Field(default=None, max_length=5000)
    outcome: Literal["completed", "failed", "rejected", "background"] | None = None
    action: Literal["accept", "decline", "cancel"] | None = None
    content: dict[str, Any] | None = None
    # A question's answer in words, a plan's revision guidance; `json`: an answer read as the expected type.
    text: str | None = Field(default=None, max_length=20_000)
    json_value: Any = Field(default=None, alias="json")
    # Where the continuation goes (SPEC section 9): the version it runs, its run id, the checkpoint answered at.
    definition_version: int | None = Field(default=None, ge=1)
    new_run_id: uuid.UUID | None = None
    checkpoint_id: uuid.UUID | None = None


class ResponseRefused(Exception):
    """A well-formed answer that breaks a rule (e.g. `remember` on a denial): a 4xx, nothing stored."""

    def __init__(self, code: str, detail: str, status: int = 400) -> None:
        super().__init__(detail)
        self.code, self.detail, self.status = code, detail, status


@dataclass
class Outcome:
    status: Status
    request_id: str
    message: str
    continuation_run_id: str | None = None
    # An answer given at an earlier checkpoint: the session it forked, and where from (SPEC section 9).
    session_id: str | None = None
    forked_from: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "requestId": self.request_id,
            "message": self.message,
            "continuationRunId": self.continuation_run_id,
            "sessionId": self.session_id,
            "forkedFrom": self.forked_from,
        }


# The fields that carry an answer (the rest say which request and where the continuation goes; `remember`
# is refused by the kinds that take none).
ANSWER_FIELDS = set(Response.model_fields) - {
    "request_id",
    "remember",
    "definition_version",
    "new_run_id",
    "checkpoint_id",
}


def _given(response: Response, name: str) -> bool:
    return bool(getattr(response, name) != Response.model_fields[name].default)


_TERMINAL_STATUS: dict[str, Status] = {
    RequestStatus.EXPIRED: "expired",
    RequestStatus.CANCELLED: "cancelled",
    RequestStatus.ABANDONED: "execution_ended",
}


def _payload(pending: PendingRequest, response: Response) -> dict[str, Any] | Outcome:
    """The stored answer for `pending`, or the outcome that refuses it (raises ResponseRefused for a 400)."""
    kind = KINDS[pending.kind]
    if response.json_value is not None:
        # `json` is the answer read as the kind's type (a boolean for an approval, a result for a client
        # tool, …); given with the kind's own fields, or of no type the kind reads, it is a mismatch.
        read = kind.read_json(response.json_value)
        given = {name for name in ANSWER_FIELDS - {"json_value"} if _given(response, name)}
        if read is None or given:
            return Outcome("response_type_mismatch", str(pending.id), kind.takes)
        response = response.model_copy(update={**read, "json_value": None})
    # A field of another kind would be silently dropped from what the client meant (an `errorMessage`
    # sent with an approval): the answer is for another kind of request.
    foreign = ANSWER_FIELDS - kind.fields
    missing = kind.required is not None and getattr(response, kind.required) is None
    if missing or any(_given(response, name) for name in foreign):
        return Outcome("response_type_mismatch", str(pending.id), kind.takes)
    modes = None
    if response.definition_version is not None:
        version = pending.agent.versions.filter(number=response.definition_version).first()
        if version is None:
            detail = f"The agent {pending.agent.name!r} has no version {response.definition_version}."
            raise ResponseRefused("unknown_version", detail)
        modes = {t.name: t.approval for t in version.definition.tools}
    if response.new_run_id is not None and Run.objects.filter(id=response.new_run_id).exists():
        raise ResponseRefused("run_exists", f"A run {response.new_run_id} exists already.", 409)
    try:
        stored = kind.answer(pending, response.model_dump(mode="json", by_alias=True), modes)
    except AnswerRefused as refused:
        if refused.code == "invalid_content":
            return Outcome("invalid_response", str(pending.id), refused.detail)
        raise ResponseRefused(refused.code, refused.detail) from None
    # Kept with the answer: the continuation, started by whichever answer comes last, honours them.
    if response.definition_version is not None:
        stored["definitionVersion"] = response.definition_version
    if response.new_run_id is not None:
        stored["newRunId"] = str(response.new_run_id)
    return stored


def respond(membership: Membership, user: Any, run_id: uuid.UUID, response: Response, *, via: str) -> Outcome:
    """Answer one request of the run `run_id` (SPEC section 4, "Respond"). Raises PendingRequest.DoesNotExist
    for a request this tenant's run never issued, ResponseRefused for a refused answer."""
    # One query for all an answer reads; the session's conversation (a whole history) is not among it.
    found = PendingRequest.objects.select_related("run__version", "session__agent", "session__tenant", "agent")
    pending = found.defer("session__conversation").get(tenant=membership.tenant, run_id=run_id, id=response.request_id)
    rid = str(pending.id)
    refuse_unless_approver(membership, pending)
    if response.checkpoint_id is not None:
        # At the session's latest checkpoint an answer is like any other; at an earlier one, where the request
        # was pending, it forks the session from there, whatever became of the request since (SPEC section 9).
        checkpoints = pending.session.checkpoints.select_related("session__agent", "run", "version")
        checkpoint = checkpoints.filter(id=response.checkpoint_id).first()
        if checkpoint is None:
            detail = f"The request's session has no checkpoint {response.checkpoint_id}."
            return Outcome("invalid_response", rid, detail)
        if checkpoints.filter(number__gt=checkpoint.number).exists():
            if rid not in checkpoint.open_requests:
                return Outcome("invalid_response", rid, f"The request was not pending at checkpoint {checkpoint.id}.")
            now = timezone.now()
            copies = request_copies(checkpoint, now)
            copy = copies[pending.id]
            payload = _payload(copy, response)
            if isinstance(payload, Outcome):
                return replace(payload, request_id=rid)
            forked = fork(checkpoint, list(copies.values()), copy, payload, user, via, now)
            if forked is None:
                return Outcome("execution_ended", rid, "The request's session or its agent was deleted.")
            notify_requests_opened(forked.waiting)
            continuation = continue_when_complete(user, forked.session)
            return Outcome(
                "accepted",
                str(copy.id),
                f"The answer was stored in a new session, forked at checkpoint {checkpoint.id}.",
                str(continuation.id) if continuation else None,
                session_id=forked.session.key,
                forked_from=forked_from(forked.session),
            )
    if pending.status in _TERMINAL_STATUS:
        why: str = pending.status
        if pending.status == RequestStatus.ABANDONED and pending.agent.deleted_at is not None:
            why = "its agent was deleted"
        elif pending.status == RequestStatus.ABANDONED and pending.session.deleted_at is not None:
            why = "its session was deleted"
        return Outcome(_TERMINAL_STATUS[pending.status], rid, f"The request was closed: {why}.")
    now = timezone.now()
    if pending.expires_at is not None and pending.expires_at <= now and pending.answer is None:
        # Past its deadline but not swept yet: close it now, as the sweep would, and say so.
        expire_due(now)
        return Outcome("expired", rid, "The request's deadline passed before this answer arrived.")
    payload = _payload(pending, response)
    if isinstance(payload, Outcome):
        return payload
    if pending.answer is not None and _lost_with_its_worker(pending):
        detail = (
            "The turn that carried this request's answer was lost with its worker and cannot be resumed by an"
            " answer; send the next turn of the session: the stored answer goes with it."
        )
        return Outcome("runtime_unavailable", rid, detail)
    if pending.answer is not None or pending.status == RequestStatus.ANSWERED:
        return Outcome("already_resolved", rid, "The request was answered before; this answer changed nothing.")
    if not pending.record_answer(payload, user, via, timezone.now()):
        # Another answer won, or the sweep closed the request (expired) since it was read above.
        now_status = PendingRequest.objects.filter(pk=pending.pk).values_list("status", flat=True).first()
        if now_status in _TERMINAL_STATUS:
            return Outcome(_TERMINAL_STATUS[now_status], rid, f"The request was closed meanwhile: {now_status}.")
        return Outcome("already_resolved", rid, "The request was answered meanwhile; this answer changed nothing.")
    notify_requests_closed(pending.tenant_id, [rid])
    continuation = continue_when_complete(user, pending.session)
    return Outcome("accepted", rid, "The answer was stored.", str(continuation.id) if continuation else None)


def _not_an_approver(pending: PendingRequest) -> str:
    return f"The request is for {pending.approvers}: only members of that group and admins answer it."


def refuse_unless_approver(membership: Membership, pending: PendingRequest) -> None:
    """A request routed to a group is answered by its members and admins only (403 `not_an_approver`)."""
    if not pending.answerable_by(membership):
        raise ResponseRefused("not_an_approver", _not_an_approver(pending), 403)


def _lost_with_its_worker(pending: PendingRequest) -> bool:
    """Whether the answer stored on `pending` came back from a continuation whose worker died for good (failed
    `worker_lost`, no attempt left): nothing runs it until the session's next turn."""
    last = pending.session.last_run
    lost = last is not None and last.status == RunStatus.FAILED and (last.error or {}).get("code") == "worker_lost"
    return lost and pending.status == RequestStatus.PENDING and pending.answered_in_id is None


def continue_when_complete(user: Any, session: Session) -> Run | None:
    """Start the continuation run once no open request of the session is left without its answer
    (`agents.actions.continue_session`). `user` is who gave the last answer (None when the system closed the
    last request)."""
    return continue_session(user, session)


def expire_due(now: datetime | None = None) -> list[PendingRequest]:
    """Close every pending, unanswered request whose deadline has passed; start the continuations."""
    now = now or timezone.now()
    due = PendingRequest.objects.open().select_related("session__tenant", "session__agent").filter(expires_at__lte=now)
    expired = []
    for pending in due[:500]:
        if pending.close(RequestStatus.EXPIRED, now):
            expired.append(pending)
    record_closings(expired)
    for tenant_id in {p.tenant_id for p in expired}:
        notify_requests_closed(tenant_id, [str(p.id) for p in expired if p.tenant_id == tenant_id])
    for session in {p.session_id: p.session for p in expired}.values():
        continue_when_complete(None, session)
    return expired


class ClaimRefused(Exception):
    """A claim or a release that cannot be made: a 4xx, nothing changed."""

    def __init__(self, code: str, detail: str, status: int = 409) -> None:
        super().__init__(detail)
        self.code, self.detail, self.status = code, detail, status


def claim(membership: Membership, pending: PendingRequest) -> None:
    """Mark the open request as handled by the member (SPEC section 11) and show it in every open inbox."""
    if not pending.answerable_by(membership):
        raise ClaimRefused("not_an_approver", _not_an_approver(pending), 403)
    if not pending.claim(membership.user, timezone.now()):
        raise ClaimRefused("request_closed", "The request was answered or closed; there is nothing to claim.")
    notify_request_claimed(pending)


def release(membership: Membership, pending: PendingRequest) -> None:
    """Let the claim go: the member who claimed it, or an admin."""
    holder = pending.claimed_by
    if holder is None:
        return
    if holder.pk != membership.user_id and not membership.allows("admin"):
        detail = f"The request is claimed by {holder.username}; only they or an admin can release it."
        raise ClaimRefused("claimed_by_another", detail)
    pending.release()
    notify_request_claimed(pending)
