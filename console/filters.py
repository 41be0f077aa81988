"""What list pages (runs, audit) share in their filter forms."""

from typing import Any

from django import forms

# Pickers filter as soon as they change (static/console/console.js: the Content-Security-Policy runs no inline
# handler); a text field waits for Enter (its change would fire too).
SUBMIT_ON_CHANGE = {"data-submit-on-change": True}


class AgentFilters(forms.Form):
    """An agent picker, read from the query string; an invalid field is ignored."""

    agent = forms.ChoiceField(required=False, widget=forms.Select(attrs=SUBMIT_ON_CHANGE))

    def __init__(self, data: Any, agent_names: list[str]) -> None:
        super().__init__(data)
        agent = self.fields["agent"]
        assert isinstance(agent, forms.ChoiceField)
        agent.choices = [("", "Any agent"), *((name, name) for name in agent_names)]


class ListFilters(AgentFilters):
    """An agent and a date range."""

    date_from = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date", **SUBMIT_ON_CHANGE}))
    date_to = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date", **SUBMIT_ON_CHANGE}))
