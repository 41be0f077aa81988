"""An input request: an MCP server's elicitation, answered with an action and content that fits its requested
schema."""

import json
from collections.abc import Mapping
from typing import Any

from django import forms

from agents.definitions import object_schema
from agents.engine import Answers
from agents.events import EventLog
from agents.models import AgentVersion, RunStatus
from agents.payloads import ElicitationCompleted, ElicitationRequested, Payload, RequestedSchema
from agents.request_kinds import RequestKind
from agents.schema_forms import SchemaField, schema_fields
from agents.schemas import schema_refusal
from approvals.external_wire import AskedTool, OpenRequest, invalid
from approvals.kinds.answer_form import AnswerForm, chosen
from approvals.kinds.base import AnswerRefused, Kind, own_state, schema_problems
from approvals.models import PendingRequest

# The keywords of a schema whose every problem is one field's: anything else (patternProperties, minProperties,
# dependencies, references between properties) keeps schema_problems' words.
FORM_KEYWORDS = frozenset({"$schema", "type", "title", "description", "properties", "required", "additionalProperties"})


def form_problems(schema: dict[str, Any], content: Any) -> str:
    """Where `content` does not fit `schema`, in the words of the form the schema generates (its fields'
    labels, agents/schema_forms.py): "Day is required." rather than "(content): 'day' is a required property".
    A problem that is not one field's (a schema refused, a value that is no object) keeps schema_problems' words."""
    problems = schema_problems(schema, content)
    plain = set(schema) <= FORM_KEYWORDS and "$ref" not in json.dumps(schema) and not schema_refusal(schema)
    if not problems or not plain or not isinstance(content, dict):
        return problems
    fields = {f.name: f for f in schema_fields(schema)}
    properties = schema.get("properties") or {}
    required = [name for name in schema.get("required") or [] if name not in content]
    said = [f"{fields[name].label if name in fields else repr(name)} is required." for name in required]
    for name, value in content.items():
        if name not in fields:
            if schema.get("additionalProperties") is False:
                said.append(f"{name!r} is not a field of this form.")
            continue
        # Checked against its own property's schema, the problem is named by the field's label.
        wrong = schema_problems(properties[name], value, root=fields[name].label)
        if wrong:
            said.append(f"{wrong}.")
    return " ".join(said) or problems


class SchemaValue(forms.Field):
    """One property of a requested schema, typed as the schema asks; None when left blank (the schema says
    whether that is allowed). A checkbox is a `BooleanField` instead: it is never left out."""

    def __init__(self, spec: SchemaField) -> None:
        super().__init__(required=False, label=spec.label)
        self.spec = spec

    def to_python(self, value: str | None) -> Any:
        if value is None or not value.strip():
            return None
        widget = self.spec.input
        typed = value if widget == "text" else value.strip()  # text keeps its spaces
        try:
            return _typed(typed, widget, self.spec.choices)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None


def _typed(value: str, widget: str, choices: list[Any]) -> Any:
    """A posted value as the JSON value its schema asks for; ValueError with a message for the field."""
    if widget == "integer":
        try:
            return int(value)
        except ValueError:
            raise ValueError("Give a whole number.") from None
    if widget == "number":
        try:
            number = float(value)
        except ValueError:
            raise ValueError("Give a number.") from None
        return int(number) if number.is_integer() and "." not in value else number
    if widget == "select":
        for choice in choices:
            if str(choice) == value:
                return choice
        raise ValueError("Choose one of the options.")
    if widget == "json":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ValueError("Not valid JSON.") from None
    return value


class InputForm(AnswerForm):
    """An elicitation's answer: its content has one field per property of the requested schema, posted as
    `field-<property>`, or is a JSON object as typed when the schema has no properties."""

    action = forms.ChoiceField(
        choices=[("accept", "Accept"), ("decline", "Decline"), ("cancel", "Cancel")],
        error_messages=chosen("Choose Accept, Decline or Cancel."),
    )
    content = forms.CharField(required=False)

    def __init__(self, pending: PendingRequest, data: Any) -> None:
        super().__init__(pending, data)
        self.properties = schema_fields(pending.requested_schema)
        if self.data.get("action") == "accept":  # declined or cancelled, what was typed counts for nothing
            for spec in self.properties:
                self.fields[f"field-{spec.name}"] = (
                    forms.BooleanField(required=False) if spec.input == "checkbox" else SchemaValue(spec)
                )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            if "action" not in self.errors:
                self.add_error(None, "Check the highlighted fields.")
        elif data["action"] != "accept":
            self.give({"action": data["action"]})
        elif self.properties:
            content = {spec.name: data[f"field-{spec.name}"] for spec in self.properties}
            self.give({"action": "accept", "content": {k: v for k, v in content.items() if v is not None}})
        else:
            try:
                self.give({"action": "accept", "content": json.loads(data["content"] or "{}")})
            except json.JSONDecodeError:
                self.refuse("content", "Not valid JSON.", "The answer is not valid JSON.")
        return data


