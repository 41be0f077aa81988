"""Stored events in the Copilot SDK's payload shapes (SPEC section 10), as `agents.payloads` writes them: history
reads the same way as new runs. Only `data` changes, and only what the shapes rename or regroup; an event
already in the new shape is left as it is (the migration may run twice).

`rewrite(event_type, data, context)` is the whole change for one event, so that a test can read it."""

import json
import uuid
from typing import Any

from django.db import migrations

# The base of every answer event, before: {requestId, toolName, callId, answeredBy}.
COMPLETED = {
    "permission.completed",
    "external_tool.completed",
    "elicitation.completed",
    "user_input.completed",
    "exit_plan_mode.completed",
    "session_limits_exhausted.completed",
}
TYPES = {
    *COMPLETED,
    "tool.execution_start",
    "tool.execution_complete",
    "assistant.turn_start",
    "assistant.turn_end",
    "assistant.message",
    "assistant.usage",
    "permission.requested",
    "external_tool.requested",
    "elicitation.requested",
    "user_input.requested",
    "exit_plan_mode.requested",
    "session_limits_exhausted.requested",
    "request.terminated",
    "policy.verdict",
}


def _renamed(data: dict[str, Any]) -> dict[str, Any]:
    """`callId` as `toolCallId`, in place (keys keep their order)."""
    return {("toolCallId" if key == "callId" else key): value for key, value in data.items()}


def _tool_result(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"content": value}
    content = json.dumps(value, ensure_ascii=False, default=str)
    detailed = json.dumps(value, ensure_ascii=False, default=str, indent=2)
    return {"content": content, **({"detailedContent": detailed} if detailed != content else {})}


