"""The `data` of every event type (SPEC sections 5 and 10), one pydantic model each: the Copilot SDK's session
event shapes field for field (camelCase), plus the few fields Airlock adds (who answered, the rule that decided,
whether a tool has side effects). Writers build these models, so a misnamed field fails where it is written;
`event_schema()` is their JSON schema, published at `/api/events/schema.json`; `validate` checks an envelope.

An optional field is left out of the JSON when it is None (`optional()`), as the SDK leaves it out; a field
that may be null but is always there is typed `X | None` without a default.
"""

import json
from enum import StrEnum
from typing import Any, ClassVar, Literal

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
    REQUEST_TERMINATED = "request.terminated"
    USER_INPUT_REQUESTED = "user_input.requested"
    USER_INPUT_COMPLETED = "user_input.completed"
    EXIT_PLAN_MODE_REQUESTED = "exit_plan_mode.requested"
    EXIT_PLAN_MODE_COMPLETED = "exit_plan_mode.completed"
    SESSION_LIMITS_EXHAUSTED_REQUESTED = "session_limits_exhausted.requested"
    SESSION_LIMITS_EXHAUSTED_COMPLETED = "session_limits_exhausted.completed"
    SESSION_IDLE = "session.idle"
    SESSION_TITLE_CHANGED = "session.title_changed"
    SESSION_ERROR = "session.error"
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
        EventType.REQUEST_TERMINATED,
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
    """A field that is left out when None."""
    return Field(default=None, exclude_if=_absent, **kwargs)


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Payload(Shape):
    """The `data` of one event type; `type` names it, `ephemeral` ones stream live and are never stored."""

    type: ClassVar[EventType]
    ephemeral: ClassVar[bool] = False

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# Run lifecycle (Airlock's own, section 5).


class RunStarted(Payload):
    type = EventType.RUN_STARTED
    agent: str
    definitionVersion: int
    sessionId: str | None
    culture: str | None
    parameters: dict[str, Any]
    previousRunId: str | None
    replayOf: str | None = optional()


class ErrorInfo(Shape):
    code: str
    message: str


class RunRetrying(Payload):
    type = EventType.RUN_RETRYING
    attempt: int
    error: ErrorInfo
    retryAt: str


class RunAwaiting(Payload):
    type = EventType.RUN_AWAITING
    status: str
    pendingRequests: list[dict[str, Any]]


class RunCompleted(Payload):
    type = EventType.RUN_COMPLETED
    output: str | None


class RunFailed(Payload):
    type = EventType.RUN_FAILED
    error: ErrorInfo


class SessionError(Payload):
    """Alongside `run.failed`, as the SDK reports a failed turn."""

    type = EventType.SESSION_ERROR
    errorType: str
    message: str
    statusCode: int | None = optional()


class RunCancelled(Payload):
    type = EventType.RUN_CANCELLED
    cancelledBy: str | None = optional()


class BlockedError(Shape):
    code: str
    point: str
    reason: str | None = optional()
    message: str


class RunBlocked(Payload):
    type = EventType.RUN_BLOCKED
    error: BlockedError


class PolicyVerdict(Payload):
    """Section 8: a verdict other than allow; at a tool point, which call it was about."""

    type = EventType.POLICY_VERDICT
    point: str
    decision: str
    reason: str | None
    message: str | None
    binding: str | None
    enforced: bool
    toolName: str | None = optional()
    toolCallId: str | None = optional()


# The conversation.


class Attachment(Shape):
    id: str
    name: str


class UserMessage(Payload):
    type = EventType.USER_MESSAGE
    content: str
    attachments: list[Attachment] | None = optional()


class DocumentAttached(Payload):
    type = EventType.DOCUMENT_ATTACHED
    name: str
    size: int


class TurnStart(Payload):
    type = EventType.ASSISTANT_TURN_START
    turnId: str


class TurnEnd(Payload):
    type = EventType.ASSISTANT_TURN_END
    turnId: str


class ToolRequest(Shape):
    toolCallId: str
    name: str
    arguments: dict[str, Any]


class AssistantMessage(Payload):
    type = EventType.ASSISTANT_MESSAGE
    messageId: str
    content: str
    toolRequests: list[ToolRequest] | None = optional()
    outputTokens: int | None = optional()


class AssistantMessageDelta(Payload):
    type = EventType.ASSISTANT_MESSAGE_DELTA
    ephemeral = True
    messageId: str
    deltaContent: str


class AssistantReasoning(Payload):
    type = EventType.ASSISTANT_REASONING
    reasoningId: str
    content: str


class AssistantReasoningDelta(Payload):
    type = EventType.ASSISTANT_REASONING_DELTA
    ephemeral = True
    reasoningId: str
    deltaContent: str


class AssistantUsage(Payload):
    """One per model call."""

    type = EventType.ASSISTANT_USAGE
    model: str
    inputTokens: int
    outputTokens: int
    cacheReadTokens: int | None = optional()
    duration: int = Field(description="milliseconds")
    cost: float | None = optional()