class Input(Kind):
    name = RequestKind.INPUT
    form = InputForm
    waits = 4
    awaiting = RunStatus.AWAITING_INPUT
    fields = frozenset({"action", "content"})
    required = "action"
    stored = ("requestId", "action", "content")
    takes = "An input request takes `action` (and `content`)."
    asks = "asks through"
    decisions = {
        "input-accepted": "input accepted",
        "input-declined": "input declined",
        "input-cancelled": "input cancelled",
    }
    keys = {"a": ["accept"], "d": ["decline"], "e": "field"}
    interrupt_reason = "input"
    interrupt_message = "{agent} needs input for {tool}."
    cancel_answer = {"action": "cancel"}
    audit_filters = {"input": {}}

    def done(self, pending: PendingRequest, given: Mapping[str, Any]) -> str:
        return f"Answered {pending.tool_name} ({given.get('action')})"

    def glance(self, pending: PendingRequest) -> str:
        return pending.message or super().glance(pending)

    def check(self, pending: PendingRequest, wire: dict[str, Any], modes: Mapping[str, str] | None) -> None:
        super().check(pending, wire, modes)
        if wire.get("action") == "accept":
            problems = form_problems(pending.requested_schema or {"type": "object"}, wire.get("content") or {})
            if problems:
                raise AnswerRefused("invalid_content", f"The content does not fit the requested schema: {problems}")

    def narrowed(self, pending: PendingRequest, properties: dict[str, Any]) -> dict[str, Any]:
        """`content` as the requested schema."""
        return {**properties, "content": pending.requested_schema or {"type": "object"}}

    def read_json(self, value: Any) -> dict[str, Any] | None:
        return {"action": "accept", "content": value} if isinstance(value, dict) else None

    def external_fields(self, version: AgentVersion, body: OpenRequest, asked: AskedTool | None) -> dict[str, Any]:
        """Its message, and the schema of what it asks for (an object's, as a definition's tool parameters)."""
        if body.message is None:
            raise invalid("message", "an input request says what it asks for")
        schema = body.requested_schema or {"type": "object", "properties": {}}
        try:
            object_schema(schema)
        except ValueError as error:
            raise invalid("requestedSchema", str(error)) from None
        return {"message": body.message, "requested_schema": schema}

    def to_engine(self, pending: PendingRequest, answers: Answers) -> None:
        given = self._given(pending)
        answers.answer_input(pending.call_id, {**given, "engine_state": own_state(pending) or None})

    def record_carried(self, pending: PendingRequest, log: EventLog) -> None:
        given = self._given(pending)
        log.record(ElicitationCompleted(requestId=str(pending.id), **given))
        log.record(self.answered(pending))

    @staticmethod
    def _given(pending: PendingRequest) -> dict[str, Any]:
        answer = pending.answer or {}
        return {"action": answer["action"], "content": answer.get("content")}

    def requested(self, pending: PendingRequest) -> Payload:
        return ElicitationRequested(
            requestId=str(pending.id),
            message=pending.message,
            requestedSchema=RequestedSchema.of(pending.requested_schema),
            mode="form",
            toolCallId=pending.call_id,
        )

    def unanswered(self, pending: PendingRequest) -> Payload:
        return ElicitationCompleted(requestId=str(pending.id), action="cancel")

    def audit(self, answer: dict[str, Any], rule_id: str | None) -> tuple[str, dict[str, Any]]:
        action = str(answer.get("action") or "")
        decision = {"accept": "input-accepted", "decline": "input-declined", "cancel": "input-cancelled"}.get(
            action, f"input-{action}"
        )
        return decision, {"action": action or None, "content": answer.get("content")}


KIND = Input()
