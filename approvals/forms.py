"""The inbox's answer forms: one Django form per request kind, its fields taken from the request (an input
request's from its requested JSON schema), and the bar that answers a run's approvals at once.

A valid form's `cleaned_data["response"]` is the `Response` it gives, checked as the respond API checks it;
an invalid one says why in `problem` (for the card) and `field_errors` (beside each input, by the name it is
posted as). The card (templates/approvals/request.html) renders the inputs itself: it is also pushed with
no form behind it.
"""

import json
import uuid
from typing import Any, ClassVar

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS
from pydantic import ValidationError

from agents.schema_forms import SchemaField, schema_fields
from approvals.models import PendingRequest, RequestKind
from approvals.responses import Response

_DECISIONS = [("approve", "Approve"), ("deny", "Deny")]


def _chosen(message: str) -> dict[str, str]:
    """The error messages of the buttons' choice: the card says which buttons there are."""
    return {"required": message, "invalid_choice": message}


class AnswerForm(forms.Form):
    """What the forms of every kind share: the request they answer and the `Response` they give. Each form
    names its `kind`: the kinds (approvals/kinds/) sit below the forms, which build the respond API's `Response`."""

    kind: ClassVar[RequestKind]

    # Where the continuation goes (SPEC section 9), posted by the trial page: the version it runs on (the agent
    # was edited since the turn ran), the checkpoint the answer is given at (an earlier one forks the session).
    definition_version = forms.IntegerField(required=False, min_value=1)
    checkpoint = forms.UUIDField(required=False)

    def __init__(self, pending: PendingRequest, data: Any) -> None:
        super().__init__(data)
        self.pending = pending

    @property
    def problem(self) -> str:
        """The card's message: the error about the answer as a whole, else the one of its buttons' choice."""
        errors = self.non_field_errors() or next(iter(self.errors.values()))
        return str(errors[0])

    @property
    def field_errors(self) -> dict[str, str]:
        return {name: str(errors[0]) for name, errors in self.errors.items() if name != NON_FIELD_ERRORS}

    def refuse(self, field: str, message: str, problem: str) -> None:
        self.add_error(field, message)
        self.add_error(None, problem)

    def give(self, answer: dict[str, Any]) -> None:
        """Build the `Response` (`cleaned_data["response"]`) unless an error was found already."""
        if self.errors:
            return
        where: dict[str, Any] = {"definitionVersion": self.cleaned_data.get("definition_version")}
        if self.cleaned_data.get("checkpoint"):
            where["checkpointId"] = str(self.cleaned_data["checkpoint"])
        try:
            self.cleaned_data["response"] = Response.model_validate(
                {"requestId": str(self.pending.id), **where, **answer}
            )
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in error.errors())
            self.add_error(None, f"Not a valid answer: {problems}")


class ApprovalForm(AnswerForm):
    kind = RequestKind.APPROVAL
    decision = forms.ChoiceField(choices=_DECISIONS, error_messages=_chosen("Choose Approve or Deny."))
    reason = forms.CharField(required=False)
    # "Don't ask again": in this session, or always (SPEC section 13); blank keeps asking.
    remember = forms.ChoiceField(
        choices=[("", "no"), ("session", "this session"), ("always", "always")],
        required=False,
        error_messages=_chosen("Choose whether to ask again: this session, always, or not remembered."),
    )
    remember_arguments_only = forms.BooleanField(required=False)
    arguments = forms.CharField(required=False)  # the call's arguments as edited, a JSON object

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        approved = data["decision"] == "approve"
        answer: dict[str, Any] = {
            "approved": approved,
            "reason": data["reason"] or None,
            # "…only with these exact arguments" narrows "don't ask again"; checking it alone remembers "always".
            "remember": data["remember"] or ("always" if data["remember_arguments_only"] else None),
            "rememberArgumentsOnly": data["remember_arguments_only"],
        }
        if approved and data["arguments"]:
            edited = self._edited(data["arguments"])
            if edited is not None and edited != self.pending.arguments:
                answer["overrideArguments"] = edited
        self.give(answer)
        return data

    def _edited(self, text: str) -> dict[str, Any] | None:
        try:
            edited = json.loads(text)
        except json.JSONDecodeError as error:
            self.refuse("arguments", str(error), "The edited arguments are not valid JSON.")
            return None
        if not isinstance(edited, dict):
            self.refuse("arguments", "Give a JSON object: {…}.", "The edited arguments are not valid.")
            return None
        return edited