# Tools.


class ToolExecutionStart(Payload):
    type = EventType.TOOL_EXECUTION_START
    toolCallId: str
    toolName: str
    arguments: dict[str, Any]
    mcpServerName: str | None = optional()
    mcpToolName: str | None = optional()
    # Airlock: a run whose call with side effects started is never retried (agents/queue.py).
    sideEffects: bool = False


class ToolExecutionProgress(Payload):
    type = EventType.TOOL_EXECUTION_PROGRESS
    ephemeral = True
    toolCallId: str
    progressMessage: str


class ToolExecutionPartialResult(Payload):
    type = EventType.TOOL_EXECUTION_PARTIAL_RESULT
    ephemeral = True
    toolCallId: str
    partialOutput: str


class ToolResult(Shape):
    content: str
    detailedContent: str | None = optional()


class ToolError(Shape):
    message: str
    code: str | None = optional()


class ToolExecutionComplete(Payload):
    type = EventType.TOOL_EXECUTION_COMPLETE
    toolCallId: str
    toolName: str
    success: bool
    result: ToolResult | None = optional()
    error: ToolError | None = optional()

    @classmethod
    def of(cls, call_id: str, name: str, *, value: Any = None, error: str | None = None) -> "ToolExecutionComplete":
        if error is not None:
            return cls(toolCallId=call_id, toolName=name, success=False, error=ToolError(message=error))
        return cls(toolCallId=call_id, toolName=name, success=True, result=tool_result(value))


def tool_result(value: Any) -> ToolResult:
    """A tool's return value as the SDK's result: text as it is, anything else as JSON (`detailedContent`
    keeps the indented form when it differs)."""
    if isinstance(value, str):
        return ToolResult(content=value)
    content = json.dumps(value, ensure_ascii=False, default=str)
    detailed = json.dumps(value, ensure_ascii=False, default=str, indent=2)
    return ToolResult(content=content, detailedContent=detailed if detailed != content else None)


# Requests (section 4's kinds) and their answers.


class PolicyAsk(Shape):
    binding: str | None = None
    reason: str | None = None
    message: str | None = None


class PermissionRequest(Shape):
    kind: Literal["tool", "policy", "output"]
    toolCallId: str | None = optional()
    toolName: str | None = optional()
    arguments: dict[str, Any] | None = optional()
    policy: PolicyAsk | None = optional()


class PermissionRequested(Payload):
    type = EventType.PERMISSION_REQUESTED
    requestId: str
    permissionRequest: PermissionRequest
    # Airlock: the operator's question, and until when it waits (a deadline).
    message: str | None = optional()
    expiresAt: str | None = optional()


class Closed(Shape):
    kind: str = Field(description="expired | cancelled | abandoned | ran-in-failed-turn")
    reason: str


class Answered(Payload):
    """What every `*.completed` event names: the request, its call, and who answered (None: nobody, a rule or
    a policy decided, or the request closed unanswered: then `closed` says how, except on a permission,
    whose `result` says it)."""

    requestId: str
    toolCallId: str | None = optional()
    toolName: str | None = optional()
    answeredBy: str | None = optional()
    closed: Closed | None = optional()


class PermissionResult(Shape):
    kind: str = Field(
        description="approved | approved-by-rule | denied-by-rules | denied-interactively-by-user | expired |"
        " cancelled | abandoned | ran-in-failed-turn"
    )
    reason: str | None = optional()
    # Airlock: the rule that approved, the policy that denied or escalated, an operator's edit and rule.
    ruleId: str | None = optional()
    message: str | None = optional()
    policy: PolicyAsk | None = optional()
    overrideArguments: dict[str, Any] | None = optional()
    rememberedRuleId: str | None = optional()


class PermissionCompleted(Answered):
    type = EventType.PERMISSION_COMPLETED
    result: PermissionResult
    # Airlock: the arguments a rule or a policy decided on (an operator's answer keeps them on its request).
    arguments: dict[str, Any] | None = optional()


class UserInputRequested(Payload):
    type = EventType.USER_INPUT_REQUESTED
    requestId: str
    toolCallId: str
    question: str
    choices: list[str] | None = optional()
    allowFreeform: bool
    expiresAt: str | None = optional()


class UserInputCompleted(Answered):
    type = EventType.USER_INPUT_COMPLETED
    answer: str | None = optional()


class ExitPlanModeRequested(Payload):
    type = EventType.EXIT_PLAN_MODE_REQUESTED
    requestId: str
    toolCallId: str
    summary: str
    planContent: str
    actions: list[str]
    expiresAt: str | None = optional()


class ExitPlanModeCompleted(Answered):
    type = EventType.EXIT_PLAN_MODE_COMPLETED
    approved: bool | None = optional()
    selectedAction: Literal["approve", "revise"] | None = optional()
    feedback: str | None = optional()


class LimitsResponse(Shape):
    action: Literal["continue", "stop"]


