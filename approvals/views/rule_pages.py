"""The rules page: remembered rules with filters, revoking them, and the admin's "New rule" form.

The form's conditions are a table of rows (console/rows.py): inputs named `condition-<key>-<field>`, and an
error found at `conditions.2.value` put back next to the value input of the third kept row.
"""

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import F, QuerySet
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from pydantic import ValidationError

from agents.definition_checks import error_map
from agents.models import Agent, AgentVersion
from approvals.actions import do_edit_rule, do_revoke_rule, remember_rule
from approvals.getters import get_rule_for
from approvals.models import Rule
from approvals.remembered_rules import (
    RuleEdit,
    RuleIn,
    RuleRefused,
    decisions_since,
    describe_conditions,
    remembered_arguments,
    tenant_rules,
)
from console.models import Tenant
from console.rows import Row, RowKind
from console.tenancy import ConsoleRequest, role_required

RULES_PER_PAGE = 50
# The window of the "decided" column: the calls each rule approved lately.
DECIDED_WINDOW = timedelta(days=30)

OPERATORS = [
    ("equals", "= equals"),
    ("not_equals", "!= not equals"),
    ("lt", "< less than"),
    ("lte", "<= at most"),
    ("gt", "> greater than"),
    ("gte", ">= at least"),
    ("in", "in one of"),
    ("not_in", "not in none of"),
]
SCOPES = [("any", "Any arguments"), ("exact", "Exact arguments"), ("conditions", "Conditions")]
CONDITIONS = RowKind(
    "condition",
    ("argument", "operator", "value"),
    error_field="value",
    wire="conditions",
    blank={"operator": "equals"},
    choices=("operator",),
)
_SUBMIT_ON_CHANGE = {"data-submit-on-change": True}  # see static/console/console.js


class RuleFilterForm(forms.Form):
    """The filters of the rule list, read from the query string; an invalid field is ignored."""

    agent = forms.ChoiceField(required=False, widget=forms.Select(attrs=_SUBMIT_ON_CHANGE))
    tool = forms.ChoiceField(required=False, widget=forms.Select(attrs=_SUBMIT_ON_CHANGE))
    # Ended rules, revoked or expired, are kept for the record and shown together.
    revoked = forms.BooleanField(
        required=False, label="Show revoked and expired", widget=forms.CheckboxInput(_SUBMIT_ON_CHANGE)
    )

    def __init__(self, data: Any, agent_names: list[str], tool_names: list[str]) -> None:
        # Its own ids: the "New rule" form on the same page has an agent picker too.
        super().__init__(data, auto_id="filter_%s")
        for name, choices in (("agent", [("", "Any agent")]), ("tool", [("", "Any tool")])):
            picker = self.fields[name]
            assert isinstance(picker, forms.ChoiceField)
            names = agent_names if name == "agent" else tool_names
            picker.choices = [*choices, *((value, value) for value in names)]

    def rules(self, tenant: Tenant) -> QuerySet[Rule]:
        """The tenant's rules these filters pick."""
        self.is_valid()
        wanted = self.cleaned_data
        return tenant_rules(
            tenant, agent=wanted.get("agent"), tool=wanted.get("tool"), revoked=bool(wanted.get("revoked"))
        )


@dataclass
class RuleRow:
    """A rule as the list shows it: what it approves in words (`narrowing`), the exact arguments it approves if
    known, whether it expired, how many calls it decided in the last 30 days, and its Edit form."""

    rule: Rule
    decided: int = 0
    edit: "RuleEditForm | None" = None

    @property
    def narrowing(self) -> str:
        return narrowing_of(self.rule)

    @property
    def expired(self) -> bool:
        return self.rule.expired()

    @property
    def conditions(self) -> str:
        return describe_conditions(self.rule.conditions)

    @property
    def arguments(self) -> str | None:
        arguments = remembered_arguments(self.rule)
        return None if arguments is None else json.dumps(arguments, indent=2, ensure_ascii=False)


def narrowing_of(rule: Rule) -> str:
    if rule.arguments_hash:
        return "exact"
    return "conditions" if rule.conditions else "any"


_EMPTY = {
    "arguments": "Give the exact arguments as a JSON object.",
    "conditions": 'Give the conditions as a JSON list, like [{"argument": "amount", "operator": "lt", "value": 100}].',
}


