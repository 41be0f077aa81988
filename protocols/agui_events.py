"""Airlock's run events as AG-UI 1.0 events (SPEC section 16), built with the `ag-ui-protocol` package's models.

`AguiTranslator` turns the envelopes of one Airlock run (SPEC sections 5 and 10) into the AG-UI events of one AG-UI
run, in order: the model's text as `TEXT_MESSAGE_START/CONTENT/END`, its tool calls as `TOOL_CALL_START/ARGS/END`,
what a tool returned as `TOOL_CALL_RESULT`, and the run's end as `RUN_FINISHED` (outcome `success`, `interrupt` or
`cancelled`) or `RUN_ERROR`. `interrupt_of` is one pending request as an AG-UI `Interrupt`, with the JSON Schema of
the answer its kind takes (`response_schema`).
"""

import json
from collections.abc import Iterable
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from agents.payloads import EventType
from approvals.kinds import KINDS
from approvals.models import PendingRequest
from approvals.responses import Response

# The AG-UI version this producer speaks (RUN_STARTED.protocolVersion).
PROTOCOL_VERSION = "1.0"

# The kinds whose request is a frontend tool's call, no interrupt (`Kind.interrupt_reason` None): the run finishes
# `success` with the call among `pendingToolCallIds`, and the client answers it with a tool message.
TOOL_CALL_KINDS = [name for name, kind in KINDS.items() if kind.interrupt_reason is None]

# Airlock's own facts on an AG-UI object go under this metadata key (the key `ag-ui` is the protocol's).
METADATA_KEY = "airlock"

_RESPONSE_PROPERTIES: dict[str, Any] = Response.model_json_schema(by_alias=True)["properties"]


def _field_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one respond field (camelCase `name`), without pydantic's title, default and null branch."""
    schema = dict(_RESPONSE_PROPERTIES[name])
    branches = [branch for branch in schema.pop("anyOf", []) if branch.get("type") != "null"]
    if len(branches) == 1:
        schema.update(branches[0])
    elif branches:
        schema["anyOf"] = branches
    schema.pop("title", None)
    schema.pop("default", None)
    return schema


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def response_schema(pending: PendingRequest) -> dict[str, Any]:
    """The JSON Schema of a resume entry's `payload` for `pending`: the respond fields its kind takes (SPEC sections 4
    and 9), narrowed by its kind to what this request accepts (`Kind.narrowed`: a tool's parameters, a question's
    choices, the requested form)."""
    kind = KINDS[pending.kind]
    names = sorted(_camel(field) for field in kind.fields)
    if kind.remembers(pending):
        names += ["remember", "expiresAt"]
    properties = kind.narrowed(pending, {name: _field_schema(name) for name in names})
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if kind.required is not None:
        schema["required"] = [_camel(kind.required)]
    return schema


def interrupt_of(pending: PendingRequest) -> Interrupt:
    """`pending` as an AG-UI interrupt: its id is the request's, answered by a resume entry of the next run. Its
    `toolCallId` is the call it is about, none for a kind about no call (`Kind.about_call`); its metadata has Airlock's
    facts, with what its kind adds (`Kind.interrupt_facts`)."""
    kind = KINDS[pending.kind]
    assert kind.interrupt_reason is not None, f"a {pending.kind} is no interrupt"
    message = pending.message or kind.interrupt_message.format(
        agent=pending.agent.name, tool=pending.tool_name or "a tool"
    )
    facts = {"kind": pending.kind, "runId": str(pending.run_id), "toolName": pending.tool_name or None}
    return Interrupt(
        id=str(pending.id),
        reason=kind.interrupt_reason,
        message=message,
        tool_call_id=(pending.call_id or None) if kind.about_call else None,
        response_schema=response_schema(pending),
        expires_at=pending.expires_at.isoformat() if pending.expires_at else None,
        metadata={METADATA_KEY: {**facts, **kind.interrupt_facts(pending)}},
    )


def agui_run_started(thread_id: str, run_id: str, airlock_run_id: str | None) -> RunStartedEvent:
    """RUN_STARTED of the AG-UI run `run_id`; the Airlock run it follows (when there is one) in its metadata."""
    facts = {"runId": airlock_run_id, "sessionId": thread_id}
    return RunStartedEvent(
        thread_id=thread_id, run_id=run_id, protocol_version=PROTOCOL_VERSION, metadata={METADATA_KEY: facts}
    )


def resume_outcomes(outcomes: list[dict[str, Any]]) -> CustomEvent:
    """What became of each answer the input carried (its resume entries, its tool results): the respond contract's
    outcome (`accepted`, `already_resolved` when it was answered meanwhile elsewhere, e.g. in the inbox, …)."""
    return CustomEvent(name="airlock.answers", value=outcomes)


