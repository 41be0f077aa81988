"""Tool calls and the permission requests around them (SPEC section 10's mapping table), in the SDK's shapes."""

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from agents.payloads.base import EventType, Payload, Shape, Transient, optional


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


class CustomToolSessionApproval(Shape):
    kind: Literal["custom-tool"]
    toolName: str


class McpSessionApproval(Shape):
    kind: Literal["mcp"]
    serverName: str
    toolName: str | None


SessionApproval = Annotated[CustomToolSessionApproval | McpSessionApproval, Field(discriminator="kind")]


class ApprovedForSession(Shape):
    """Approved, and remembered for the rest of the session (a rule of scope "session", SPEC section 13)."""

    kind: Literal["approved-for-session"]
    approval: SessionApproval


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
    Approved | ApprovedForSession | DeniedByUser | DeniedByRules | DeniedByHook | Cancelled,
    Field(discriminator="kind"),
]


class PermissionCompleted(Payload):
    type = EventType.PERMISSION_COMPLETED
    requestId: str
    toolCallId: str | None = optional()
    result: PermissionResult
    decisionSource: Literal["human_response", "host_policy"] | None = optional()


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
