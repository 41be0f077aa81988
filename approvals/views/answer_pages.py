"""What the inbox's cards post: operators answer here, one request at a time or a selection at once (a
run's batch bar posts to the inbox itself: approvals.views.inbox_pages), claim a request or cancel its run, and
undo an answer while it is held. Every answer is held for its undo window (approvals.actions.hold_answers),
then goes through approvals.actions.answer_request(), like the respond API's.

Answer forms work with htmx (the card is swapped out on success, re-rendered with its errors on failure)
and without JavaScript (a normal POST, then a redirect to the inbox with a message).
"""

import uuid
from datetime import timedelta
from urllib.parse import parse_qs, urlencode, urlsplit

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRefresh, trigger_client_event

from agents import actions
from agents.prepare import RunRejected
from approvals.actions import (
    HELD_UNTIL,
    Answered,
    ClaimRefused,
    Held,
    UndoRefused,
    apply_due,
    claim,
    hold_answers,
    notice_rows,
    notices,
    release,
    undo,
)
from approvals.decisions import Actor, Via
from approvals.forms import BatchForm, ClaimForm, SelectionForm, answer_form
from approvals.getters import get_request_for
from approvals.kinds import KINDS, SELECTABLE
from approvals.models import HeldAnswer, PendingRequest
from approvals.responses import TAKEN, Outcome, Response, ResponseRefused
from approvals.views.remember_pages import always_asked, confirmation
from console.tenancy import ConsoleRequest, role_required

# Closed meanwhile: the card cannot be answered any more, so it shows the outcome instead of its forms.
_CLOSED = ("already_resolved", "expired", "cancelled", "execution_ended")


def _summary(pending: PendingRequest, response: Response, outcome: Outcome) -> str:
    if outcome.status == "recorded":  # an approval toward a quorum (SPEC section 14): how it stands
        return outcome.message
    done = KINDS[pending.kind].done(pending, response.model_dump(mode="json", by_alias=True))
    return done + (". The run continues." if outcome.continuation_run_id else ".")


@role_required("operator")
@require_POST
def answer(request: ConsoleRequest, request_id: uuid.UUID) -> HttpResponse:
    """Answer the card's request: held for its undo window (its notice comes with the response), or applied at
    once (no window, or an answer that forks the session)."""
    membership = request.membership
    pending = get_request_for(request, request_id, "run__version", "agent", "session")
    form = answer_form(pending, request.POST)
    error, closed, outcome, held = None, False, None, None
    if not form.is_valid():
        error = form.problem
    else:
        response = form.cleaned_data["response"]
        always = always_asked(request, pending, response)  # "always" answers once confirmed as shown
        if always is not None and not always.confirmed:
            return confirmation(request, pending, always)
        # The trial page answers with the inbox card's widget, posted here; it says so for the audit.
        actor = Actor.person(request.user, Via.TRIAL if request.POST.get("via") == "trial" else Via.INBOX)
        answers = [(pending, response), *(always.also if always is not None else [])]
        held = _held(request, hold_answers(membership, actor, answers))
        given = held.outcomes.get(str(pending.id))  # none: held
        if isinstance(given, ResponseRefused):
            error = given.detail
        elif given is not None and given.status not in TAKEN:
            error, closed = given.message, given.status in _CLOSED
        else:
            outcome = given
    forked = outcome.session_id if outcome is not None and outcome.forked_from else None
    if not request.htmx:
        if error:
            messages.error(request, f"{pending.agent.name} · {pending.tool_name}: {error}")
        elif outcome is not None:
            messages.success(request, _summary(pending, response, outcome))
        return _back(request, forked)  # a held answer's notice, with its Undo, is on the page it returns to
    if forked:  # the trial page goes on in the fork
        return trigger_client_event(HttpResponse(""), "airlock:forked", {"sessionId": forked})
    if error is None and held is not None and held.held:
        # The card is swapped out, its notice swapped in; the push removes the card from the other inboxes.
        return trigger_client_event(HttpResponse(_notice_of(request, held)), "airlock:held", {"batch": str(held.batch)})
    if error is None:
        return HttpResponse("")
    context = {
        "r": pending,
        "can_answer": pending.answerable_by(membership),
        "error": error,
        "field_errors": form.field_errors,
        "closed": closed,
    }
    return render(request, "approvals/request.html", {**context, "posted": request.POST})


def _notice_of(request: ConsoleRequest, held: Held | None) -> str:
    """The notice of a held answer, out of band into the page's notices (templates/base.html); "" if none."""
    if held is None or not held.held:
        return ""
    rows = list(notice_rows(request.tenant.pk).filter(batch=held.batch))
    context = {"notice": notices(rows)[0], "oob": True, "back": _page_of(request)}
    return render_to_string("approvals/_undo.html", context, request=request)


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
def cancel_card_run(request: ConsoleRequest, request_id: uuid.UUID) -> HttpResponse:
    """Cancel the run a card waits for (SPEC section 9): its open requests close `cancelled` in every inbox."""
    pending = get_request_for(request, request_id, "run__version", "agent", "session")
    try:
        cancelled = actions.do_cancel_run(request.membership, request.user, pending.run, session_id=pending.session_id)
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