class AguiTranslator:
    """The AG-UI events of one AG-UI run, from the envelopes of the Airlock run it streams or follows.

    A sub-agent's events (envelope `agentId`) stay inside its call: the parent's tool call and its result stand for
    it. `answered_calls` are the calls whose results the client sent in this run's input: their tool messages are
    the client's already, so no TOOL_CALL_RESULT repeats them."""

    def __init__(self, thread_id: str, run_id: str, answered_calls: Iterable[str] = ()) -> None:
        self.thread_id, self.run_id = thread_id, run_id
        self.answered_calls = set(answered_calls)
        self.open_texts: list[str] = []
        self.ended_texts: set[str] = set()
        self.announced_calls: set[str] = set()
        self.results: set[str] = set()

    def envelope(self, envelope: dict[str, Any]) -> list[BaseEvent]:
        """The AG-UI events one Airlock event makes (none for most)."""
        if envelope.get("agentId"):
            return []
        kind, data = envelope.get("type"), envelope.get("data") or {}
        if kind == EventType.ASSISTANT_MESSAGE_DELTA:
            return self._delta(data["messageId"], data.get("deltaContent") or "")
        if kind == EventType.ASSISTANT_MESSAGE:
            return self._message(data)
        if kind == EventType.TOOL_EXECUTION_COMPLETE:
            return self._result(data)
        return []

    def _delta(self, message_id: str, delta: str) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if message_id in self.ended_texts:
            return events
        if message_id not in self.open_texts:
            self.open_texts.append(message_id)
            events.append(TextMessageStartEvent(message_id=message_id, role="assistant"))
        if delta:
            events.append(TextMessageContentEvent(message_id=message_id, delta=delta))
        return events

    def _end_text(self, message_id: str) -> list[BaseEvent]:
        self.open_texts.remove(message_id)
        self.ended_texts.add(message_id)
        return [TextMessageEndEvent(message_id=message_id)]

    def _message(self, data: dict[str, Any]) -> list[BaseEvent]:
        message_id, content = data["messageId"], data.get("content") or ""
        events: list[BaseEvent] = []
        if message_id in self.open_texts:
            events += self._end_text(message_id)
        elif content and message_id not in self.ended_texts:
            # Followed from the stored events (deltas are never stored): the whole text in one piece.
            events += self._delta(message_id, content)
            events += self._end_text(message_id)
        for call in data.get("toolRequests") or []:
            call_id = call["toolCallId"]
            if call_id in self.announced_calls:
                continue
            self.announced_calls.add(call_id)
            events += [
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=call["name"], parent_message_id=message_id),
                ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(call.get("arguments") or {})),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
        return events

    def _result(self, data: dict[str, Any]) -> list[BaseEvent]:
        call_id = data["toolCallId"]
        if call_id in self.answered_calls or call_id in self.results:
            return []
        self.results.add(call_id)
        if data.get("success"):
            content = (data.get("result") or {}).get("content") or ""
        else:
            content = (data.get("error") or {}).get("message") or "The tool failed."
        return [ToolCallResultEvent(message_id=f"result-{call_id}", tool_call_id=call_id, content=content, role="tool")]

    def close_open(self) -> list[BaseEvent]:
        """TEXT_MESSAGE_END for every text still open: a run ends with none open."""
        events: list[BaseEvent] = []
        for message_id in list(self.open_texts):
            events += self._end_text(message_id)
        return events

    def finished(self, result: dict[str, Any], waiting: list[PendingRequest]) -> list[BaseEvent]:
        """The run's end, from Airlock's run result and the requests it waits on (`waiting`, read with their
        agent and run version): RUN_FINISHED with its outcome, or RUN_ERROR."""
        events = self.close_open()
        status = result.get("status")
        if status in ("failed", "blocked"):
            error: dict[str, Any] = result["error"] if isinstance(result.get("error"), dict) else {}
            message = error.get("message") or f"The run ended {status}."
            return [*events, RunErrorEvent(message=message, code=error.get("code") or f"run_{status}")]
        if status == "cancelled":
            return [*events, self._finished(RunFinishedCancelledOutcome())]
        interrupts = [interrupt_of(p) for p in waiting if p.kind not in TOOL_CALL_KINDS]
        if interrupts:
            return [*events, self._finished(RunFinishedInterruptOutcome(interrupts=interrupts))]
        calls = [p.call_id for p in waiting if p.kind in TOOL_CALL_KINDS]
        outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=calls or None)
        return [*events, self._finished(outcome, result.get("output"))]

    def _finished(
        self,
        outcome: RunFinishedSuccessOutcome | RunFinishedInterruptOutcome | RunFinishedCancelledOutcome,
        output: Any = None,
    ) -> RunFinishedEvent:
        return RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, result=output)
