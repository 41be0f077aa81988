"""What an answer given outside a run is on the wire (`Response`, `Outcome`, `ResponseRefused`). Answering
is `approvals.actions.answer_request` (a console answer is held first: `approvals.actions.hold_answers`); the
continuation it starts once every open request of the session has its answer is `agents.actions.continue_session`.
"""

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt

from agents.definitions import WireModel
from agents.rule_matching import Remember, RememberedUntil
from console.problems import Refused

Status = Literal[
    "accepted",
    "recorded",
    "already_approved_by_you",
    "already_resolved",
    "expired",
    "cancelled",
    "execution_ended",
    "response_type_mismatch",
    "invalid_response",
    "runtime_unavailable",
]

# The statuses of an answer that was taken: it decided the request, or counted toward its quorum (SPEC section 14).
TAKEN = ("accepted", "recorded")


class Response(WireModel):
    """One answer to one request; which fields apply depends on the request's kind."""

    request_id: uuid.UUID
    approved: StrictBool | None = None
    reason: str | None = Field(default=None, max_length=2000)
    remember: Remember = None
    remember_arguments_only: StrictBool = False
    override_arguments: dict[str, Any] | None = None
    # Until when the rule a remembering answer makes holds (SPEC section 13).
    expires_at: RememberedUntil = None
    result: Any = None
    error_message: str | None = Field(default=None, max_length=5000)
    outcome: Literal["completed", "failed", "rejected", "background"] | None = None
    action: Literal["accept", "decline", "cancel"] | None = None
    content: dict[str, Any] | None = None
    # A question's answer in words, a plan's revision guidance; `json`: an answer read as the expected type.
    text: str | None = Field(default=None, max_length=20_000)
    json_value: Any = Field(default=None, alias="json")
    # Where the continuation goes (SPEC section 9): the version it runs, its run id, the checkpoint answered at.
    definition_version: StrictInt | None = Field(default=None, ge=1)  # as a run request's: `true` is not 1
    new_run_id: uuid.UUID | None = None
    checkpoint_id: uuid.UUID | None = None


class ResponseRefused(Refused):
    """A well-formed answer that breaks a rule (e.g. `remember` on a denial): a 4xx, nothing stored."""


@dataclass
class Outcome:
    status: Status
    request_id: str
    message: str
    continuation_run_id: str | None = None
    # An answer given at an earlier checkpoint: the session it forked, and where from (SPEC section 9).
    session_id: str | None = None
    forked_from: dict[str, Any] | None = None
    # A request that needs several approvals (SPEC section 14): {given, required, by}.
    approvals: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "approvals": self.approvals,
            "status": self.status,
            "requestId": self.request_id,
            "message": self.message,
            "continuationRunId": self.continuation_run_id,
            "sessionId": self.session_id,
            "forkedFrom": self.forked_from,
        }
