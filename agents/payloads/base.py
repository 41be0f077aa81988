"""What every event's payload is built from: `EventType` (the only place an event type is spelled, with
`EXTENSION_TYPES`, Airlock's own, and `TURN_ENDS`), `Payload` and its flags, `optional()`."""

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field


class EventType(StrEnum):
    RUN_STARTED = "run.started"
    RUN_AWAITING = "run.awaiting"
    RUN_RETRYING = "run.retrying"
    RUN_COMPLETED = "run.completed"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    RUN_BLOCKED = "run.blocked"
    POLICY_VERDICT = "policy.verdict"
    USER_MESSAGE = "user.message"
    DOCUMENT_ATTACHED = "document.attached"
    ASSISTANT_TURN_START = "assistant.turn_start"
    ASSISTANT_TURN_END = "assistant.turn_end"
    ASSISTANT_MESSAGE = "assistant.message"
    ASSISTANT_MESSAGE_DELTA = "assistant.message_delta"
    ASSISTANT_REASONING = "assistant.reasoning"
    ASSISTANT_REASONING_DELTA = "assistant.reasoning_delta"
    ASSISTANT_USAGE = "assistant.usage"
    TOOL_EXECUTION_START = "tool.execution_start"
    TOOL_EXECUTION_PROGRESS = "tool.execution_progress"
    TOOL_EXECUTION_PARTIAL_RESULT = "tool.execution_partial_result"
    TOOL_EXECUTION_COMPLETE = "tool.execution_complete"
    PERMISSION_REQUESTED = "permission.requested"
    PERMISSION_COMPLETED = "permission.completed"
    EXTERNAL_TOOL_REQUESTED = "external_tool.requested"
    EXTERNAL_TOOL_COMPLETED = "external_tool.completed"
    ELICITATION_REQUESTED = "elicitation.requested"
    ELICITATION_COMPLETED = "elicitation.completed"
    REQUEST_ANSWERED = "request.answered"
    REQUEST_TERMINATED = "request.terminated"
    REQUEST_APPROVAL_RECORDED = "request.approval_recorded"
    USER_INPUT_REQUESTED = "user_input.requested"
    USER_INPUT_COMPLETED = "user_input.completed"
    EXIT_PLAN_MODE_REQUESTED = "exit_plan_mode.requested"
    EXIT_PLAN_MODE_COMPLETED = "exit_plan_mode.completed"
    SESSION_LIMITS_EXHAUSTED_REQUESTED = "session_limits_exhausted.requested"
    SESSION_LIMITS_EXHAUSTED_COMPLETED = "session_limits_exhausted.completed"
    SESSION_IDLE = "session.idle"
    SESSION_TITLE_CHANGED = "session.title_changed"
    SESSION_ERROR = "session.error"
    ABORT = "abort"
    SUBAGENT_STARTED = "subagent.started"
    SUBAGENT_COMPLETED = "subagent.completed"
    SUBAGENT_FAILED = "subagent.failed"


# Airlock's own event types (SPEC section 10): the Copilot SDK has no type for these moments. docs/events.md lists
# them with every other extension; every other type is the SDK's, field for field.
EXTENSION_TYPES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.RUN_AWAITING,
        EventType.RUN_RETRYING,
        EventType.RUN_COMPLETED,
        EventType.RUN_FAILED,
        EventType.RUN_CANCELLED,
        EventType.RUN_BLOCKED,
        EventType.POLICY_VERDICT,
        EventType.DOCUMENT_ATTACHED,
        EventType.REQUEST_ANSWERED,
        EventType.REQUEST_TERMINATED,
        EventType.REQUEST_APPROVAL_RECORDED,
    }
)

# What a run's log says when its turn ends (completed, failed, cancelled, blocked or awaiting_*): on the session
# stream each is followed by `session.idle`.
TURN_ENDS = frozenset(
    {
        EventType.RUN_COMPLETED,
        EventType.RUN_FAILED,
        EventType.RUN_CANCELLED,
        EventType.RUN_BLOCKED,
        EventType.RUN_AWAITING,
    }
)


def _absent(value: Any) -> bool:
    return value is None


def optional(**kwargs: Any) -> Any:
    """A field that is left out when None (the SDK's optional fields are absent, never null)."""
    return Field(default=None, exclude_if=_absent, **kwargs)


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Payload(Shape):
    """The `data` of one event type. `type` names it; `ephemeral` is the envelope's flag, the SDK's for its types
    (SPEC section 10); `stored` says whether Airlock keeps it in the run's history: the deltas, progress and the
    stream's own `session.idle` / `session.title_changed` are never stored, while the SDK's ephemeral requests
    and answers (`user_input.*`, `elicitation.*`, `exit_plan_mode.*`, `session_limits_exhausted.*`) and
    `assistant.usage` are kept for the audit and replayed on resume, still flagged ephemeral."""

    type: ClassVar[EventType]
    ephemeral: ClassVar[bool] = False
    stored: ClassVar[bool] = True

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Transient(Payload):
    """An ephemeral event that only streams."""

    ephemeral = True
    stored = False


class Kept(Payload):
    """An event the SDK calls ephemeral that Airlock keeps in the run's history (the audit needs it)."""

    ephemeral = True
