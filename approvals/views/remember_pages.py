"""Remembering "always" asks first (issue 50, item 7): what the rule will cover — the agent's tool, its arguments or
any, until when, and how many open requests it matches now — with the choice to approve those too.

An approval's "Don't ask again" choice (templates/approvals/kinds/approval.html) posts each pick here: the Approve
and Deny buttons come back, or for "always" the confirmation (templates/approvals/_always.html) in their place.
The answer view (approvals.views.answer_pages) asks `always_asked` about every answer, and answers a remembered
"always" only once confirmed as shown: else `confirmation` shows it (in the card, or as a page without JavaScript).
Confirmed, the card's answer and the matching requests chosen are held as one answer (one Undo), each then
applied through `approvals.actions.answer_request` with its own receipt.
"""

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from approvals.forms import answer_form
from approvals.getters import get_request_for
from approvals.kinds import KINDS
from approvals.models import PendingRequest
from approvals.remembered_rules import AlwaysCovers, always_covers
from approvals.responses import Response
from console.tenancy import ConsoleRequest, role_required

# What a confirmation posts back of the answer it confirms (the rest is its own: `always`, `always_covers`,
# `answer_matching`, `matching`, and the decision, which can only be Approve).
_ANSWER_FIELDS = ("reason", "arguments", "remember", "remember_arguments_only", "definition_version", "checkpoint")


@dataclass(frozen=True)
class Always:
    """An approval remembering "always": what the rule covers, whether the operator confirmed it as shown
    (`changed`: they confirmed, but it covers something else now), and the open requests they chose to approve
    with it (their answers)."""

    covers: AlwaysCovers
    confirmed: bool
    changed: bool
    also: list[tuple[PendingRequest, Response]] = field(default_factory=list)


@role_required("operator")
@require_POST
def remember_choice(request: ConsoleRequest, request_id: uuid.UUID) -> HttpResponse:
    """An approval's "Don't ask again" as picked (htmx, on each change of the form's remember inputs): the buttons,
    or for "always" the confirmation in their place; with `reset` (the confirmation's Cancel), the choice again as it
    first stood, nothing remembered. Changes nothing."""
    pending = get_request_for(request, request_id, "run__version", "agent", "session")
    kind = KINDS[pending.kind]
    if not kind.remembers(pending):
        raise Http404("This request offers no “Don't ask again”.")
    if not pending.answerable_by(request.membership):
        raise PermissionDenied("The request is routed to a group you are not in.")
    template = kind.template
    if request.POST.get("reset"):
        return render(request, f"{template}#remember", {"r": pending, "posted": {}, "refocus": True})
    form = answer_form(pending, {**request.POST.dict(), "decision": "approve"})
    # Edited arguments that are not a JSON object say nothing a rule could cover: Approve says what is wrong.
    always = always_asked(request, pending, form.cleaned_data["response"]) if form.is_valid() else None
    if always is None:
        return render(request, f"{template}#buttons", {"r": pending})
    return render(request, "approvals/_always.html", {"r": pending, "covered": always.covers})


def always_asked(request: ConsoleRequest, pending: PendingRequest, response: Response) -> Always | None:
    """For an approval that remembers "always" (and may: else the kind refuses it as for any channel), what the
    rule covers and whether this post confirmed it as shown, with the matching requests it chose to approve too
    (those still matching of the ones it was shown); None for any other answer."""
    if response.remember != "always" or not response.approved or not KINDS[pending.kind].remembers(pending):
        return None
    covers = always_covers(
        request.membership,
        pending,
        override=response.override_arguments,
        only_these=response.remember_arguments_only,
        expires_at=response.expires_at,
    )
    posted = request.POST
    said = posted.get("always") == "confirm"
    confirmed = said and posted.get("always_covers") == covers.digest
    also = []
    if confirmed and posted.get("answer_matching"):
        chosen = set(posted.getlist("matching"))
        also = [(m, Response(request_id=m.id, approved=True)) for m in covers.matching if str(m.id) in chosen]
    return Always(covers, confirmed, changed=said and not confirmed, also=also)


def confirmation(request: ConsoleRequest, pending: PendingRequest, always: Always) -> HttpResponse:
    """An answer remembering "always" not confirmed as shown: nothing is answered; the confirmation instead, in the
    card (htmx: the trial page reads its message) or as a page of its own (no JavaScript)."""
    if always.changed:
        said = "What “always” would cover changed since it was shown (edited arguments): check it and confirm again."
    else:
        said = "“Always” makes a rule: check what it covers below, then confirm."
    context: dict[str, Any] = {"r": pending, "covered": always.covers, "error": said}
    if request.htmx:
        return render(request, "approvals/request.html", {**context, "can_answer": True, "posted": request.POST})
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = ""
    posted = [(name, value) for name in (*_ANSWER_FIELDS, "next", "via") for value in request.POST.getlist(name)]
    return render(request, "approvals/remember_confirm.html", {**context, "page": True, "posted": posted, "back": back})
