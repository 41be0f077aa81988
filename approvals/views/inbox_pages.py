"""The inbox: every open request of the tenant, live, with its filters and pages; a POST on its address
answers a run's approvals at once (its batch bar). The cards' own actions are in approvals.views.answer_pages."""

import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django import forms
from django.db import connection
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from agents.getters import get_run_for
from agents.models import Agent
from agents.request_kinds import kind_choices
from approvals.forms import BatchForm
from approvals.kinds import SELECTABLE
from approvals.models import (
    UNSETTLED,
    ApproverGroup,
    PendingRequest,
    PendingRequestQuerySet,
    mark_answerable,
    routed_to,
    with_approvals,
)
from approvals.views.answer_pages import answer_listed, back_to_inbox, batch_answered
from console.filters import SUBMIT_ON_CHANGE, AgentFilters
from console.models import Membership, Tenant
from console.tenancy import ConsoleRequest, role_required

# Cards per inbox page: rendering a card costs about half a millisecond, so the page stays fast however many
# requests wait (bench/inbox_scale.py); later pages are one link away, oldest first.
PAGE_SIZE = 25
MAX_PAGE = 100_000  # an offset the databases can still take


# "Recently answered by me": the caller's answers of the last hours, newest first, one page of them.
RECENT = timedelta(hours=8)
VIEWS = [("mine", "For me"), ("claimed", "Claimed by me"), ("answered", "Recently answered by me")]


class InboxFilters(AgentFilters):
    """The inbox filters and saved views, read from the query string; an invalid value is ignored."""

    kind = forms.ChoiceField(
        required=False,
        choices=[("", "Any kind"), *kind_choices()],
        widget=forms.Select(attrs=SUBMIT_ON_CHANGE),
    )
    tool = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": "exact tool name", "autocomplete": "off", "list": "inbox-tools"}),
    )
    # The saved views (links above the list, kept by the form as hidden fields): SPEC section 11's routing.
    view = forms.ChoiceField(required=False, choices=[("", "All open"), *VIEWS], widget=forms.HiddenInput)
    group = forms.ChoiceField(required=False, widget=forms.HiddenInput)

    def __init__(self, data: Any, agent_names: list[str], group_names: list[str]) -> None:
        super().__init__(data, agent_names)
        group = self.fields["group"]
        assert isinstance(group, forms.ChoiceField)
        group.choices = [("", "any"), *((name, name) for name in group_names)]

    def wanted(self, name: str) -> str:
        self.is_valid()
        return self.cleaned_data.get(name) or ""

    def apply(self, requests: PendingRequestQuerySet, membership: Membership) -> PendingRequestQuerySet:
        """`requests` as the filters and the view pick them (the "recently answered" view has its own list)."""
        picked = requests.matching(agent=self.wanted("agent"), kind=self.wanted("kind"), tool=self.wanted("tool"))
        if self.wanted("group"):
            picked = picked.filter(routed_to([self.wanted("group")]))
        if self.wanted("view") == "mine":
            picked = picked.answerable_by(membership)
        elif self.wanted("view") == "claimed":
            picked = picked.filter(claimed_by=membership.user_id)
        return picked

    @property
    def active(self) -> bool:
        return self.is_valid() and any(self.cleaned_data.values())


def _open_requests(tenant: Tenant) -> PendingRequestQuerySet:
    """The tenant's open requests but those whose answer is held for its undo window: they left every inbox
    as answered ones do, and come back if undone (approvals.actions.held)."""
    return (
        PendingRequest.objects.open()
        .exclude(held_answers__state__in=UNSETTLED)
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
        if pending.kind in SELECTABLE:
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
    groups = list(ApproverGroup.objects.filter(tenant=tenant).order_by("name").values_list("name", flat=True))
    filters = InboxFilters(request.GET, agent_names, groups)
    if filters.wanted("view") == "answered":
        requests, page = _answered_by(request, filters), None
    else:
        requests, page = _open_page(request, filters)
    context = {"filters": filters, "requests": requests, "page": page, "groups": groups, "view": filters.wanted("view")}
    if request.htmx and not request.htmx.history_restore_request:
        return render(request, "approvals/inbox.html#requests", context)
    context["tools"] = _open_tools(tenant)
    return render(request, "approvals/inbox.html", context)


def _open_page(request: ConsoleRequest, filters: InboxFilters) -> tuple[list[PendingRequest], dict[str, Any]]:
    """The page of open requests the filters pick, marked with whether the caller may answer each."""
    number = _page_number(_requested_page(request))
    start = (number - 1) * PAGE_SIZE
    # One row past the page says whether another page follows: no count over the open requests.
    listed = list(filters.apply(_open_requests(request.tenant), request.membership)[start : start + PAGE_SIZE + 1])
    requests = _with_batches(listed[:PAGE_SIZE])
    mark_answerable(request.membership, requests)
    with_approvals(requests)
    page = {
        "number": number,
        "start": start + 1,
        "end": start + len(requests),
        "has_previous": number > 1,
        "has_next": len(listed) > PAGE_SIZE,
    }
    return requests, page


def _answered_by(request: ConsoleRequest, filters: InboxFilters) -> list[PendingRequest]:
    """The requests the caller answered in the last RECENT hours, newest first (one page: a look back, not an
    archive; the audit has the rest)."""
    answered = PendingRequest.objects.filter(
        tenant=request.tenant, answered_by=request.membership.user_id, answered_at__gte=timezone.now() - RECENT
    ).select_related("agent", "session", "run__version", "claimed_by")
    return list(filters.apply(answered, request.membership).order_by("-answered_at", "-id")[:PAGE_SIZE])


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
        .filter(id__in=wanted["request"], kind__in=SELECTABLE)
        .order_by("opened_at", "id")
    )
    held = answer_listed(request, form, listed)
    done = held.answered()
    if valid and not listed:
        done.problems.append("No approval request of this run was listed.")
    if not request.htmx:
        return back_to_inbox(request, held, done, wanted.get("decision"), "{n} request{s} of the run")
    body = ""
    if done.problems:  # the bar again, with what is left to answer and why the rest was not
        left = list(_open_requests(request.tenant).filter(run=run, session=run.session_id, kind__in=SELECTABLE))
        batch = {"run_id": run.id, "requests": left, "errors": done.problems}
        body = render(request, "approvals/inbox.html#batch", {"batch": batch}).content.decode()
    return batch_answered(request, body, held, done)