class RuleEditForm(forms.Form):
    """A rule's Edit form (admins): what it approves (any arguments, exact ones as JSON, conditions as a JSON
    list), until when, and for a session rule whether it holds in every session. `is_valid()` builds `edit`,
    checked as `PATCH /api/rules/{id}` checks it."""

    narrowing = forms.ChoiceField(choices=SCOPES, widget=forms.RadioSelect)
    arguments = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 3}))
    conditions = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 3}))
    expires = forms.DateTimeField(
        required=False, label="Expires", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    scope = forms.ChoiceField(choices=[("session", "This session only"), ("always", "Every session")], required=False)

    def __init__(self, rule: Rule, data: QueryDict | None = None) -> None:
        initial = {
            "narrowing": narrowing_of(rule),
            "arguments": json.dumps(remembered_arguments(rule), indent=2) if rule.arguments_hash else "",
            "conditions": json.dumps(rule.conditions, indent=2) if rule.conditions else "",
            "expires": timezone.localtime(rule.expires_at).strftime("%Y-%m-%dT%H:%M") if rule.expires_at else None,
            "scope": rule.scope,
        }
        super().__init__(data, initial=initial, auto_id=f"edit-{rule.id}-%s")
        self.rule = rule
        self.edit: RuleEdit | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        wire: dict[str, Any] = {"expiresAt": data["expires"].isoformat() if data.get("expires") else None}
        if data["narrowing"] == "any":
            wire["arguments"], wire["conditions"] = None, []
        else:
            field = "arguments" if data["narrowing"] == "exact" else "conditions"
            if not data[field].strip():
                self.add_error(field, _EMPTY[field])
                return data
            try:
                wire[field] = json.loads(data[field])
            except json.JSONDecodeError as error:
                self.add_error(field, f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno}).")
                return data
        if self.rule.session_id is not None and data.get("scope") == "always":
            wire["scope"] = "always"
        try:
            self.edit = RuleEdit.model_validate(wire)
        except ValidationError as error:
            for path, message in error_map(error).items():
                name = {"expiresAt": "expires"}.get(path.split(".")[0], path.split(".")[0])
                self.add_error(name if name in self.fields else None, f"{path}: {message}")
        return data


class RuleForm(forms.Form):
    """The "New rule" form. `is_valid()` also checks the condition rows and builds `wanted`."""

    agent = forms.ChoiceField(error_messages={"required": "Choose the agent."})
    tool_name = forms.CharField(
        max_length=200, label="Tool", error_messages={"required": "Give the name of the tool the rule approves."}
    )
    scope = forms.ChoiceField(choices=SCOPES, initial="any", widget=forms.RadioSelect)
    arguments = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 4}))

    def __init__(self, data: QueryDict | None, agent_names: list[str]) -> None:
        super().__init__(data)
        agent = self.fields["agent"]
        assert isinstance(agent, forms.ChoiceField)
        agent.choices = [("", "Choose an agent…"), *((name, name) for name in agent_names)]
        self.rows = CONDITIONS.posted(data) if data is not None else []
        self.wanted: RuleIn | None = None

    def is_valid(self) -> bool:
        valid = super().is_valid()
        if self.is_bound and not self.rows:
            self.rows = [CONDITIONS.new()]
        return valid and not any(row.errors for row in self.rows)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        scope = data.get("scope", "any")
        wire: dict[str, Any] = {"agent": data.get("agent", ""), "toolName": data.get("tool_name", "")}
        if scope == "exact":
            wire["arguments"] = self._arguments()
        elif scope == "conditions":
            wire["conditions"] = [_condition(row) for row in self.rows]
            if not self.rows:
                self.add_error("scope", "Add at least one condition.")
        try:
            wanted = RuleIn.model_validate(wire)
        except ValidationError as error:
            for path, message in error_map(error).items():
                self.place(path, _readable(path, message))
        else:
            if not self.errors and not any(row.errors for row in self.rows):
                self.wanted = wanted
        return data

    def _arguments(self) -> dict[str, Any] | None:
        text = self.cleaned_data.get("arguments", "").strip()
        if not text:
            self.add_error("arguments", "Give the exact arguments as a JSON object.")
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            self.add_error("arguments", f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno}).")
            return None
        if not isinstance(value, dict):
            self.add_error("arguments", 'Give a JSON object, like {"to": "ops@example.com"}.')
            return None
        return value

    def place(self, path: str, message: str) -> None:
        """Put an error (a wire path like `conditions.0.value`) next to the input it is about, unless
        that input shows an error already (a value that is not JSON is also a missing value)."""
        if CONDITIONS.place(self.rows, path, message):
            return
        field_name = {"agent": "agent", "toolName": "tool_name", "arguments": "arguments"}.get(path.split(".")[0])
        if field_name is None:
            self.add_error(None, message)
        elif field_name not in self.errors:
            self.add_error(field_name, message)


def _readable(path: str, message: str) -> str:
    if message.startswith("String should have at least 1 character"):
        return "Give the name of the argument." if path.endswith(".argument") else "Fill this in."
    return message[:1].upper() + message[1:]


def _condition(row: Row) -> dict[str, Any]:
    condition: dict[str, Any] = {"argument": row.values["argument"], "operator": row.values["operator"]}
    text = row.values["value"]
    if not text:
        row.errors["value"] = 'Give a value as JSON: 100, "EUR" or ["EUR", "USD"].'
        return condition
    try:
        condition["value"] = json.loads(text)
    except json.JSONDecodeError:
        row.errors["value"] = f'Not valid JSON; text goes in quotes, like "{text}".'
    return condition


