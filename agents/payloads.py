"""The `data` of every event type (SPEC sections 5 and 10), one pydantic model each: the Copilot SDK's session
event shapes field for field (camelCase), with nothing added inside them. What the SDK has no field for (who
answered, the rule that decided, Airlock's ids) is in Airlock's own types, `EXTENSION_TYPES` (docs/events.md
lists every extension). Writers build these models, so a misnamed field fails where it is written;
`event_schema()` is their JSON schema, published at `/api/events/schema.json`; `validate` checks an envelope
(tests/agents/test_copilot_contract.py checks the same events with the SDK's own parser).

An optional field is left out of the JSON when it is None (`optional()`), as the SDK leaves it out; a field
that may be null but is always there is typed `X | None` without a default.
"""

import json
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.request_kinds import REQUEST_KINDS


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
    """Alongside `run.failed`, as the SDK reports a failed turn (`errorType`: the error's code)."""

    type = EventType.SESSION_ERROR
    errorType: str
    message: str
    statusCode: int | None = optional()


class RunCancelled(Payload):
    type = EventType.RUN_CANCELLED
    cancelledBy: str | None = optional()


class Abort(Payload):
    """Before `run.cancelled`: the SDK's word that the turn was aborted (its `session.idle` says `aborted`)."""

    type = EventType.ABORT
    reason: Literal["user_initiated"]


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


class UserMessage(Payload):
    type = EventType.USER_MESSAGE
    content: str


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


class AssistantMessageDelta(Transient):
    type = EventType.ASSISTANT_MESSAGE_DELTA
    messageId: str
    deltaContent: str


class AssistantReasoning(Payload):
    type = EventType.ASSISTANT_REASONING
    reasoningId: str
    content: str


class AssistantReasoningDelta(Transient):
    type = EventType.ASSISTANT_REASONING_DELTA
    reasoningId: str
    deltaContent: str


class AssistantUsage(Kept):
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
    """A tool call begins (or, for a call that never runs — denied, rejected, closed unanswered — is reported
    with its `tool.execution_complete` right after). Whether the tool has side effects is not part of the event:
    the engine sets `side_effects` (not serialized), which the log stores on the event's row (agents/queue.py
    never retries a run once such a call started)."""

    type = EventType.TOOL_EXECUTION_START
    toolCallId: str
    toolName: str
    arguments: dict[str, Any]
    mcpServerName: str | None = optional()
    mcpToolName: str | None = optional()
    side_effects: bool = Field(default=False, exclude=True)


class ToolExecutionProgress(Transient):
    type = EventType.TOOL_EXECUTION_PROGRESS
    toolCallId: str
    progressMessage: str


class ToolExecutionPartialResult(Transient):
    type = EventType.TOOL_EXECUTION_PARTIAL_RESULT
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
    success: bool
    result: ToolResult | None = optional()
    error: ToolError | None = optional()

    @classmethod
    def of(
        cls, call_id: str, *, value: Any = None, error: str | None = None, code: str | None = None
    ) -> "ToolExecutionComplete":
        """A call that returned `value`, or failed (did not run) with `error` (`code`: why, e.g. `denied`)."""
        if error is not None:
            return cls(toolCallId=call_id, success=False, error=ToolError(message=error, code=code))
        return cls(toolCallId=call_id, success=True, result=tool_result(value))


def tool_result(value: Any) -> ToolResult:
    """A tool's return value as the SDK's result: text as it is, anything else as JSON (`detailedContent`
    keeps the indented form when it differs)."""
    if isinstance(value, str):
        return ToolResult(content=value)
    content = json.dumps(value, ensure_ascii=False, default=str)
    detailed = json.dumps(value, ensure_ascii=False, default=str, indent=2)
    return ToolResult(content=content, detailedContent=detailed if detailed != content else None)


# Requests (section 4's kinds) and their answers, in the SDK's shapes (SPEC section 10's mapping table).


class CustomToolPermission(Shape):
    """A server or client tool's call (and a policy's escalation of one)."""

    kind: Literal["custom-tool"]
    toolName: str
    toolDescription: str
    args: dict[str, Any] | None = optional()
    toolCallId: str | None = optional()


class McpPermission(Shape):
    kind: Literal["mcp"]
    serverName: str
    toolName: str
    toolTitle: str
    args: dict[str, Any] | None = optional()
    readOnly: bool
    toolCallId: str | None = optional()


class HookPermission(Shape):
    """A policy's escalation at a point that is no tool call (`toolName`: the point, e.g. `output`)."""

    kind: Literal["hook"]
    toolName: str
    hookMessage: str | None = optional()
    toolArgs: dict[str, Any] | None = optional()
    toolCallId: str | None = optional()


PermissionRequest = Annotated[CustomToolPermission | McpPermission | HookPermission, Field(discriminator="kind")]


