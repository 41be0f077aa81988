"""The receipts pages (SPEC section 13): the list an auditor filters and exports, and one receipt whole."""

import json
import re
import uuid
from typing import Any

from django import forms
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from agents.models import Agent
from approvals import receipt_lists
from approvals.receipts import Receipt
from console.filters import ListFilters
from console.tenancy import ConsoleRequest, role_required

RECEIPTS_PER_PAGE = 50
RESULTS = [
    "approved",
    "approved-for-session",
    "denied-interactively-by-user",
    "denied-by-permission-request-hook",
    "cancelled",
    "answered",
    "accept",
    "decline",
    "cancel",
]


class ReceiptFilterForm(ListFilters):
    """The list's filters, read from the query string; an invalid field is ignored."""

    tool = forms.CharField(required=False, max_length=200, widget=forms.TextInput(attrs={"autocomplete": "off"}))
    result = forms.ChoiceField(
        required=False, choices=[("", "Any result"), *((r, r) for r in RESULTS)], widget=forms.Select()
    )
    cursor = forms.CharField(required=False, max_length=40, widget=forms.HiddenInput())

    def picked(self) -> receipt_lists.Picked:
        self.is_valid()
        wanted = self.cleaned_data
        return receipt_lists.Picked(
            wanted.get("agent") or "",
            (wanted.get("tool") or "").strip(),
            wanted.get("result") or "",
            wanted.get("date_from"),
            wanted.get("date_to"),
        )


@role_required("reader")
@require_GET
def receipt_list(request: ConsoleRequest) -> HttpResponse:
    tenant = request.tenant
    filters = ReceiptFilterForm(request.GET, Agent.objects.names_in(tenant))
    picked = filters.picked()
    if request.GET.get("format") == "jsonl":
        # role_required is typed for HttpResponse; a streaming response is what an export needs.
        exported: StreamingHttpResponse = receipt_lists.export(request, tenant, picked)
        return exported  # type: ignore[return-value]
    cursor = filters.cleaned_data.get("cursor") or None
    try:
        receipts, next_cursor = receipt_lists.page(tenant, picked, cursor, RECEIPTS_PER_PAGE)
    except receipt_lists.BadFilter:
        receipts, next_cursor = receipt_lists.page(tenant, picked, None, RECEIPTS_PER_PAGE)
    context = {"filters": filters, "receipts": receipts, "next_cursor": next_cursor, "first_page": not cursor}
    return render(request, "approvals/receipts.html", context)


@role_required("reader")
@require_GET
def receipt_detail(request: ConsoleRequest, receipt_id: uuid.UUID) -> HttpResponse:
    receipt = Receipt.objects.filter(tenant=request.tenant, id=receipt_id).first()
    if receipt is None:
        raise Http404("No such receipt in this tenant.")
    fields = receipt.wire()
    said = [(_words(name), name, _shown(value), isinstance(value, (list, dict))) for name, value in fields.items()]
    return render(request, "approvals/receipt.html", {"receipt": receipt, "fields": fields, "said": said})


def _shown(value: Any) -> Any:
    """A receipt field's value as the page shows it: text as it is, anything else as its JSON (`approvals`, a list
    of objects, indented), null left to the page."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, indent=2 if isinstance(value, (list, dict)) else None, ensure_ascii=False)


def _words(name: str) -> str:
    """A receipt field's camelCase name as words ("argumentsDigest" -> "Arguments digest")."""
    spaced = re.sub(r"(?<=[a-z0-9])([A-Z])", r" \1", name).lower()
    return spaced[:1].upper() + spaced[1:]


@role_required("reader")
@require_GET
def request_receipt(request: ConsoleRequest, request_id: uuid.UUID) -> HttpResponse:
    """A request's receipt, for the pages that know the request (its card, its run)."""
    found = Receipt.objects.filter(tenant=request.tenant, request_id=request_id).values_list("id", flat=True).first()
    if found is None:
        raise Http404("The request has no receipt: it is still open, or it is not this tenant's.")
    return redirect("receipt", receipt_id=found)