def _present(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _closed(data: dict[str, Any]) -> dict[str, Any]:
    """An answer event of a request closed unanswered kept `result: {kind, reason}`: now `closed`."""
    result = data.get("result")
    if isinstance(result, dict) and set(result) == {"kind", "reason"} and "outcome" not in data:
        data = {key: value for key, value in data.items() if key != "result"}
        data["closed"] = result
    return data


def rewrite(event_type: str, data: Any, context: dict[str, Any]) -> Any:
    """The new `data` of one stored event. `context` carries, per run, what pairs events up: `turnId` (the
    open assistant turn), `model`, `duration` (ms, of the run, for the one usage event it stored) and
    `sessionKey`; the caller starts a fresh one for each run."""
    if not isinstance(data, dict):
        return data
    if event_type == "assistant.turn_start":
        if "turnId" not in data:
            context["turnId"] = str(uuid.uuid4())
            return {**data, "turnId": context["turnId"]}
        context["turnId"] = data["turnId"]
        return data
    if event_type == "assistant.turn_end":
        if "turnId" in data:
            return data
        return {**data, "turnId": context.pop("turnId", None) or str(uuid.uuid4())}
    if event_type == "assistant.message":
        return data if "messageId" in data else {"messageId": str(uuid.uuid4()), **data}
    if event_type == "assistant.usage":
        if "model" in data:
            return data
        return {
            "model": context.get("model") or "unknown",
            "inputTokens": int(data.get("inputTokens") or 0),
            "outputTokens": int(data.get("outputTokens") or 0),
            "duration": int(context.get("duration") or 0),
        }
    if "callId" not in data and event_type not in ("permission.completed",) and not event_type.endswith(".requested"):
        return data
    if event_type == "tool.execution_start":
        return _renamed(data)
    if event_type == "tool.execution_complete":
        renamed = _renamed(data)
        if data.get("success"):
            renamed["result"] = _tool_result(data.get("result"))
        else:
            renamed.pop("result", None)
            renamed["error"] = {"message": str(data.get("error"))}
        return renamed
    if event_type in ("request.terminated", "policy.verdict"):
        return _renamed(data)
    if event_type in COMPLETED:
        if "callId" not in data and "requestId" in data:
            return data  # already new
        renamed = _renamed(data)
        renamed.setdefault("requestId", str(uuid.uuid4()))  # a rule's or a policy's decision had none
        if event_type == "exit_plan_mode.completed" and isinstance(renamed.get("result"), dict):
            result = renamed["result"]
            if "action" in result:
                del renamed["result"]
                approved = result.get("action") == "approve"
                renamed |= _present(approved=approved, selectedAction=result.get("action"), feedback=result.get("feedback"))
        if event_type != "permission.completed":
            renamed = _closed(renamed)
        return renamed
    if "permissionRequest" in data or "requestedSchema" not in data or "callId" not in data:
        return data  # a `*.requested` already new (the old ones were a request's whole wire form)
    call_id, tool, arguments = data.get("callId"), data.get("toolName") or None, data.get("arguments") or {}
    expires = _present(expiresAt=data.get("expiresAt"))
    request_id = data.get("requestId")
    if event_type == "permission.requested":
        policy = data.get("policy")
        if policy is not None and tool is None:
            asked = {"kind": "output", "arguments": arguments, "policy": policy}
        else:
            asked = {"kind": "policy" if policy else "tool", "toolCallId": call_id, "toolName": tool, "arguments": arguments}
            asked |= _present(policy=policy)
        return {"requestId": request_id, "permissionRequest": asked, **_present(message=data.get("message")), **expires}
    if event_type == "external_tool.requested":
        return {
            "requestId": request_id,
            "sessionId": context.get("sessionKey") or "",
            "toolCallId": call_id,
            "toolName": tool or "",
            "arguments": arguments,
            **expires,
        }
    if event_type == "elicitation.requested":
        return {
            "requestId": request_id,
            "message": data.get("message") or "",
            "requestedSchema": data.get("requestedSchema") or {"type": "object"},
            "mode": "form",
            "toolCallId": call_id,
            **_present(toolName=tool),
            "arguments": arguments,
            **expires,
        }
    if event_type == "user_input.requested":
        choices = [str(c) for c in arguments.get("choices") or []]
        freeform = arguments.get("allow_freeform")
        return {
            "requestId": request_id,
            "toolCallId": call_id,
            "question": data.get("message") or str(arguments.get("question") or ""),
            **_present(choices=choices or None),
            "allowFreeform": bool(freeform) if freeform is not None else not choices,
            **expires,
        }
    if event_type == "exit_plan_mode.requested":
        steps = [str(step) for step in arguments.get("steps") or []]
        return {
            "requestId": request_id,
            "toolCallId": call_id,
            "summary": f"A plan of {len(steps)} step{'s' if len(steps) != 1 else ''}",
            "planContent": "\n".join(f"{n}. {step}" for n, step in enumerate(steps, 1)),
            "actions": ["approve", "revise"],
            **expires,
        }
    if event_type == "session_limits_exhausted.requested":
        return {
            "requestId": request_id,
            "maxModelCalls": int(arguments.get("maxModelCalls") or 0),
            "usedModelCalls": int(arguments.get("usedModelCalls") or 0),
            **expires,
        }
    return data


def forward(apps: Any, schema_editor: Any) -> None:
    Event = apps.get_model("agents", "Event")
    Run = apps.get_model("agents", "Run")
    events = Event.objects.filter(type__in=TYPES).order_by("run_id", "sequence").only("id", "run_id", "type", "data")
    run_id, context, changed = None, {}, []
    for event in events.iterator(chunk_size=2000):
        if event.run_id != run_id:
            run_id = event.run_id
            context = _context(Run.objects.select_related("version", "session").get(pk=run_id))
        data = rewrite(event.type, event.data, context)
        if data != event.data:
            event.data = data
            changed.append(event)
        if len(changed) >= 1000:
            Event.objects.bulk_update(changed, ["data"])
            changed = []
    if changed:
        Event.objects.bulk_update(changed, ["data"])


def _context(run: Any) -> dict[str, Any]:
    definition = run.version.content
    model = definition.get("model") or {} if isinstance(definition, dict) else {}
    model = model.get("name") or model.get("connection")
    duration = (run.finished_at - run.created_at).total_seconds() * 1000 if run.finished_at else 0
    return {"model": model, "duration": round(duration), "sessionKey": run.session.key if run.session_id else None}


class Migration(migrations.Migration):
    dependencies = [("agents", "0007_checkpoints")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop, elidable=True)]