def answer_listed(request: ConsoleRequest, form: BatchForm | SelectionForm, listed: list[PendingRequest]) -> Held:
    """A batch bar's decision and reason given to the approval requests it lists (held as one, for one
    Undo), or why the bar was refused."""
    if not form.is_valid():
        return Held(problems=[str(error) for error in form.errors.get("decision", [])])
    wanted = form.cleaned_data
    approved, reason = wanted["decision"] == "approve", wanted["reason"] or None
    answers = [(pending, Response(request_id=pending.id, approved=approved, reason=reason)) for pending in listed]
    return _held(request, hold_answers(request.membership, Actor.person(request.user, Via.INBOX), answers))


def _held(request: ConsoleRequest, held: Held) -> Held:
    """Note in the session until when this browser has an answer held: only then do its pages read their
    notices (approvals.context_processors.held_answers), not on every page of every operator."""
    if held.held:
        request.session[HELD_UNTIL] = (timezone.now() + timedelta(seconds=settings.ANSWER_UNDO_SECONDS)).timestamp()
    return held


def back_to_inbox(
    request: ConsoleRequest, held: Held, done: Answered, decision: str | None, which: str
) -> HttpResponse:
    """A batch answered without htmx: what was answered (`which`: "{n} request{s} …") and what was not, as
    messages on the inbox (a held answer's notice is there too, with its Undo)."""
    if done.ids and not held.held:
        verb, plural = "Approved" if decision == "approve" else "Denied", "s" if len(done.ids) != 1 else ""
        messages.success(request, f"{verb} {which.format(n=len(done.ids), s=plural)}.")
    for problem in done.problems:
        messages.error(request, problem)
    return redirect("inbox")


def batch_answered(request: ConsoleRequest, body: str, held: Held, done: Answered) -> HttpResponse:
    """A batch bar's htmx answer: `body` (the bar again, or nothing), the held answer's notice, and the event
    inbox.js takes the answered cards away on."""
    response = HttpResponse(body + _notice_of(request, held))
    return trigger_client_event(response, "airlock:answered", {"ids": done.ids})


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
        .filter(tenant=request.tenant, id__in=selected, kind__in=SELECTABLE)
        .order_by("opened_at", "id")
    )
    held = answer_listed(request, form, listed)
    done = held.answered()
    if valid and len(listed) < len(selected):
        done.problems.append("Some selected requests are not approval requests of this tenant; they were left alone.")
    if valid and not selected:
        done.problems.append("Select requests first (x on a card, or its Select box).")
    if not request.htmx:
        return back_to_inbox(request, held, done, wanted.get("decision"), "{n} selected request{s}")
    body = render(request, "approvals/inbox.html#selection", {"selection_errors": done.problems}).content.decode()
    return batch_answered(request, body, held, done)


@role_required("operator")
@require_POST
def undo_answer(request: ConsoleRequest, batch: uuid.UUID) -> HttpResponse:
    """A notice's Undo: the held answer is taken back, its requests stay pending (approvals.actions.undo)."""
    try:
        undone = undo(request.membership, request.user, batch)
    except HeldAnswer.DoesNotExist:
        raise Http404("No such answer.") from None
    except UndoRefused as refused:
        if not request.htmx:
            messages.error(request, refused.detail)
            return _back(request, None)
        if refused.status == 403:  # not the caller's answer: no notice of theirs to show it in
            return render(request, "approvals/_undo.html", {"notice": None, "error": refused.detail})
        return _notice_page(request, batch, refused.detail)
    if not request.htmx:
        messages.success(request, f"Undone: {_pending_again(undone)}")
        return _back(request, None)
    if any(row.via == "trial" for row in undone):
        return HttpResponseClientRefresh()  # the trial page shows the request's form again from the server
    return _notice_page(request, batch)


def _pending_again(undone: list[HeldAnswer]) -> str:
    names = [row.request.tool_name or "the request" for row in undone]
    return f"{names[0]} is pending again." if len(names) == 1 else f"{len(names)} requests are pending again."


@role_required("operator")
@require_GET
def held_answer(request: ConsoleRequest, batch: uuid.UUID) -> HttpResponse:
    """A notice asking, once its window closed, how the held answer went: applied, dropped (and why) or undone.
    Applies it first when it is due and no timer did (its process went)."""
    apply_due(batch=batch)
    return _notice_page(request, batch)


def _notice_page(request: ConsoleRequest, batch: uuid.UUID, error: str | None = None) -> HttpResponse:
    """The notice of the caller's answer `batch` as it stands (404 for another tenant's or member's)."""
    rows = list(notice_rows(request.tenant.pk).filter(batch=batch, membership=request.membership))
    if not rows:
        raise Http404("No such answer.")
    context = {"notice": notices(rows)[0], "error": error, "undone": _pending_again(rows), "back": _page_of(request)}
    return render(request, "approvals/_undo.html", context)


def _page_of(request: ConsoleRequest) -> str | None:
    """The page an htmx request came from, where a notice's Undo returns without JavaScript."""
    return request.htmx.current_url_abs_path if request.htmx else None
