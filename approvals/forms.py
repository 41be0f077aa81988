"""The inbox's forms: a card's answer (the form of the request's kind, `Kind.form` in its package, built on
`approvals.kinds.answer_form.AnswerForm`), the bars that answer a run's approvals or the selected cards at once,
and a card's claim."""

import uuid
from typing import Any

from django import forms

from approvals.kinds import KINDS
from approvals.kinds.answer_form import DECISIONS, AnswerForm, chosen
from approvals.models import PendingRequest


def answer_form(pending: PendingRequest, data: Any) -> AnswerForm:
    """The form of the request's kind, bound to what its card posted."""
    return KINDS[pending.kind].form(pending, data)


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
    decision = forms.ChoiceField(choices=DECISIONS, error_messages=chosen("Choose Approve all or Deny all."))
    reason = forms.CharField(required=False)


class SelectionForm(forms.Form):
    """The selection bar of the inbox: one decision and one reason for the approval requests selected on
    the cards (`selected`, once per ticked card), whatever runs they belong to."""

    selected = RequestIds(required=False)
    decision = forms.ChoiceField(choices=DECISIONS, error_messages=chosen("Choose Approve selected or Deny selected."))
    reason = forms.CharField(required=False, max_length=2000)


class ClaimForm(forms.Form):
    """A card's Claim / Release button."""

    action = forms.ChoiceField(
        choices=[("claim", "Claim"), ("release", "Release")], error_messages=chosen("Choose Claim or Release.")
    )
