"""Stored events in the Copilot SDK's exact shapes (SPEC section 10, docs/events.md): history reads as new runs do.

What changes, and only that:
- each SDK type's `data` loses what the SDK has no field for, and takes the SDK's kinds and enum values
  (permission kinds `custom-tool` / `mcp` / `hook` with `args`; results `approved`, `denied-interactively-by-user
  {feedback}`, `denied-by-permission-request-hook {message}`, `cancelled {reason}`; a plan's `interactive`; a
  limit's AI credits; a sub-agent's description and display name);
- what was taken out goes to Airlock's `request.answered`, written right after the completion it came from (who
  answered, the rule, the edit, the rule remembered, the policy, a client tool's outcome, a call that ran in a
  failed turn); a rule's decision gets the SDK's `permission.requested` before its completion;
- the events of a session's runs are numbered again where events were added, and chained across the session
  (`parentId`: the event before in the session, null at its first). Event ids, types of the events kept,
  timestamps and everything else stay.
An event already in the new shape is left as it is (the migration may run twice).

`rewrite(event_type, data, context)` is the whole change for one event (the events that stand for it), so that a
test can read it."""

import uuid
from typing import Any

from django.db import migrations

PLAN = "interactive"
KIND_OF = {
    "permission.completed": "approval",
    "external_tool.completed": "client_tool",
    "elicitation.completed": "input",
    "user_input.completed": "question",
    "exit_plan_mode.completed": "plan",
    "session_limits_exhausted.completed": "continuation",
}
CLOSINGS = ("expired", "cancelled", "abandoned")
NEW_RESULTS = {"approved", "denied-interactively-by-user", "denied-by-rules", "denied-by-permission-request-hook"}


