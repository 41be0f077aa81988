"""The inbox: every open request of the tenant, live; operators answer here, one request at a time or a
run's approvals or a selection at once. Every answer goes through approvals.actions.answer_request(), like
the respond API's.

Answer forms work with htmx (the card is swapped out on success, re-rendered with its errors on failure)
and without JavaScript (a normal POST, then a redirect to the inbox with a message).
"""

import uuid
from urllib.parse import parse_qs, urlencode, urlsplit

from django import forms
from django.contrib import messages
from django.db import connection
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from agents import actions
from agents.getters import get_run_for
from agents.models import Agent
from agents.prepare import RunRejected
from agents.request_kinds import REQUEST_KINDS
from approvals.actions import Answered, ClaimRefused, answer_many, answer_request, claim, release
from approvals.answers import Outcome, Response, ResponseRefused
from approvals.forms import BatchForm, ClaimForm, SelectionForm, answer_form
from approvals.getters import get_request_for
from approvals.models import PendingRequest, PendingRequestQuerySet, RequestKind, mark_answerable
from console.filters import SUBMIT_ON_CHANGE, AgentFilters
from console.models import Tenant
from console.tenancy import ConsoleRequest, role_required

# Cards per inbox page: rendering a card costs about half a millisecond, so the page stays fast however many
# requests wait (bench/inbox_scale.py); later pages are one link away, oldest first.
PAGE_SIZE = 25
MAX_PAGE = 100_000  # an offset the databases can still take
# Closed meanwhile: the card cannot be answered any more, so it shows the outcome instead of its forms.
_CLOSED = ("already_resolved", "expired", "cancelled", "execution_ended")


