"""What the inbox's answer forms share: one Django form per request kind (`Kind.form`, declared in the kind's
package), bound to the request it answers and to what its card posted.

A valid form's `cleaned_data["response"]` is the `Response` it gives, checked as the respond API checks it;
an invalid one says why in `problem` (for the card) and `field_errors` (beside each input, by the name it is
posted as). The card (templates/approvals/request.html) renders the inputs itself: it is also pushed with
no form behind it.
"""

from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS
from pydantic import ValidationError

from approvals.models import PendingRequest
from approvals.responses import Response

# The buttons of a yes or no: an approval's card, a run's "Approve all" bar, the inbox's selection bar.
DECISIONS = [("approve", "Approve"), ("deny", "Deny")]


def chosen(message: str) -> dict[str, str]:
    """The error messages of the buttons' choice: the card says which buttons there are."""
    return {"required": message, "invalid_choice": message}


class AnswerForm(forms.Form):
    """What the forms of every kind share: the request they answer and the `Response` they give. Each kind's
    package declares its form (`Kind.form`)."""

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