def _present(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _without(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in keys}


def _answered(
    data: dict[str, Any], kind: str, context: dict[str, Any], **facts: Any
) -> list[tuple[str, dict[str, Any]]]:
    """The `request.answered` of an answer event, when it carried anything the SDK's completion has no place for."""
    request = context.get("requests", {}).get(data.get("requestId"), {})
    facts = _present(answeredBy=data.get("answeredBy"), **facts)
    if not facts:
        return []
    call = data.get("toolCallId") or request.get("toolCallId")
    tool = data.get("toolName") or request.get("toolName")
    return [("request.answered", {"requestId": data["requestId"], "kind": kind, **_present(toolCallId=call, toolName=tool), **facts})]


def _asked(data: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """An old `permissionRequest` ({kind: tool|policy|output, toolCallId, toolName, arguments, policy}) as the
    SDK's: a tool of the definition's is `custom-tool`, one of its MCP servers `mcp`, a held answer `hook`."""
    asked = data["permissionRequest"]
    arguments, tool = asked.get("arguments"), asked.get("toolName") or ""
    if asked.get("kind") == "output":
        policy = asked.get("policy") or {}
        message = policy.get("message") or policy.get("reason")
        return {"kind": "hook", "toolName": "output", **_present(hookMessage=message, toolArgs=arguments)}
    server = context.get("servers", {}).get(tool)
    if server is not None:
        described = {"kind": "mcp", "serverName": server, "toolName": tool, "toolTitle": tool, "readOnly": False}
    else:
        described = {"kind": "custom-tool", "toolName": tool, "toolDescription": context.get("tools", {}).get(tool, "")}
    return {**described, **_present(args=arguments, toolCallId=asked.get("toolCallId"))}


def _permission_completed(data: dict[str, Any], context: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    result = data.get("result") if isinstance(data.get("result"), dict) else {}
    kind = result.get("kind")
    if kind == "cancelled" or (kind in NEW_RESULTS and set(data) <= {"requestId", "toolCallId", "result", "decisionSource"}):
        return [("permission.completed", data)]  # already new
    call = _present(toolCallId=data.get("toolCallId"))
    base = {"requestId": data["requestId"], **call}
    if kind == "ran-in-failed-turn":
        return _answered(data, "approval", context, ranInFailedTurn=True) or [
            ("request.answered", {"requestId": data["requestId"], "kind": "approval", **call, "ranInFailedTurn": True})
        ]
    if kind in CLOSINGS:
        return [("permission.completed", {**base, "result": {"kind": "cancelled", "reason": kind}})]
    policy = result.get("policy")
    if kind == "approved-by-rule":
        tool = data.get("toolName") or ""
        asked = _asked({"permissionRequest": {"kind": "tool", "toolName": tool, "arguments": data.get("arguments"), **call}}, context)
        completed = {**base, "result": {"kind": "approved"}, "decisionSource": "host_policy"}
        facts = _present(ruleId=result.get("ruleId"), arguments=data.get("arguments"))
        answered = {"requestId": data["requestId"], "kind": "approval", **call, **_present(toolName=tool or None), **facts}
        return [
            ("permission.requested", {"requestId": data["requestId"], "permissionRequest": asked}),
            ("permission.completed", completed),
            ("request.answered", answered),
        ]
    if kind == "denied-by-rules":  # a policy's deny, before
        message = result.get("message") or result.get("reason")
        completed = {**base, "result": {"kind": "denied-by-permission-request-hook", **_present(message=message)}}
        said = _present(binding=(policy or {}).get("binding"), reason=result.get("reason"), message=result.get("message"))
        facts = _present(policy=said or None, arguments=data.get("arguments"))
        return [("permission.completed", {**completed, "decisionSource": "host_policy"}), *_answered(data, "approval", context, **facts)]
    approved = kind == "approved"
    new_result = {"kind": "approved"} if approved else {"kind": "denied-interactively-by-user", **_present(feedback=result.get("reason"))}
    facts = _present(
        overrideArguments=result.get("overrideArguments"),
        rememberedRuleId=result.get("rememberedRuleId"),
        policy=policy,
    )
    completed = {**base, "result": new_result, "decisionSource": "human_response"}
    return [("permission.completed", completed), *_answered(data, "approval", context, **facts)]


def _completed(event_type: str, data: dict[str, Any], context: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every other request's answer event: before, {requestId, toolCallId?, toolName?, answeredBy?, closed?, ...}."""
    old = {"toolCallId", "toolName", "answeredBy", "closed", "outcome", "result", "errorMessage"}
    if event_type == "exit_plan_mode.completed" and data.get("selectedAction") in ("approve", "revise"):
        old.add("selectedAction")
    if event_type == "session_limits_exhausted.completed" and (data.get("response") or {}).get("action") in ("continue", "stop"):
        old.add("response")
    if not (set(data) & old) and not (event_type == "session_limits_exhausted.completed" and "response" not in data):
        return [(event_type, data)]  # already new
    kind = KIND_OF[event_type]
    request_id = data["requestId"]
    closed = data.get("closed") if isinstance(data.get("closed"), dict) else None
    if closed is not None and closed.get("kind") == "ran-in-failed-turn":
        call = _present(toolCallId=data.get("toolCallId"), toolName=data.get("toolName"))
        return [("request.answered", {"requestId": request_id, "kind": kind, **call, "ranInFailedTurn": True})]
    facts: dict[str, Any] = {}
    if event_type == "external_tool.completed":
        new = {"requestId": request_id}
        facts = _present(outcome=data.get("outcome")) if closed is None else {}
    elif event_type == "elicitation.completed":
        new = {"requestId": request_id, **_present(action="cancel" if closed else data.get("action"), content=None if closed else data.get("content"))}
    elif event_type == "user_input.completed":
        new = {"requestId": request_id, **_present(answer=None if closed else data.get("answer"))}
    elif event_type == "exit_plan_mode.completed":
        approved = None if closed else data.get("approved")
        new = {"requestId": request_id, **_present(approved=approved)}
        if approved:
            new["selectedAction"] = PLAN
        elif approved is False:
            new |= _present(feedback=data.get("feedback"))
    else:  # session_limits_exhausted.completed
        action = None if closed else (data.get("response") or {}).get("action")
        limit = context.get("limits", {}).get(request_id, 0)
        new = {"requestId": request_id, "response": {"action": "add", "additionalAiCredits": limit} if action == "continue" else {"action": "cancel"}}
    if closed is not None:
        return [(event_type, new)]
    return [(event_type, new), *_answered(data, kind, context, **facts)]


def _requested(event_type: str, data: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    request_id = data.get("requestId")
    context.setdefault("requests", {})[request_id] = _present(toolCallId=data.get("toolCallId"), toolName=data.get("toolName"))
    if event_type in ("external_tool.requested", "user_input.requested"):
        return _without(data, "expiresAt")
    if event_type == "elicitation.requested":
        schema = data.get("requestedSchema") if isinstance(data.get("requestedSchema"), dict) else {}
        form = {"type": "object", "properties": schema.get("properties") or {}, **_present(required=schema.get("required") or None)}
        return {"requestId": request_id, "message": data.get("message") or "", "requestedSchema": form, "mode": "form", **_present(toolCallId=data.get("toolCallId"))}
    if event_type == "exit_plan_mode.requested":
        kept = _without(data, "expiresAt", "toolCallId")
        return {**kept, "actions": [PLAN], "recommendedAction": PLAN}
    # session_limits_exhausted.requested
    if "maxAiCredits" in data:
        context.setdefault("limits", {})[request_id] = data["maxAiCredits"]
        return data
    limit = int(data.get("maxModelCalls") or 0)
    context.setdefault("limits", {})[request_id] = limit
    return {"requestId": request_id, "maxAiCredits": limit, "usedAiCredits": int(data.get("usedModelCalls") or 0)}


def rewrite(event_type: str, data: Any, context: dict[str, Any]) -> list[tuple[str, Any]]:
    """The events that stand for one stored event, in the new shapes: itself rewritten (its type may become
    `request.answered`), and what it carried that the SDK has no field for, after it. `context` carries, per
    session, what pairs events up (the requests, their limits, the sub-agents started) and, per run, the
    definition's tools (`tools`: name -> description, `servers`: an MCP tool's name -> its server) and the
    tenant's agents (`agents`: name -> description)."""
    if not isinstance(data, dict):
        return [(event_type, data)]
    if event_type == "tool.execution_start":
        return [(event_type, _without(data, "sideEffects"))]
    if event_type == "tool.execution_complete":
        return [(event_type, _without(data, "toolName"))]
    if event_type == "user.message":
        return [(event_type, _without(data, "attachments"))]
    if event_type == "permission.requested":
        asked = data.get("permissionRequest")
        if not isinstance(asked, dict) or asked.get("kind") in ("custom-tool", "mcp", "hook"):
            return [(event_type, data)]
        context.setdefault("requests", {})[data.get("requestId")] = _present(toolCallId=asked.get("toolCallId"), toolName=asked.get("toolName"))
        return [(event_type, {"requestId": data["requestId"], "permissionRequest": _asked(data, context)})]
    if event_type == "permission.completed":
        return _permission_completed(data, context)
    if event_type in KIND_OF:
        return _completed(event_type, data, context)
    if event_type in ("external_tool.requested", "elicitation.requested", "user_input.requested", "exit_plan_mode.requested", "session_limits_exhausted.requested"):
        return [(event_type, _requested(event_type, data, context))]
    if event_type == "subagent.started":
        name = data.get("agentName") or ""
        context.setdefault("subagents", {})[data.get("toolCallId")] = data
        if "agentDescription" in data and "agentId" not in data:
            return [(event_type, data)]
        described = context.get("agents", {}).get(name, "")
        return [(event_type, {**_without(data, "agentId"), "agentDescription": data.get("agentDescription") or described})]
    if event_type in ("subagent.completed", "subagent.failed"):
        started = context.get("subagents", {}).get(data.get("toolCallId")) or {}
        shown = data.get("agentDisplayName") or started.get("agentDisplayName") or data.get("agentName") or ""
        return [(event_type, {**data, "agentDisplayName": shown, **_present(model=data.get("model") or started.get("model"))})]
    return [(event_type, data)]


def _definition(version: Any) -> dict[str, Any]:
    """What a run's definition says of its tools: client tools' descriptions, and which tools are an MCP server's
    (any tool the definition does not name, when it has exactly one MCP server)."""
    content = version.content if isinstance(version.content, dict) else {}
    tools = {t.get("name"): t.get("description") or "" for t in content.get("clientTools") or []}
    servers = content.get("mcpServers") or []
    return {"tools": tools, "named": {t.get("name") for t in content.get("tools") or []} | set(tools) | set(content.get("subAgents") or []), "server": servers[0].get("connection") if len(servers) == 1 else None}


class _Servers(dict):
    """An MCP tool's name -> its server: any tool the definition does not name, when it has one MCP server."""

    def __init__(self, named: set[str], server: str | None) -> None:
        super().__init__()
        self.named, self.server = named, server

    def get(self, tool: Any, default: Any = None) -> Any:
        return self.server if self.server is not None and tool and tool not in self.named else default


def forward(apps: Any, schema_editor: Any) -> None:
    Event = apps.get_model("agents", "Event")
    Run = apps.get_model("agents", "Run")
    AgentVersion = apps.get_model("agents", "AgentVersion")
    runs = Run.objects.select_related("version", "agent").order_by("session_id", "created_at", "id")
    session, context, parent = object(), {}, None
    agents: dict[int, dict[str, str]] = {}
    for run in runs.iterator(chunk_size=500):
        if run.session_id != session or run.session_id is None:
            session, context, parent = run.session_id, {}, None
        tenant = run.agent.tenant_id
        if tenant not in agents:
            agents[tenant] = {}
            for version in AgentVersion.objects.filter(agent__tenant_id=tenant).order_by("agent_id", "number"):
                agents[tenant][version.agent.name] = (version.content or {}).get("description") or ""
        described = _definition(run.version)
        context |= {"tools": described["tools"], "servers": _Servers(described["named"], described["server"]), "agents": agents[tenant]}
        events = list(Event.objects.filter(run=run).order_by("sequence"))
        new: list[Any] = []
        for event in events:
            standing = rewrite(event.type, event.data, context)
            # The event keeps its id on the one of its own type (else the first): the others are added around it.
            own = next((n for n, (kind, _) in enumerate(standing) if kind == event.type), 0)
            for n, (kind, data) in enumerate(standing):
                if n == own:
                    event.type, event.data = kind, data
                    new.append(event)
                else:
                    new.append(Event(id=uuid.uuid4(), run=run, type=kind, data=data, timestamp=event.timestamp, agent_id=event.agent_id))
        renumbered = len(new) != len(events)
        for sequence, event in enumerate(new, 1):
            event.sequence, event.parent_id = sequence, parent
            parent = event.id
        if renumbered:
            # Numbered again from the top: out of the way of the unique (run, sequence) first.
            Event.objects.filter(run=run).delete()
            Event.objects.bulk_create(new)
        elif new:
            Event.objects.bulk_update(new, ["type", "data", "parent_id"])


class Migration(migrations.Migration):
    dependencies = [("agents", "0011_event_side_effects")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop, elidable=True)]
