"""A continuation: a run at its model-call limit asks whether to go on."""

from typing import Any, Literal

from django import forms

from agents.engine import Answers
from agents.events import EventLog
from agents.models import RunStatus
from agents.payloads import LimitsResponse, Payload, SessionLimitsExhaustedCompleted, SessionLimitsExhaustedRequested
from agents.request_kinds import RequestKind
from approvals.kinds.answer_form import AnswerForm, chosen
from approvals.kinds.base import Kind
from approvals.models import PendingRequest, RequestStatus


class ContinuationForm(AnswerForm):
    decision = forms.ChoiceField(
        choices=[("continue", "Continue"), ("stop", "Stop")], error_messages=chosen("Choose Continue or Stop.")
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors:
            self.give({"approved": data["decision"] == "continue"})
        return data


class Continuation(Kind):
    """A run at its definition's `maxModelCalls` asks whether to go on: `approved` continues with a fresh
    allowance, a denial ends the run `completed` with what it has."""

    name = RequestKind.CONTINUATION
    form = ContinuationForm
    waits = 3
    awaiting = RunStatus.AWAITING_APPROVAL
    fields = frozenset({"approved"})
    required = "approved"
    stored = ("requestId", "approved")
    takes = "A continuation takes `approved` (go on, or stop with what the run has)."
    asks = "reached its model-call limit in"
    decisions = {"continuation-continue": "told to go on", "continuation-stop": "told to stop"}
    keys = {"a": ["continue"], "d": ["stop"]}
    interrupt_reason = "continuation"
    interrupt_message = "{agent} reached its limit of model calls. Go on?"
    cancel_answer = {"approved": False}
    about_call = False

    def glance(self, pending: PendingRequest) -> str:
        return pending.message or super().glance(pending)

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"approved": value} if isinstance(value, bool) else None

    def to_engine(self, pending: PendingRequest, answers: Answers) -> None:
        answers.resume = {"approved": bool((pending.answer or {}).get("approved"))}

    def record_carried(self, pending: PendingRequest, log: EventLog) -> None:
        approved = bool((pending.answer or {}).get("approved"))
        # Going on adds a fresh allowance of the definition's `maxModelCalls` (a model call is one AI credit).
        response = LimitsResponse(action="add", additionalAiCredits=self._limit(pending)) if approved else None
        log.record(
            SessionLimitsExhaustedCompleted(
                requestId=str(pending.id), response=response or LimitsResponse(action="cancel")
            )
        )
        log.record(self.answered(pending))

    @staticmethod
    def _limit(pending: PendingRequest) -> int:
        return int(pending.arguments.get("maxModelCalls") or 0)

    def requested(self, pending: PendingRequest) -> Payload:
        return SessionLimitsExhaustedRequested(
            requestId=str(pending.id),
            maxAiCredits=self._limit(pending),
            usedAiCredits=int(pending.arguments.get("usedModelCalls") or 0),
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return SessionLimitsExhaustedCompleted(requestId=str(pending.id), response=LimitsResponse(action="cancel"))

    def close(self, pending: PendingRequest, answers: Answers, reason: str) -> None:
        # Expired or cancelled: the run stops with what it has. Abandoned (a new message): the message goes on
        # from the history as it stands.
        if pending.status != RequestStatus.ABANDONED:
            answers.resume = {"approved": False}

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        return f"continuation-{_go_on(bool(answer.get('approved')))}", {}


def _go_on(approved: bool) -> Literal["continue", "stop"]:
    return "continue" if approved else "stop"


KIND = Continuation()
