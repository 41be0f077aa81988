"""A tool call as the Copilot SDK's permission events describe it (SPEC section 10), and the events of calls the
engine settles itself: a permission a rule or a policy decided (the SDK's requested and completed pair, with
`decisionSource: host_policy`, then Airlock's `request.answered`), and a call that never runs (its
`tool.execution_start` with a failed `tool.execution_complete`, so every call the model makes has both)."""

import uuid
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import ToolDefinition

from agents.engine.subagent_turns import Emit
from agents.payloads import (
    PermissionCompleted,
    PermissionRequest,
    PermissionRequested,
    PolicyAsk,
    RequestAnswered,
    ToolExecutionComplete,
    ToolExecutionStart,
)

_REQUEST = TypeAdapter[Any](PermissionRequest)


def describe(name: str, tool_def: ToolDefinition | None, server: str | None) -> dict[str, Any]:
    """The SDK's `permissionRequest` of a call to `name`, without its arguments and call id: kind `mcp` for an MCP
    server's tool (its title and read-only hint from the server's annotations), else `custom-tool`."""
    description = (tool_def.description if tool_def is not None else None) or ""
    if server is None:
        return {"kind": "custom-tool", "toolName": name, "toolDescription": description}
    annotations = ((tool_def.metadata if tool_def is not None else None) or {}).get("annotations") or {}
    return {
        "kind": "mcp",
        "serverName": server,
        "toolName": name,
        "toolTitle": annotations.get("title") or name,
        "readOnly": bool(annotations.get("readOnlyHint")),
    }


async def decided(
    emit: Emit,
    described: dict[str, Any],
    call_id: str,
    arguments: dict[str, Any],
    result: Any,
    *,
    rule_id: str | None = None,
    policy: PolicyAsk | None = None,
) -> None:
    """A permission nobody was asked for: a rule approved it (`rule_id`) or a policy denied it (`policy`). It has a
    request id of its own, as no request was opened."""
    request_id = str(uuid.uuid4())
    asked = _REQUEST.validate_python({**described, "args": arguments, "toolCallId": call_id})
    await emit(PermissionRequested(requestId=request_id, permissionRequest=asked))
    await emit(
        PermissionCompleted(requestId=request_id, toolCallId=call_id, result=result, decisionSource="host_policy")
    )
    answered = RequestAnswered(
        requestId=request_id,
        kind="approval",
        toolCallId=call_id,
        toolName=described["toolName"],
        ruleId=rule_id,
        arguments=arguments,
        policy=policy,
    )
    await emit(answered)


async def not_run(
    emit: Emit, call_id: str, name: str, arguments: dict[str, Any], error: str, code: str, server: str | None = None
) -> None:
    """A call that does not run (`code`: denied, rejected, failed, ...): started and completed with the error."""
    await emit(start(call_id, name, arguments, server))
    await emit(ToolExecutionComplete.of(call_id, error=error, code=code))


def start(
    call_id: str, name: str, arguments: dict[str, Any], server: str | None = None, side_effects: bool = False
) -> ToolExecutionStart:
    return ToolExecutionStart(
        toolCallId=call_id,
        toolName=name,
        arguments=arguments,
        mcpServerName=server,
        mcpToolName=name if server is not None else None,
        side_effects=side_effects,
    )