class PermissionRequested(Payload):
    type = EventType.PERMISSION_REQUESTED
    requestId: str
    permissionRequest: PermissionRequest


class Approved(Shape):
    kind: Literal["approved"]


class DeniedByUser(Shape):
    kind: Literal["denied-interactively-by-user"]
    feedback: str | None = optional()


class PermissionRule(Shape):
    kind: str
    argument: str | None


class DeniedByRules(Shape):
    kind: Literal["denied-by-rules"]
    rules: list[PermissionRule]


class DeniedByHook(Shape):
    """A policy's deny (SPEC section 8)."""

    kind: Literal["denied-by-permission-request-hook"]
    message: str | None = optional()


class Cancelled(Shape):
    """Closed without an answer."""

    kind: Literal["cancelled"]
    reason: Literal["expired", "cancelled", "abandoned"] | None = optional()


PermissionResult = Annotated[
    Approved | DeniedByUser | DeniedByRules | DeniedByHook | Cancelled, Field(discriminator="kind")
]


class PermissionCompleted(Payload):
    type = EventType.PERMISSION_COMPLETED
    requestId: str
    toolCallId: str | None = optional()
    result: PermissionResult
    decisionSource: Literal["human_response", "host_policy"] | None = optional()


class UserInputRequested(Kept):
    type = EventType.USER_INPUT_REQUESTED
    requestId: str
    question: str
    choices: list[str] | None = optional()
    allowFreeform: bool
    toolCallId: str | None = optional()


class UserInputCompleted(Kept):
    type = EventType.USER_INPUT_COMPLETED
    requestId: str
    answer: str | None = optional()
    wasFreeform: bool | None = optional()


# The SDK's actions on leaving plan mode; Airlock's plan, once approved, goes on in the agent's turn, its tools
# still asking as their approval modes say: `interactive`. A revision is `approved: false` with `feedback`.
PlanAction = Literal["exit_only", "interactive", "autopilot", "autopilot_fleet"]
PLAN_ACTIONS: list[PlanAction] = ["interactive"]


class ExitPlanModeRequested(Kept):
    type = EventType.EXIT_PLAN_MODE_REQUESTED
    requestId: str
    summary: str
    planContent: str
    actions: list[PlanAction]
    recommendedAction: PlanAction


class ExitPlanModeCompleted(Kept):
    type = EventType.EXIT_PLAN_MODE_COMPLETED
    requestId: str
    approved: bool | None = optional()
    selectedAction: PlanAction | None = optional()
    feedback: str | None = optional()


class LimitsResponse(Shape):
    """`add` a fresh allowance (`additionalAiCredits`: the definition's `maxModelCalls`), or `cancel`: stop."""

    action: Literal["add", "cancel"]
    additionalAiCredits: int | None = optional()


class SessionLimitsExhaustedRequested(Kept):
    """A run at its `maxModelCalls` (a model call counts one AI credit)."""

    type = EventType.SESSION_LIMITS_EXHAUSTED_REQUESTED
    requestId: str
    maxAiCredits: int
    usedAiCredits: int


class SessionLimitsExhaustedCompleted(Kept):
    type = EventType.SESSION_LIMITS_EXHAUSTED_COMPLETED
    requestId: str
    response: LimitsResponse


class ExternalToolRequested(Payload):
    type = EventType.EXTERNAL_TOOL_REQUESTED
    requestId: str
    sessionId: str
    toolCallId: str
    toolName: str
    arguments: dict[str, Any]


class ExternalToolCompleted(Payload):
    """The client's answer (what it returned is the call's `tool.execution_complete`)."""

    type = EventType.EXTERNAL_TOOL_COMPLETED
    requestId: str


class RequestedSchema(Shape):
    """The SDK's form schema: an object's `properties` and `required` (the whole schema stays on the request)."""

    type: Literal["object"]
    properties: dict[str, Any]
    required: list[str] | None = optional()

    @classmethod
    def of(cls, schema: dict[str, Any] | None) -> "RequestedSchema":
        schema = schema or {}
        required = schema.get("required")
        return cls(
            type="object", properties=schema.get("properties") or {}, required=list(required) if required else None
        )


class ElicitationRequested(Kept):
    type = EventType.ELICITATION_REQUESTED
    requestId: str
    message: str
    requestedSchema: RequestedSchema
    mode: Literal["form"] = "form"
    toolCallId: str | None = optional()


class ElicitationCompleted(Kept):
    type = EventType.ELICITATION_COMPLETED
    requestId: str
    action: Literal["accept", "decline", "cancel"] | None = optional()
    content: dict[str, Any] | None = optional()


class PolicyAsk(Shape):
    binding: str | None = None
    reason: str | None = None
    message: str | None = None


