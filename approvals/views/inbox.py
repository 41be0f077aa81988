"""The inbox: every open request of the tenant, live, with its filters and pages; a POST on its address
answers a run's approvals at once (its batch bar). The cards' own actions are in approvals.views.answers."""

import uuid
from urllib.parse import parse_qs, urlsplit

from django import forms
from django.db import connection
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from agents.getters import get_run_for
from agents.models import Agent
from approvals.forms import BatchForm
from approvals.models import PendingRequest, PendingRequestQuerySet, RequestKind, mark_answerable
from approvals.views.answers import answer_listed, back_to_inbox
from console.filters import SUBMIT_ON_CHANGE, AgentFilters
from console.models import Tenant
from console.tenancy import ConsoleRequest, role_required

# Cards per inbox page: rendering a card costs about half a millisecond, so the page stays fast however many
# requests wait (bench/inbox_scale.py); later pages are one link away, oldest first.
PAGE_SIZE = 25
MAX_PAGE = 100_000  # an offset the databases can still take


class InboxFilters(AgentFilters):
    """The inbox filters, read from the query string; an invalid value is ignored."""

    kind = forms.ChoiceField(
        required=False,
        choices=[("", "Any kind"), *RequestKind.choices],
        widget=forms.Select(attrs=SUBMIT_ON_CHANGE),
    )
    tool = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": "exact tool name", "autocomplete": "off", "list": "inbox-tools"}),
    )

    def apply(self, requests: PendingRequestQuerySet) -> PendingRequestQuerySet:
        self.is_valid()
        wanted = self.cleaned_data
        return requests.matching(agent=wanted.get("agent"), kind=wanted.get("kind"), tool=wanted.get("tool"))

    @property
    def active(self) -> bool:
        return self.is_valid() and any(self.cleaned_data.values())


def _open_requests(tenant: Tenant) -> PendingRequestQuerySet:
    return (
        PendingRequest.objects.open()
        .select_related("agent", "session", "run__version", "claimed_by")
        .filter(tenant=tenant)
        .order_by("opened_at", "id")
    )


def _open_tools(tenant: Tenant) -> list[str]:
    """The tool names of the tenant's open requests, in order, for the filter's datalist. A skip scan: one
    probe of the `request_open_tool` index per name (the next name after the last), where `DISTINCT` read
    an index entry per open request (10,000 waiting: 7 to 15 ms against 0.4; bench/README.md, inbox_scale)."""
    names = PendingRequest.objects.open().filter(tenant=tenant).order_by().values("tool_name")
    sql, params = names.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE tools(name) AS ("
            f" SELECT (SELECT min(o.tool_name) FROM ({sql}) AS o)"
            f" UNION ALL SELECT (SELECT min(o.tool_name) FROM ({sql}) AS o WHERE o.tool_name > tools.name)"
            " FROM tools WHERE tools.name IS NOT NULL"
            ") SELECT name FROM tools WHERE name IS NOT NULL",
            [*params, *params],
        )
        return [name for (name,) in cursor.fetchall()]


def _with_batches(requests: list[PendingRequest]) -> list[PendingRequest]:
    """Mark the first card of each run with several approval requests listed: its batch bar goes before it."""
    by_run: dict[uuid.UUID, list[PendingRequest]] = {}
    for pending in requests:
        if pending.kind == RequestKind.APPROVAL:
            by_run.setdefault(pending.run_id, []).append(pending)
    for approvals in by_run.values():
        if len(approvals) > 1:
            approvals[0].batch = {"run_id": approvals[0].run_id, "requests": approvals}  # type: ignore[attr-defined]
    return requests


@role_required("reader")
@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
def inbox(request: ConsoleRequest) -> HttpResponse:
    """The list (GET); a POST answers a run's approvals at once (the inbox has no route of its own for it)."""
    if request.method == "POST":
        return answer_all(request)
    tenant = request.tenant
    agent_names = Agent.objects.live().names_in(tenant)
    filters = InboxFilters(request.GET, agent_names)
    number = _page_number(_requested_page(request))
    start = (number - 1) * PAGE_SIZE
    # One row past the page says whether another page follows: no count over the open requests.
    listed = list(filters.apply(_open_requests(tenant))[start : start + PAGE_SIZE + 1])
    requests = _with_batches(listed[:PAGE_SIZE])
    mark_answerable(request.membership, requests)
    page = {
        "number": number,
        "start": start + 1,
        "end": start + len(requests),
        "has_previous": number > 1,
        "has_next": len(listed) > PAGE_SIZE,
    }
    context = {"filters": filters, "requests": requests, "page": page}
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, "approvals/inbox.html#requests", context)
    context["tools"] = _open_tools(tenant)
    return render(request, "approvals/inbox.html", context)


def _requested_page(request: ConsoleRequest) -> str | None:
    """The page in the query string; for inbox.js's re-fetch after a reconnect (which asks for the list
    without a page) the page the browser shows, so the merge keeps that page's cards."""
    value = request.GET.get("page")
    current = request.htmx.current_url if request.htmx else None
    if value is None and current and request.headers.get("X-Inbox-Refresh"):
        value = parse_qs(urlsplit(current).query).get("page", [None])[0]
    return value


def _page_number(value: str | None) -> int:
    """The page asked for in the query string (1 when missing or not a number; at most MAX_PAGE)."""
    try:
        return min(MAX_PAGE, max(1, int(value or 1)))
    except ValueError:
        return 1


@role_required("operator")
@require_POST
def answer_all(request: ConsoleRequest) -> HttpResponse:
    """Approve or deny a run's listed approval requests at once, with one reason for all."""
    form = BatchForm(request.POST)
    valid, wanted = form.is_valid(), form.cleaned_data
    if "run" in form.errors:
        raise Http404("No such run.")
    run = get_run_for(request, wanted["run"])
    listed = list(
        run.requests.select_related("agent")
        .filter(id__in=wanted["request"], kind=RequestKind.APPROVAL)
        .order_by("opened_at", "id")
    )
    done = answer_listed(request, form, listed)
    if valid and not listed:
        done.problems.append("No approval request of this run was listed.")
    if not request.htmx:
        return back_to_inbox(request, done, wanted.get("decision"), "{n} request{s} of the run")
    body = ""
    if done.problems:  # the bar again, with what is left to answer and why the rest was not
        left = list(_open_requests(request.tenant).filter(run=run, session=run.session_id, kind=RequestKind.APPROVAL))
        batch = {"run_id": run.id, "requests": left, "errors": done.problems}
        body = render(request, "approvals/inbox.html#batch", {"batch": batch}).content.decode()
    return trigger_client_event(HttpResponse(body), "airlock:answered", {"ids": done.ids})
