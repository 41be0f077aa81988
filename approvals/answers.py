"""What an answer given outside a run is on the wire (`Response`, `Outcome`, `ResponseRefused`), and the
continuation: when every open request of the session has its answer, the console starts the continuation
run itself. Answering is `approvals.actions.answer_request` (and `answer_many`).
"""

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from django.db import IntegrityError
from pydantic import Field, StrictBool

from agents.definitions import WireModel
from agents.models import Run, Session
from agents.prepare import RunRejected, RunRequest, live_version, prepare_run
from agents.queue import start_queued
from approvals.models import RequestStatus

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


def continue_when_complete(user: Any, session: Session) -> Run | None:
    """Start the continuation run once no open request of the session is left without its answer.
    `user` is who gave the last answer (None when the system closed the last request)."""
    # The answers not carried yet, in one query: one missing means a request still waits.
    stored = list(
        session.requests.filter(status=RequestStatus.PENDING, answered_in=None).values_list("answer", flat=True)
    )
    if any(answer is None for answer in stored):
        return None
    # The continuation runs the version that asked unless an answer named another (SPEC section 9), on its
    # lane (its parameters and culture repeat as well), through the queue: the answer returns at once.
    runs = Run.objects.select_related("version")
    asked = runs.filter(pk=session.last_run_id).first() if session.last_run_id else None
    given = [answer for answer in stored if isinstance(answer, dict)]
    chosen_version = next((a["definitionVersion"] for a in given if a.get("definitionVersion")), None)
    chosen_id = next((a["newRunId"] for a in given if a.get("newRunId")), None)
    try:
        request = RunRequest(
            session_id=session.key,
            definition_version=chosen_version or (asked.version.number if asked else None),
            lane=asked.lane if asked else None,
        )
        if chosen_version is not None:
            version = live_version(session.tenant, session.agent.name, chosen_version)
        else:
            version = asked.version if asked else live_version(session.tenant, session.agent.name, None)
        version.agent = session.agent
        prepared = prepare_run(session.tenant, version, request)
        prepared.run_id = uuid.UUID(chosen_id) if chosen_id else None
        try:
            started = start_queued(prepared, user)
        except IntegrityError:  # the chosen id was taken since the answer was checked: a fresh one
            prepared.run_id = None
            started = start_queued(prepared, user)
    except RunRejected:
        # Another answer started the continuation at the same moment (the session is busy), or the
        # answers were consumed by a run request meanwhile: either way the turn is on its way.
        return None
    return started.run
