"""A question: `ask_user`, answered in words."""

from collections.abc import Mapping
from typing import Any

from django import forms

from agents.engine import Answers
from agents.events import EventLog
from agents.models import AgentVersion, RunStatus
from agents.payloads import Payload, UserInputCompleted, UserInputRequested
from agents.request_kinds import RequestKind
from approvals.external_wire import AskedTool, OpenRequest, invalid
from approvals.kinds.answer_form import AnswerForm
from approvals.kinds.base import AnswerRefused, Kind
from approvals.models import PendingRequest


class QuestionForm(AnswerForm):
    """A question's answer: a choice's button (`choice`) or the words typed (`text`)."""

    choice = forms.CharField(required=False)
    text = forms.CharField(required=False, strip=True)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        answer = data.get("choice") or data.get("text")
        if not answer:
            self.refuse("text", "Choose an answer or write one.", "Choose an answer or write one.")
        else:
            self.give({"text": answer})
        return data


class Question(Kind):
    """`ask_user(question, choices?, allow_freeform?)`: answered in words (`text`), one of the choices unless
    free text is allowed (by default: without choices only). The model reads `ask_user: <text>`."""

    name = RequestKind.QUESTION
    form = QuestionForm
    waits = 5
    awaiting = RunStatus.AWAITING_INPUT
    fields = frozenset({"text"})
    required = "text"
    stored = ("requestId", "text")
    takes = "A question takes `text` (one of its choices unless free text is allowed)."
    asks = "asks through"
    decisions = {"question-answered": "question answered"}
    keys = {"a": ["answer"], "e": "text", "needs": "text", "enter": {"text": "answer"}}
    interrupt_reason = "question"
    interrupt_message = "{agent} asks a question."

    def glance(self, pending: PendingRequest) -> str:
        return pending.message or super().glance(pending)

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        super().check(pending, wire, modes)
        choices = pending.choices
        if choices and not pending.allows_freeform and wire.get("text") not in choices:
            raise AnswerRefused("invalid_content", f"Answer with one of the choices: {', '.join(choices)}.")
        if not (wire.get("text") or "").strip():
            raise AnswerRefused("invalid_content", "The answer is empty.")

    def narrowed(self, pending: PendingRequest, properties: dict[str, Any]) -> dict[str, Any]:
        """Words, one of its choices unless free text is allowed."""
        text = {**properties["text"], "minLength": 1}
        if pending.choices and not pending.allows_freeform:
            text["enum"] = list(pending.choices)
        return {**properties, "text": text}

    def interrupt_facts(self, pending: PendingRequest) -> dict[str, Any]:
        return {"choices": list(pending.choices)} if pending.choices else {}

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"text": value} if isinstance(value, str) else None

    def external_fields(self, version: AgentVersion, body: OpenRequest, asked: AskedTool | None) -> dict[str, Any]:
        """Asked as `ask_user` asks it."""
        if body.question is None:
            raise invalid("question", "a question says what it asks")
        arguments = {"question": body.question, "choices": body.choices or [], "allow_freeform": body.allow_freeform}
        return {"tool_name": "ask_user", "arguments": arguments, "message": body.question}

    def to_engine(self, pending: PendingRequest, answers: Answers) -> None:
        answers.answer_person(pending.call_id, (pending.answer or {}).get("text") or "")

    def record_carried(self, pending: PendingRequest, log: EventLog) -> None:
        text = (pending.answer or {}).get("text") or ""
        freeform = text not in pending.choices
        log.record(UserInputCompleted(requestId=str(pending.id), answer=text, wasFreeform=freeform))
        log.record(self.answered(pending))

    def requested(self, pending: PendingRequest) -> Payload:
        return UserInputRequested(
            requestId=str(pending.id),
            question=pending.message,
            choices=pending.choices or None,
            allowFreeform=pending.allows_freeform,
            toolCallId=pending.call_id,
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return UserInputCompleted(requestId=str(pending.id))

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        return "question-answered", {"content": answer.get("text")}


KIND = Question()