class InboxFilters(AgentFilters):
    """The inbox filters, read from the query string; an invalid value is ignored."""

    kind = forms.ChoiceField(
        required=False,
        choices=[("", "Any kind"), *((kind, kind.replace("_", " ")) for kind in REQUEST_KINDS)],
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


def _summary(pending: PendingRequest, response: Response, outcome: Outcome) -> str:
    if pending.kind == RequestKind.APPROVAL:
        done = f"{'Approved' if response.approved else 'Denied'} {pending.tool_name}"
        done += " and remembered the rule" if response.remember else ""
    elif pending.kind == RequestKind.CLIENT_TOOL:
        done = f"Sent the {'error' if response.error_message else 'result'} of {pending.tool_name}"
    elif pending.kind == RequestKind.INPUT:
        done = f"Answered {pending.tool_name} ({response.action})"
    else:  # a question, a plan, a continuation
        done = f"Answered {pending.tool_name or 'the request'}"
    return done + (". The run continues." if outcome.continuation_run_id else ".")


@role_required("operator")
@require_POST
def answer(request: ConsoleRequest, request_id: uuid.UUID) -> HttpResponse:
    membership = request.membership
    pending = get_request_for(request, request_id, "run__version", "agent", "session")
    form = answer_form(pending, request.POST)
    error, closed = None, False
    if not form.is_valid():
        error = form.problem
    else:
        response = form.cleaned_data["response"]
        try:
            # The trial page answers with the inbox card's widget, posted here; it says so for the audit.
            via = "trial" if request.POST.get("via") == "trial" else "inbox"
            outcome = answer_request(membership, request.user, pending.run_id, response, via=via)
        except ResponseRefused as refused:
            error = refused.detail
        else:
            if outcome.status != "accepted":
                error, closed = outcome.message, outcome.status in _CLOSED
    forked = outcome.session_id if error is None and outcome.forked_from else None
    if not request.htmx:
        if error:
            messages.error(request, f"{pending.agent.name} · {pending.tool_name}: {error}")
        else:
            messages.success(request, _summary(pending, response, outcome))
        return _back(request, forked)
    if forked:  # the trial page goes on in the fork
        return trigger_client_event(HttpResponse(""), "airlock:forked", {"sessionId": forked})
    if error is None:
        return HttpResponse("")  # the card is swapped out; the push removes it from the other inboxes
    context = {
        "r": pending,
        "can_answer": pending.answerable_by(membership),
        "error": error,
        "field_errors": form.field_errors,
        "closed": closed,
    }
    return render(request, "approvals/request.html", {**context, "posted": request.POST})


def _back(request: ConsoleRequest, forked: str | None) -> HttpResponse:
    """Where an answer posted without JavaScript returns: the page its form names (`next`: the trial page), in
    the fork's session when the answer forked one; else the inbox."""
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return redirect("inbox")
    if forked:
        address = urlsplit(back)
        query = {**{k: v[-1] for k, v in parse_qs(address.query).items()}, "session": forked}
        back = address._replace(query=urlencode(query)).geturl()
    return redirect(back)


@role_required("operator")
@require_POST
def claim_or_release(request: ConsoleRequest, request_id: uuid.UUID) -> HttpResponse:
    """A card's Claim / Release: the push shows it in every open inbox, this one included."""
    pending = get_request_for(request, request_id, "run__version", "agent", "session", "claimed_by")
    form = ClaimForm(request.POST)
    try:
        if not form.is_valid():
            raise ClaimRefused("invalid_action", str(form.errors["action"][0]), 400)
        (claim if form.cleaned_data["action"] == "claim" else release)(request.membership, pending)
    except ClaimRefused as refused:
        if not request.htmx:
            messages.error(request, f"{pending.agent.name} · {pending.tool_name}: {refused.detail}")
            return redirect("inbox")
        context = {"r": pending, "can_answer": pending.answerable_by(request.membership), "error": refused.detail}
        return render(request, "approvals/request.html", context, status=200)
    if not request.htmx:
        return redirect("inbox")
    return HttpResponse(status=204)  # nothing to swap: the push updates the card


@role_required("operator")
@require_POST
def cancel_run(request: ConsoleRequest, request_id: uuid.UUID) -> HttpResponse:
    """Cancel the run a card waits for (SPEC section 9): its open requests close `cancelled` in every inbox."""
    pending = get_request_for(request, request_id, "run__version", "agent", "session")
    try:
        cancelled = actions.cancel_run(request.membership, request.user, pending.run, session_id=pending.session_id)
    except RunRejected as refused:
        return _refused(request, pending, refused.detail)
    if cancelled == "cancelled":
        if not request.htmx:
            messages.success(request, f"Cancelled the run of {pending.agent.name}: its open requests are closed.")
            return redirect("inbox")
        return HttpResponse("")  # the card is swapped out; the push removes it from the other inboxes
    return _refused(request, pending, "The run waits on nothing any more; there is nothing to cancel.", closed=True)


def _refused(request: ConsoleRequest, pending: PendingRequest, error: str, closed: bool = False) -> HttpResponse:
    """A card's action refused: the card again with the error (htmx), or the inbox with it as a message."""
    if not request.htmx:
        messages.error(request, f"{pending.agent.name} · {pending.tool_name}: {error}")
        return redirect("inbox")
    context = {"r": pending, "can_answer": pending.answerable_by(request.membership), "error": error, "closed": closed}
    return render(request, "approvals/request.html", context)


def _answer_listed(request: ConsoleRequest, form: BatchForm | SelectionForm, listed: list[PendingRequest]) -> Answered:
    """A batch bar's decision and reason given to the approval requests it lists, or why the bar was refused."""
    if not form.is_valid():
        return Answered(problems=[str(error) for error in form.errors.get("decision", [])])
    wanted = form.cleaned_data
    approved, reason = wanted["decision"] == "approve", wanted["reason"] or None
    return answer_many(request.membership, request.user, listed, approved, reason)


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
    done = _answer_listed(request, form, listed)
    if valid and not listed:
        done.problems.append("No approval request of this run was listed.")
    if not request.htmx:
        return _back_to_inbox(request, done, wanted.get("decision"), "{n} request{s} of the run")
    body = ""
    if done.problems:  # the bar again, with what is left to answer and why the rest was not
        left = list(_open_requests(request.tenant).filter(run=run, session=run.session_id, kind=RequestKind.APPROVAL))
        batch = {"run_id": run.id, "requests": left, "errors": done.problems}
        body = render(request, "approvals/inbox.html#batch", {"batch": batch}).content.decode()
    return trigger_client_event(HttpResponse(body), "airlock:answered", {"ids": done.ids})


def _back_to_inbox(request: ConsoleRequest, done: Answered, decision: str | None, which: str) -> HttpResponse:
    """A batch answered without htmx: what was answered (`which`: "{n} request{s} …") and what was not, as
    messages on the inbox."""
    if done.ids:
        verb, plural = "Approved" if decision == "approve" else "Denied", "s" if len(done.ids) != 1 else ""
        messages.success(request, f"{verb} {which.format(n=len(done.ids), s=plural)}.")
    for problem in done.problems:
        messages.error(request, problem)
    return redirect("inbox")


@role_required("operator")
@require_POST
def answer_selection(request: ConsoleRequest) -> HttpResponse:
    """Approve or deny the approval requests selected on the inbox, whatever their runs, with one reason for
    all; each is answered on its own run, so each run gets its own continuation."""
    form = SelectionForm(request.POST)
    valid, wanted = form.is_valid(), form.cleaned_data
    selected = wanted.get("selected") or []
    listed = list(
        PendingRequest.objects.select_related("run", "agent")
        .filter(tenant=request.tenant, id__in=selected, kind=RequestKind.APPROVAL)
        .order_by("opened_at", "id")
    )
    done = _answer_listed(request, form, listed)
    if valid and len(listed) < len(selected):
        done.problems.append("Some selected requests are not approval requests of this tenant; they were left alone.")
    if valid and not selected:
        done.problems.append("Select requests first (x on a card, or its Select box).")
    if not request.htmx:
        return _back_to_inbox(request, done, wanted.get("decision"), "{n} selected request{s}")
    body = render(request, "approvals/inbox.html#selection", {"selection_errors": done.problems}).content.decode()
    return trigger_client_event(HttpResponse(body), "airlock:answered", {"ids": done.ids})