class ClientToolForm(AnswerForm):
    kind = RequestKind.CLIENT_TOOL
    # "error" sends the error message, "reject" it as the client's refusal, "background" says it runs on; any
    # other value sends the result.
    decision = forms.CharField(required=False)
    result = forms.CharField(required=False)  # JSON, or plain text
    error_message = forms.CharField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        if data["decision"] == "background":
            self.give({"outcome": "background"})
        elif data["decision"] in ("error", "reject"):
            outcome = "failed" if data["decision"] == "error" else "rejected"
            if data["error_message"]:
                self.give({"outcome": outcome, "errorMessage": data["error_message"]})
            else:
                said = "Write the error message." if outcome == "failed" else "Write why the client refuses."
                self.refuse("error_message", said, said)
        elif not data["result"]:
            self.refuse("result", "Give the result (JSON or text).", "Give the tool's result.")
        else:
            try:
                self.give({"result": json.loads(data["result"])})
            except json.JSONDecodeError:
                self.give({"result": data["result"]})  # plain text is a result too
        return data


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

    kind = RequestKind.INPUT

    action = forms.ChoiceField(
        choices=[("accept", "Accept"), ("decline", "Decline"), ("cancel", "Cancel")],
        error_messages=_chosen("Choose Accept, Decline or Cancel."),
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


class QuestionForm(AnswerForm):
    """A question's answer: a choice's button (`choice`) or the words typed (`text`)."""

    kind = RequestKind.QUESTION

    choice = forms.CharField(required=False)
    text = forms.CharField(required=False, strip=True)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        answer = data.get("choice") or data.get("text")
        if not answer:
            self.refuse("text", "Choose an answer or write one.", "Choose an answer or write one.")
        else:
            self.give({"text": answer})
        return data


class PlanForm(AnswerForm):
    """A plan: approve it, or send it back with what to revise."""

    kind = RequestKind.PLAN

    decision = forms.ChoiceField(
        choices=[("approve", "Approve"), ("revise", "Revise")], error_messages=_chosen("Choose Approve or Revise.")
    )
    text = forms.CharField(required=False, strip=True)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        if data["decision"] == "approve":
            self.give({"approved": True})
        elif not data["text"]:
            self.refuse("text", "Say what to revise.", "Say what to revise.")
        else:
            self.give({"approved": False, "text": data["text"]})
        return data


class ContinuationForm(AnswerForm):
    kind = RequestKind.CONTINUATION
    decision = forms.ChoiceField(
        choices=[("continue", "Continue"), ("stop", "Stop")], error_messages=_chosen("Choose Continue or Stop.")
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors:
            self.give({"approved": data["decision"] == "continue"})
        return data


def answer_form(pending: PendingRequest, data: Any) -> AnswerForm:
    """The form of the request's kind (the one that names it), bound to what its card posted."""
    form = next(form for form in AnswerForm.__subclasses__() if form.kind == pending.kind)
    return form(pending, data)


class RequestIds(forms.Field):
    """The requests a batch bar lists (`request`, once per card); a value that is no id is left out."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: list[str] | None) -> list[uuid.UUID]:
        ids = []
        for text in value or []:
            try:
                ids.append(uuid.UUID(text))
            except ValueError:
                continue
        return ids


class BatchForm(forms.Form):
    """The "Approve all / Deny all" bar of a run: one decision and one reason for its listed approvals."""

    run = forms.UUIDField()
    request = RequestIds(required=False)
    decision = forms.ChoiceField(choices=_DECISIONS, error_messages=_chosen("Choose Approve all or Deny all."))
    reason = forms.CharField(required=False)


class SelectionForm(forms.Form):
    """The selection bar of the inbox: one decision and one reason for the approval requests selected on
    the cards (`selected`, once per ticked card), whatever runs they belong to."""

    selected = RequestIds(required=False)
    decision = forms.ChoiceField(
        choices=_DECISIONS, error_messages=_chosen("Choose Approve selected or Deny selected.")
    )
    reason = forms.CharField(required=False, max_length=2000)


class ClaimForm(forms.Form):
    """A card's Claim / Release button."""

    action = forms.ChoiceField(
        choices=[("claim", "Claim"), ("release", "Release")], error_messages=_chosen("Choose Claim or Release.")
    )
