"""A client-tool request: a call the client runs, answered with its result, its error, its refusal, or word
that it runs in the background."""

import json
from collections.abc import Mapping
from typing import Any

from django import forms

from agents.engine import Answers
from agents.events import EventLog
from agents.models import RunStatus
from agents.payloads import ExternalToolCompleted, ExternalToolRequested, Payload
from agents.request_kinds import RequestKind
from approvals.kinds.answer_form import AnswerForm
from approvals.kinds.base import AnswerRefused, Kind
from approvals.models import PendingRequest


class ClientToolForm(AnswerForm):
    # "error" sends the error message, "reject" it as the client's refusal, "background" says it runs on; any
    # other value sends the result.
    decision = forms.CharField(required=False)
    result = forms.CharField(required=False)  # JSON, or plain text
    error_message = forms.CharField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        if data["decision"] == "background":
            self.give({"outcome": "background"})
        elif data["decision"] in ("error", "reject"):
            outcome = "failed" if data["decision"] == "error" else "rejected"
            if data["error_message"]:
                self.give({"outcome": outcome, "errorMessage": data["error_message"]})
            else:
                said = "Write the error message." if outcome == "failed" else "Write why the client refuses."
                self.refuse("error_message", said, said)
        elif not data["result"]:
            self.refuse("result", "Give the result (JSON or text).", "Give the tool's result.")
        else:
            try:
                self.give({"result": json.loads(data["result"])})
            except json.JSONDecodeError:
                self.give({"result": data["result"]})  # plain text is a result too
        return data


class ClientToolKind(Kind):
    name = RequestKind.CLIENT_TOOL
    form = ClientToolForm
    waits = 6
    awaiting = RunStatus.AWAITING_TOOL_RESULT
    fields = frozenset({"result", "error_message", "outcome"})
    stored = ("callId", "outcome", "result", "errorMessage")
    takes = (
        "A client-tool request takes `result` (outcome `completed`), `errorMessage` (outcome `failed`, or"
        " `rejected` with the client's reason) or outcome `background`."
    )
    asks = "asks the client to run"
    decisions = {
        "tool-result": "tool result",
        "tool-error": "tool error",
        "tool-rejected": "refused by the client",
        "tool-background": "running in the background on the client",
    }
    keys = {
        "a": ["result"],
        "d": "error_message",
        "e": "result",
        "needs": "result",
        "enter": {"error_message": "error"},
    }
    # No `interrupt_reason`: an AG-UI client answers the call with a tool message, as any frontend tool's.
    audit_filters = {"tool_result": {}}

    def done(self, pending: PendingRequest, given: Mapping[str, Any]) -> str:
        return f"Sent the {'error' if given.get('errorMessage') else 'result'} of {pending.tool_name}"

    def tool_description(self, pending: PendingRequest) -> str:
        """The client tool's, from its definition."""
        definition = pending.run.version.definition
        return next((t.description for t in definition.client_tools if t.name == pending.tool_name), "")

    @staticmethod
    def outcome(answer: Mapping[str, Any]) -> str:
        """completed | failed | rejected | background; without one, an error message means `failed`."""
        return answer.get("outcome") or ("failed" if answer.get("errorMessage") else "completed")

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        super().check(pending, wire, modes)
        outcome = self.outcome(wire)
        if outcome in ("failed", "rejected") and not wire.get("errorMessage"):
            raise AnswerRefused("invalid_content", f"Outcome {outcome} needs an `errorMessage` (the reason).")
        if outcome in ("completed", "background") and wire.get("errorMessage"):
            raise AnswerRefused("invalid_content", f"Outcome {outcome} takes no `errorMessage`.")
        if outcome != "completed" and wire.get("result") is not None:
            raise AnswerRefused("invalid_content", f"Outcome {outcome} takes no `result`.")

    def answer(
        self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        return {**super().answer(pending, wire, modes), "outcome": self.outcome(wire)}

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"result": value}

    def parameters(self, pending: PendingRequest) -> dict[str, Any] | None:
        """The client tool's, from its definition."""
        definition = pending.run.version.definition
        return next((t.parameters for t in definition.client_tools if t.name == pending.tool_name), None)

    def to_engine(self, pending: PendingRequest, answers: Answers) -> None:
        answer = pending.answer or {}
        outcome = self.outcome(answer)
        if outcome == "failed":
            answers.fail(pending.call_id, answer["errorMessage"])
        elif outcome == "rejected":
            answers.reject(pending.call_id, answer["errorMessage"])
        elif outcome == "background":
            answers.background(pending.call_id)
        else:
            answers.result(pending.call_id, answer.get("result"))

    def record_carried(self, pending: PendingRequest, log: EventLog) -> None:
        outcome = self.outcome(pending.answer or {})
        # What the client returned is the call's `tool.execution_complete`, in the turn it goes on in.
        log.record(ExternalToolCompleted(requestId=str(pending.id)))
        log.record(self.answered(pending, outcome=outcome))

    def requested(self, pending: PendingRequest) -> Payload:
        return ExternalToolRequested(
            requestId=str(pending.id),
            sessionId=pending.session.key if pending.session is not None else "",
            toolCallId=pending.call_id,
            toolName=pending.tool_name,
            arguments=pending.arguments,
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return ExternalToolCompleted(requestId=str(pending.id))

    def close(self, pending: PendingRequest, answers: Answers, reason: str) -> None:
        answers.fail(pending.call_id, reason)

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        decision = {"failed": "tool-error", "completed": "tool-result"}.get(self.outcome(answer))
        return decision or f"tool-{self.outcome(answer)}", {
            "result": answer.get("result"),
            "error_message": answer.get("errorMessage"),
        }


KIND = ClientToolKind()