class SessionLimitsExhaustedRequested(Payload):
    type = EventType.SESSION_LIMITS_EXHAUSTED_REQUESTED
    requestId: str
    maxModelCalls: int
    usedModelCalls: int
    expiresAt: str | None = optional()


class SessionLimitsExhaustedCompleted(Answered):
    type = EventType.SESSION_LIMITS_EXHAUSTED_COMPLETED
    response: LimitsResponse | None = optional()


class ExternalToolRequested(Payload):
    type = EventType.EXTERNAL_TOOL_REQUESTED
    requestId: str
    sessionId: str
    toolCallId: str
    toolName: str
    arguments: dict[str, Any]
    expiresAt: str | None = optional()


class ExternalToolCompleted(Answered):
    type = EventType.EXTERNAL_TOOL_COMPLETED
    outcome: Literal["completed", "failed", "rejected", "background"] | None = optional()
    result: Any = optional()
    errorMessage: str | None = optional()


class ElicitationRequested(Payload):
    type = EventType.ELICITATION_REQUESTED
    requestId: str
    message: str
    requestedSchema: dict[str, Any]
    mode: Literal["form"] = "form"
    toolCallId: str | None = optional()
    toolName: str | None = optional()
    arguments: dict[str, Any] | None = optional()
    expiresAt: str | None = optional()


class ElicitationCompleted(Answered):
    type = EventType.ELICITATION_COMPLETED
    action: Literal["accept", "decline", "cancel"] | None = optional()
    content: dict[str, Any] | None = optional()


class RequestTerminated(Payload):
    type = EventType.REQUEST_TERMINATED
    requestId: str
    kind: Literal["expired", "cancelled", "abandoned"]
    toolCallId: str | None = optional()
    toolName: str | None = optional()


# Sub-agents (section 10): the parent's events around a sub-agent's, which carry the envelope's `agentId`.


class SubagentStarted(Payload):
    type = EventType.SUBAGENT_STARTED
    toolCallId: str
    agentName: str
    agentDisplayName: str
    model: str
    # Airlock: the envelope `agentId` the sub-agent's events carry.
    agentId: str


class SubagentCompleted(Payload):
    type = EventType.SUBAGENT_COMPLETED
    toolCallId: str
    agentName: str
    durationMs: int
    totalTokens: int
    totalToolCalls: int


class SubagentFailed(SubagentCompleted):
    type = EventType.SUBAGENT_FAILED
    error: str


class SessionIdle(Payload):
    type = EventType.SESSION_IDLE
    ephemeral = True
    aborted: bool


class SessionTitleChanged(Payload):
    """The session's title: its first message's first line (agents.events.session_title)."""

    type = EventType.SESSION_TITLE_CHANGED
    ephemeral = True
    title: str


PAYLOADS: dict[str, type[Payload]] = {
    model.type: model
    for model in (
        RunStarted,
        RunRetrying,
        RunAwaiting,
        RunCompleted,
        RunFailed,
        SessionError,
        RunCancelled,
        RunBlocked,
        PolicyVerdict,
        UserMessage,
        DocumentAttached,
        TurnStart,
        TurnEnd,
        AssistantMessage,
        AssistantMessageDelta,
        AssistantReasoning,
        AssistantReasoningDelta,
        AssistantUsage,
        ToolExecutionStart,
        ToolExecutionProgress,
        ToolExecutionPartialResult,
        ToolExecutionComplete,
        PermissionRequested,
        PermissionCompleted,
        UserInputRequested,
        UserInputCompleted,
        ExitPlanModeRequested,
        ExitPlanModeCompleted,
        SessionLimitsExhaustedRequested,
        SessionLimitsExhaustedCompleted,
        ExternalToolRequested,
        ExternalToolCompleted,
        ElicitationRequested,
        ElicitationCompleted,
        RequestTerminated,
        SubagentStarted,
        SubagentCompleted,
        SubagentFailed,
        SessionIdle,
        SessionTitleChanged,
    )
}
assert set(PAYLOADS) == set(EventType), set(EventType) ^ set(PAYLOADS)


class Envelope(Shape):
    """Section 5's envelope; `data` is the payload of `type`."""

    id: str
    runId: str
    sequence: int
    timestamp: str
    parentId: str | None
    agentId: str | None = optional()
    ephemeral: bool
    type: str
    data: dict[str, Any]


def validate(envelope: dict[str, Any]) -> Payload:
    """The payload of an envelope (a dict as the API sends it), checked against its type's model; raises
    pydantic's ValidationError, or KeyError for a type that does not exist."""
    Envelope.model_validate(envelope)
    return PAYLOADS[envelope["type"]].model_validate(envelope["data"])


def event_schema() -> dict[str, Any]:
    """The JSON schema of the envelope and of each type's payload (`payloads`, by type)."""
    payloads = {name: model.model_json_schema(mode="serialization") for name, model in PAYLOADS.items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Airlock events",
        "envelope": Envelope.model_json_schema(mode="serialization"),
        "payloads": payloads,
        "ephemeral": sorted(name for name, model in PAYLOADS.items() if model.ephemeral),
    }