def _names(request: ConsoleRequest) -> tuple[list[str], list[str]]:
    """The tenant's live agents and the tool names its rules are for, for the pickers."""
    tenant = request.tenant
    agents = Agent.objects.live().names_in(tenant)
    tools = list(tenant_rules(tenant).order_by("tool_name").values_list("tool_name", flat=True).distinct())
    return agents, tools


def _gated_tools(request: ConsoleRequest) -> list[str]:
    """Tool names a rule can be made for (server tools that ask "always"), offered as suggestions."""
    versions = AgentVersion.objects.filter(
        agent__tenant=request.tenant,
        agent__deleted_at__isnull=True,
        number=F("agent__current_version"),
    )
    names = set()
    for version in versions:
        names |= {tool.name for tool in version.definition.tools if tool.approval == "always"}
    return sorted(names)


def _page(request: ConsoleRequest, form: RuleForm | None, editing: RuleEditForm | None = None) -> HttpResponse:
    agents, tools = _names(request)
    filters = RuleFilterForm(request.GET, agents, tools)
    rules = filters.rules(request.tenant)
    page = Paginator(rules.order_by("-created_at", "-id"), RULES_PER_PAGE).get_page(request.GET.get("page"))
    can_admin = request.membership.allows("admin")
    decided = decisions_since(request.tenant, timezone.now() - DECIDED_WINDOW)
    rows = [RuleRow(rule, decided.get(str(rule.id), 0)) for rule in page]
    for row in rows if can_admin else []:
        row.edit = editing if editing is not None and editing.rule.pk == row.rule.pk else RuleEditForm(row.rule)
    if form is None and can_admin:
        form = RuleForm(None, agents)
        form.rows = [CONDITIONS.new()]
    context = {
        "filters": filters,
        "page": page,
        "rows": rows,
        # None shown without filters while rules exist: every one was revoked or has expired.
        "all_ended": not rows and not request.GET and Rule.objects.filter(tenant=request.tenant).exists(),
        "form": form,
        "operators": OPERATORS,
        "tool_suggestions": _gated_tools(request) if can_admin else [],
    }
    partial = request.htmx and not request.htmx.history_restore_request
    return render(request, "approvals/rules.html#rules-table" if partial else "approvals/rules.html", context)


@role_required("reader")
@require_GET
@vary_on_headers("HX-Request")
def rule_list(request: ConsoleRequest) -> HttpResponse:
    return _page(request, None)


@role_required("admin")
@require_http_methods(["GET", "POST"])
def rule_create(request: ConsoleRequest) -> HttpResponse:
    if request.method == "GET":  # the address a refused form leaves in the bar: the form is on the rules page
        return redirect("rules")
    form = RuleForm(request.POST, _names(request)[0])
    if form.is_valid():
        assert form.wanted is not None
        try:
            rule = remember_rule(request.membership, request.user, form.wanted)
        except RuleRefused as refused:
            form.place(refused.field, refused.detail)
        else:
            narrowed = " with these exact arguments" if rule.arguments_hash else ""
            narrowed = " when its arguments meet the conditions" if rule.conditions else narrowed
            done = f"Created a rule: {rule.agent.name} may call {rule.tool_name}{narrowed} without asking."
            messages.success(request, done)
            return redirect("rules")
    return _page(request, form)


@role_required("admin")
@require_GET
def condition_row(request: ConsoleRequest) -> HttpResponse:
    """One empty condition row, appended to the form by htmx."""
    context = {"row": CONDITIONS.new(), "operators": OPERATORS}
    return render(request, "approvals/rules.html#condition-row", context)


@role_required("admin")
@require_POST
def rule_edit(request: ConsoleRequest, rule_id: uuid.UUID) -> HttpResponse:
    """A rule's Edit form: its next version, the one before kept (`approvals.actions.do_edit_rule`)."""
    rule = get_rule_for(request, rule_id)
    form = RuleEditForm(rule, request.POST)
    if form.is_valid() and form.edit is not None:
        try:
            edited = do_edit_rule(request.user, rule, form.edit)
        except RuleRefused as refused:
            form.add_error(None, refused.detail)
        else:
            messages.success(request, f"Saved version {edited.version} of the rule for {rule.tool_name}.")
            return redirect("rules")
    return _page(request, None, editing=form)


@role_required("admin")
@require_POST
def rule_revoke(request: ConsoleRequest, rule_id: uuid.UUID) -> HttpResponse:
    rule = get_rule_for(request, rule_id)
    do_revoke_rule(request.user, rule)
    messages.success(request, f"Revoked the rule for {rule.agent.name} · {rule.tool_name}: its calls ask again.")
    back = request.POST.get("next", "")
    if back.startswith("/rules/") and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("rules")
