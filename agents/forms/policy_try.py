"""The Try panel of the agent page: one interception point against a sample context, as a turn of the agent
would emit it."""

import json
from typing import Any

from agent_hooks import AgentContextBuilder
from django import forms

from agents import policies
from agents.definitions import DefinitionContent
from agents.engine import server_tool_schema
from agents.policies import POINTS, SampleAgent

# The samples are the policies' (agents/policies/samples.py: saving a definition evaluates them too).
from agents.policies import SAMPLE_EMAIL as SAMPLE_EMAIL
from agents.policies import SAMPLE_MESSAGE as SAMPLE_MESSAGE
from agents.policies import try_builder as try_builder


def try_context(
    point: str, builder: AgentContextBuilder, content: DefinitionContent, message: str | None
) -> dict[str, Any]:
    """A context for `point` as a turn of this agent would emit it (agents.policies.sample_context): the user's
    `message` (the latest run's, when there is one) and a send_email call outside example.com."""
    return policies.sample_context(point, builder, SampleAgent.of(content, server_tool_schema), message)


class PolicyTryForm(forms.Form):
    """One interception point and the context to emit there, as JSON."""

    point = forms.ChoiceField(choices=[(point, point) for point in POINTS], initial="pre_tool_call")
    context = forms.CharField(widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false"}), strip=False)

    def clean_context(self) -> dict[str, Any]:
        try:
            context = json.loads(self.cleaned_data["context"])
        except json.JSONDecodeError as error:
            raise forms.ValidationError(
                f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."
            ) from None
        if not isinstance(context, dict):
            raise forms.ValidationError("Give a JSON object: an agent-hooks context.")
        if context.get("interception_point") not in POINTS:
            raise forms.ValidationError(f"Its interception_point must be one of: {', '.join(POINTS)}.")
        if "target" not in context:
            raise forms.ValidationError("It needs a target: what the point guards (the sample shows one).")
        return context

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        point, context = cleaned.get("point"), cleaned.get("context")
        if point and context and context["interception_point"] != point:
            asked = context["interception_point"]
            self.add_error("context", f"This context is for {asked}; pick that point, or load the sample for {point}.")
        return cleaned
