"""The Try panel of the agent page: one interception point against a sample context, as a turn of the agent
would emit it."""

import json
from typing import Any

from agent_hooks import AgentContextBuilder
from django import forms

from agents.definitions import DefinitionContent
from agents.engine import server_tool_schema
from agents.policies import FRAMEWORK, POINTS
from agents.server_tools import REGISTRY

SAMPLE_MESSAGE = "Mail the quarterly figures to someone@outside.test, please."
SAMPLE_EMAIL = {"to": "someone@outside.test", "subject": "Quarterly figures", "body": "Here are the figures."}


def try_builder(agent: str, version: int, tenant: str) -> AgentContextBuilder:
    """Contexts as a turn of `agent` builds them (agents.policies.TurnPolicies.build), for the run id "try"."""
    builder = AgentContextBuilder(
        agent_id=agent, framework=FRAMEWORK, session_id="try", agent_name=agent, agent_version=str(version)
    )
    return builder.with_l2(tenant=tenant, extensions={"airlock": {"sessionId": None}})


def sample_context(
    point: str, builder: AgentContextBuilder, content: DefinitionContent, message: str | None
) -> dict[str, Any]:
    """A context for `point` as a turn of this agent would emit it: the user's `message` (the latest run's,
    when there is one) and a send_email call outside example.com."""
    message = message or SAMPLE_MESSAGE
    call = {"id": "call_1", "name": "send_email", "args": SAMPLE_EMAIL}
    tools: list[dict[str, Any]] = [
        *(
            {"name": t.name, "description": REGISTRY[t.name].description, "schema": server_tool_schema(t.name)}
            for t in content.tools
        ),
        *({"name": t.name, "description": t.description, "schema": t.parameters} for t in content.client_tools),
    ]
    model = content.model.label
    contexts = {
        "agent_startup": lambda: builder.agent_startup(tools_registered=[tool["name"] for tool in tools]),
        "input": lambda: builder.input(content=message),
        "pre_model_call": lambda: builder.pre_model_call(
            model_id=model,
            messages=[{"role": "system", "content": content.instructions}, {"role": "user", "content": message}],
            tools=tools,
        ),
        "post_model_call": lambda: builder.post_model_call(
            model_id=model, content="", tool_calls=[call], finish_reason="tool_calls"
        ),
        "pre_tool_call": lambda: builder.pre_tool_call(call_id="call_1", name="send_email", args=SAMPLE_EMAIL),
        "post_tool_call": lambda: builder.post_tool_call(
            call_id="call_1", name="send_email", args=SAMPLE_EMAIL, value=f"sent to {SAMPLE_EMAIL['to']}"
        ),
        "output": lambda: builder.output(content="Done. The card on file is 4111 1111 1111 1111."),
        "agent_shutdown": lambda: builder.agent_shutdown(reason="completed"),
    }
    return dict(contexts[point]())


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