class RequestAnswered(Payload):
    """Airlock's own, after every `*.completed` of a request decided (by a person, a rule or a policy): what the
    SDK's events have no field for. A request closed unanswered has `request.terminated` instead."""

    type = EventType.REQUEST_ANSWERED
    requestId: str
    kind: str = Field(description=" | ".join(REQUEST_KINDS))
    toolCallId: str | None = optional()
    toolName: str | None = optional()
    answeredBy: str | None = optional(description="the username; absent when a rule or a policy decided")
    ruleId: str | None = optional(description="the remembered rule that approved the call")
    rememberedRuleId: str | None = optional(description="the rule this answer remembered")
    overrideArguments: dict[str, Any] | None = optional(description="the arguments the operator edited")
    arguments: dict[str, Any] | None = optional(description="the arguments a rule or a policy decided on")
    policy: PolicyAsk | None = optional(description="the policy that escalated or denied")
    outcome: str | None = optional(description="a client tool's: completed | failed | rejected | background")
    ranInFailedTurn: bool | None = optional(description="the call ran in a turn that failed; it was not run again")


class RequestTerminated(Payload):
    type = EventType.REQUEST_TERMINATED
    requestId: str
    kind: Literal["expired", "cancelled", "abandoned"]
    toolCallId: str | None = optional()
    toolName: str | None = optional()


# Sub-agents (section 10): the parent's events around a sub-agent's, which carry the envelope's `agentId` (the
# `toolCallId` of the call that started it; under a sub-agent, prefixed with that sub-agent's `agentId` and "/").


class SubagentStarted(Payload):
    type = EventType.SUBAGENT_STARTED
    toolCallId: str
    agentName: str
    agentDisplayName: str
    agentDescription: str
    model: str | None = optional()


class SubagentCompleted(Payload):
    type = EventType.SUBAGENT_COMPLETED
    toolCallId: str
    agentName: str
    agentDisplayName: str
    model: str | None = optional()
    durationMs: int
    totalTokens: int
    totalToolCalls: int


class SubagentFailed(SubagentCompleted):
    type = EventType.SUBAGENT_FAILED
    error: str


class SessionIdle(Transient):
    type = EventType.SESSION_IDLE
    aborted: bool


class SessionTitleChanged(Transient):
    """The session's title: its first message's first line (agents.events.session_title)."""

    type = EventType.SESSION_TITLE_CHANGED
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
        Abort,
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
        RequestAnswered,
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
    """Section 5's envelope; `data` is the payload of `type`. `ephemeral` is the SDK's flag for the type; whether
    the event is stored is the type's (`is_stored`): a stored event has an SSE id, a transient one none."""

    id: str
    runId: str
    sequence: int
    timestamp: str
    parentId: str | None
    agentId: str | None = optional()
    ephemeral: bool
    type: str
    data: dict[str, Any]


def is_stored(envelope: dict[str, Any]) -> bool:
    """Whether an envelope is of a type Airlock keeps in the run's history (it then has a place in the chain)."""
    model = PAYLOADS.get(envelope["type"])
    return model.stored if model is not None else not envelope.get("ephemeral")


def validate(envelope: dict[str, Any]) -> Payload:
    """The payload of an envelope (a dict as the API sends it), checked against its type's model; raises
    pydantic's ValidationError, or KeyError for a type that does not exist."""
    Envelope.model_validate(envelope)
    return PAYLOADS[envelope["type"]].model_validate(envelope["data"])


def _absent_not_null(schema: Any) -> Any:
    """An object schema whose optional properties may not be null: left out, as the SDK has them."""
    if isinstance(schema, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            required = set(schema.get("required", []))
            for name, declared in properties.items():
                options = declared.get("anyOf") if isinstance(declared, dict) and name not in required else None
                if options and {"type": "null"} in options:
                    kept = [option for option in options if option != {"type": "null"}]
                    declared.pop("anyOf")
                    declared.pop("default", None)
                    declared.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
        for value in schema.values():
            _absent_not_null(value)
    elif isinstance(schema, list):
        for value in schema:
            _absent_not_null(value)
    return schema


def event_schema() -> dict[str, Any]:
    """The JSON schema of the envelope and of each type's payload (`payloads`, by type); `ephemeral`: the types
    the SDK calls ephemeral; `transient`: those never stored; `extensions`: Airlock's own types."""
    payloads = {
        name: _absent_not_null(model.model_json_schema(mode="serialization")) for name, model in PAYLOADS.items()
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Airlock events",
        "envelope": _absent_not_null(Envelope.model_json_schema(mode="serialization")),
        "payloads": payloads,
        "ephemeral": sorted(name for name, model in PAYLOADS.items() if model.ephemeral),
        "transient": sorted(name for name, model in PAYLOADS.items() if not model.stored),
        "extensions": sorted(EXTENSION_TYPES),
    }
