"""A plan: `propose_plan`, approved or sent back with what to revise."""

from collections.abc import Mapping
from typing import Any

from django import forms

from agents.engine import Answers
from agents.events import EventLog
from agents.models import AgentVersion, RunStatus
from agents.payloads import PLAN_ACTIONS, ExitPlanModeCompleted, ExitPlanModeRequested, Payload
from agents.request_kinds import RequestKind
from agents.server_tools import STEP_MAX, STEPS_MAX
from approvals.external_wire import AskedTool, OpenRequest, TooLarge, invalid, too_large
from approvals.kinds.answer_form import AnswerForm, chosen
from approvals.kinds.base import CANCELLED_REASON, AnswerRefused, Kind
from approvals.models import PendingRequest


class PlanForm(AnswerForm):
    """A plan: approve it, or send it back with what to revise."""

    decision = forms.ChoiceField(
        choices=[("approve", "Approve"), ("revise", "Revise")], error_messages=chosen("Choose Approve or Revise.")
    )
    text = forms.CharField(required=False, strip=True)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        if data["decision"] == "approve":
            self.give({"approved": True})
        elif not data["text"]:
            self.refuse("text", "Say what to revise.", "Say what to revise.")
        else:
            self.give({"approved": False, "text": data["text"]})
        return data


class Plan(Kind):
    """`propose_plan(steps)`: approved (the model reads `propose_plan: approved`) or sent back with revision
    guidance in `text` (`propose_plan: revise: <text>`)."""

    name = RequestKind.PLAN
    form = PlanForm
    waits = 2
    awaiting = RunStatus.AWAITING_APPROVAL
    fields = frozenset({"approved", "text"})
    required = "approved"
    stored = ("requestId", "approved", "text")
    takes = "A plan takes `approved` (and, to send it back, `text` with what to revise)."
    asks = "proposes a plan through"
    decisions = {"plan-approved": "plan approved", "plan-revised": "plan sent back"}
    keys = {"a": ["approve"], "d": "text", "e": "text", "enter": {"text": "revise"}}
    interrupt_reason = "plan"
    interrupt_message = "{agent} proposes a plan. Approve it, or send it back with what to revise?"
    cancel_answer = {"approved": False, "text": CANCELLED_REASON}

    def glance(self, pending: PendingRequest) -> str:
        """The plan's first step."""
        arguments = pending.arguments if isinstance(pending.arguments, dict) else {}
        steps = arguments.get("steps") or []
        return str(steps[0]) if steps else ""

    def interrupt_facts(self, pending: PendingRequest) -> dict[str, Any]:
        return {"arguments": pending.arguments} if pending.arguments else {}

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        super().check(pending, wire, modes)
        if not wire.get("approved") and not (wire.get("text") or "").strip():
            raise AnswerRefused("invalid_content", "Say what to revise (`text`) when sending a plan back.")

    def read_json(self, value: Any) -> dict[str, Any] | None:
        if isinstance(value, bool):
            return {"approved": value}
        return {"approved": False, "text": value} if isinstance(value, str) else None

    def external_fields(self, version: AgentVersion, body: OpenRequest, asked: AskedTool | None) -> dict[str, Any]:
        """Its steps, the lines of `planContent` that are not blank, under `propose_plan`'s limits."""
        if body.plan_content is None:
            raise invalid("planContent", "a plan says what it plans")
        steps = [line.strip() for line in body.plan_content.splitlines() if line.strip()]
        if len(steps) > STEPS_MAX:
            message = f"has {len(steps)} steps (lines that are not blank), over the limit of {STEPS_MAX}"
            raise too_large(TooLarge(400, "planContent", message))
        longest = max(steps, key=len, default="")
        if len(longest) > STEP_MAX:
            message = f"has a step of {len(longest)} characters, over the limit of {STEP_MAX}"
            raise too_large(TooLarge(400, "planContent", message))
        arguments = {"steps": steps, "summary": body.summary, "planContent": body.plan_content}
        return {"tool_name": "propose_plan", "arguments": arguments}

    def to_engine(self, pending: PendingRequest, answers: Answers) -> None:
        answer = pending.answer or {}
        approved = bool(answer.get("approved"))
        answers.answer_person(pending.call_id, "approved" if approved else f"revise: {answer.get('text') or ''}")

    def record_carried(self, pending: PendingRequest, log: EventLog) -> None:
        answer = pending.answer or {}
        approved = bool(answer.get("approved"))
        completed = ExitPlanModeCompleted(requestId=str(pending.id), approved=approved)
        if approved:
            completed.selectedAction = PLAN_ACTIONS[0]
        else:  # sent back: what to revise
            completed.feedback = answer.get("text") or None
        log.record(completed)
        log.record(self.answered(pending))

    def requested(self, pending: PendingRequest) -> Payload:
        steps = [str(step) for step in pending.arguments.get("steps") or []]
        # An external agent's plan keeps its own words (SPEC section 12); `propose_plan`'s is its steps.
        summary = pending.arguments.get("summary") or f"A plan of {len(steps)} step{'s' if len(steps) != 1 else ''}"
        content = pending.arguments.get("planContent") or "\n".join(f"{n}. {step}" for n, step in enumerate(steps, 1))
        return ExitPlanModeRequested(
            requestId=str(pending.id),
            summary=summary,
            planContent=content,
            actions=PLAN_ACTIONS,
            recommendedAction=PLAN_ACTIONS[0],
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return ExitPlanModeCompleted(requestId=str(pending.id))

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        if answer.get("approved"):
            return "plan-approved", {}
        return "plan-revised", {"content": answer.get("text")}


KIND = Plan()
