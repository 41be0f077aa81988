"""The audit page: every decision of the tenant with filters and paging, and its CSV and JSON exports."""

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django import forms
from django.core.paginator import Paginator
from django.http import HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from agents.models import Agent
from approvals.audit_entries import AuditEntry, DecisionFilter
from approvals.audit_queries import Criteria, entry_keys, iter_entries, known_names
from approvals.audit_rows import entries
from console.filters import SUBMIT_ON_CHANGE, ListFilters
from console.login import lockouts_of
from console.models import Membership, Tenant
from console.streaming import download
from console.tenancy import ConsoleRequest, role_required

ENTRIES_PER_PAGE = 50
LOCKOUTS_SHOWN = 20


class AuditFilters(ListFilters):
    """The filters of the audit, read from the query string; an invalid field is ignored."""

    decision = forms.ChoiceField(
        required=False,
        choices=[("", "Any decision"), *DecisionFilter.choices],
        widget=forms.Select(attrs=SUBMIT_ON_CHANGE),
    )
    who = forms.CharField(
        required=False,
        max_length=150,
        widget=forms.TextInput(
            attrs={"placeholder": "user, system, rule or policy", "autocomplete": "off", "list": "audit-who"}
        ),
    )
    tool = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": "any tool", "autocomplete": "off", "list": "audit-tools"}),
    )
    policy = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": "any policy", "autocomplete": "off", "list": "audit-policies"}),
    )
    search = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": "text in the arguments", "autocomplete": "off"}),
    )

    def criteria(self) -> Criteria:
        self.is_valid()
        wanted = self.cleaned_data
        return Criteria(
            agent=wanted.get("agent") or "",
            decision=wanted.get("decision") or "",
            who=(wanted.get("who") or "").strip(),
            tool=(wanted.get("tool") or "").strip(),
            policy=(wanted.get("policy") or "").strip(),
            search=(wanted.get("search") or "").strip(),
            date_from=wanted.get("date_from"),
            date_to=wanted.get("date_to"),
        )


@role_required("reader")
@require_GET
@vary_on_headers("HX-Request")
def audit(request: ConsoleRequest) -> HttpResponse:
    tenant = request.tenant
    agent_names = Agent.objects.names_in(tenant)
    filters = AuditFilters(request.GET, agent_names)
    export = request.GET.get("format")
    if export in EXPORTS:
        # role_required is typed for HttpResponse; a streaming response is what an export needs.
        return _export(request, tenant, filters.criteria(), export)  # type: ignore[return-value]
    if export:
        return HttpResponseBadRequest("Unknown export format: use format=csv or format=json.")
    page = Paginator(entry_keys(tenant, filters.criteria()), ENTRIES_PER_PAGE).get_page(request.GET.get("page"))
    context = {"filters": filters, "page": page, "entries": entries(tenant, list(page))}
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, "approvals/audit.html#audit-table", {**context, "partial": True})
    members = Membership.objects.filter(tenant=tenant).order_by("user__username")
    context["usernames"] = members.values_list("user__username", flat=True)
    context["tool_names"], context["policy_names"] = known_names(tenant)
    if request.membership.allows("admin"):
        context["lockouts"] = lockouts_of(tenant)[:LOCKOUTS_SHOWN]
    return render(request, "approvals/audit.html", context)


class _Echo:
    """A file-like object that hands back what csv.writer writes, so rows stream one by one."""

    def write(self, value: str) -> str:
        return value


CSV_COLUMNS = (
    "when",
    "who",
    "decision",
    "reason",
    "via",
    "requestKind",
    "toolName",
    "arguments",
    "overrideArguments",
    "remembered",
    "ruleId",
    "policyBinding",
    "point",
    "enforced",
    "agentVersion",
    "policy",
    "result",
    "errorMessage",
    "action",
    "content",
    "agent",
    "runId",
    "sessionId",
    "requestId",
    "onBehalfOf",
    "authMethod",
    "approvals",
)

# Spreadsheets run a cell starting with one of these as a formula (OWASP "CSV injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A value as a CSV cell: JSON for structures, and never something a spreadsheet would evaluate."""
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text


def _csv(found: Iterable[AuditEntry]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for entry in found:
        wire = entry.wire()
        yield writer.writerow([csv_cell(wire[column]) for column in CSV_COLUMNS])


def _json(found: Iterable[AuditEntry]) -> Iterator[str]:
    separator = "[\n"
    for entry in found:
        yield separator + json.dumps(entry.wire(), ensure_ascii=False)
        separator = ",\n"
    yield "[]\n" if separator == "[\n" else "\n]\n"


EXPORTS = {"csv": (_csv, "text/csv; charset=utf-8"), "json": (_json, "application/json")}


def _export(request: ConsoleRequest, tenant: Tenant, criteria: Criteria, export: str) -> StreamingHttpResponse:
    render_rows, content_type = EXPORTS[export]
    return download(request, render_rows(iter_entries(tenant, criteria)), content_type, f"audit-{tenant.slug}", export)
