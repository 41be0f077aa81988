"""Every event type's payload model by type (`PAYLOADS`), the envelope, and what is read from them: `is_stored`,
`validate` (what the tests check) and `event_schema()` (served at `/api/events/schema.json`)."""

from typing import Any

from agents.payloads.base import EXTENSION_TYPES, EventType, Payload, Shape, optional
from agents.payloads.messages import (
    AssistantMessage,
    AssistantMessageDelta,
    AssistantReasoning,
    AssistantReasoningDelta,
    AssistantUsage,
    DocumentAttached,
    TurnEnd,
    TurnStart,
    UserMessage,
)
from agents.payloads.requests import (
    ElicitationCompleted,
    ElicitationRequested,
    ExitPlanModeCompleted,
    ExitPlanModeRequested,
    RequestAnswered,
    RequestApprovalRecorded,
    RequestTerminated,
    SessionLimitsExhaustedCompleted,
    SessionLimitsExhaustedRequested,
    UserInputCompleted,
    UserInputRequested,
)
from agents.payloads.run import (
    Abort,
    PolicyVerdict,
    RunAwaiting,
    RunBlocked,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunRetrying,
    RunStarted,
    SessionError,
    SessionIdle,
    SessionTitleChanged,
)
from agents.payloads.subagents import SubagentCompleted, SubagentFailed, SubagentStarted
from agents.payloads.tools import (
    ExternalToolCompleted,
    ExternalToolRequested,
    PermissionCompleted,
    PermissionRequested,
    ToolExecutionComplete,
    ToolExecutionPartialResult,
    ToolExecutionProgress,
    ToolExecutionStart,
)

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
        RequestApprovalRecorded,
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
