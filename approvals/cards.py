"""The inbox list's cards, each rendered once a minute at most per state.

A card takes ~1 ms to render (templates/approvals/request.html: its answer, claim and cancel forms, the tool's
description, the arguments' rows), so a page of 25 was three quarters of the inbox page's time; what a card
shows changes only when it is claimed or released, with who may answer it, with its quorum's approvals and its
escalation (`_decided_so_far`), and with the minute ("opened 3 minutes ago"). So the list keeps each card's HTML
under a key of exactly those, in this process, with a placeholder where the form's CSRF token goes (a token is per
response; the placeholder is random per process, so no text a request carries can name it).

A card shows a request's arguments cut (`card_arguments`, the templates' `shown_arguments` filter): a page of cards
stays small whatever the agents sent, and a cut card links to the request's JSON, which has them whole.
"""

import json
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from agents.requirements import needs_several
from approvals.models import PendingRequest

KEPT = 1024
_CSRF_SLOT = f"csrf{secrets.token_hex(16)}"
_CARDS: OrderedDict[tuple[Any, ...], str] = OrderedDict()
_LOCK = threading.Lock()


def listed_card(pending: PendingRequest, *, can_answer: bool, user: Any, csrf_token: Any) -> SafeString:
    """The card of `pending` in a user's inbox list (not after an answer: those cards say what went wrong)."""
    token = str(csrf_token) if csrf_token else ""
    if not token:
        return mark_safe(render_to_string("approvals/request.html", {"r": pending, "can_answer": can_answer}))
    claimer = pending.claimed_by_id
    mine = claimer is not None and claimer == getattr(user, "pk", None)
    key = (pending.pk, can_answer, claimer, pending.claimed_at, mine, *_decided_so_far(pending), int(time.time() // 60))
    with _LOCK:
        html = _CARDS.get(key)
        if html is not None:
            _CARDS.move_to_end(key)
    if html is None:
        context = {"r": pending, "can_answer": can_answer, "user": user, "csrf_token": _CSRF_SLOT}
        html = render_to_string("approvals/request.html", context)
        with _LOCK:
            _CARDS[key] = html
            while len(_CARDS) > KEPT:
                _CARDS.popitem(last=False)
    return mark_safe(html.replace(_CSRF_SLOT, token))


def _decided_so_far(pending: PendingRequest) -> tuple[Any, ...]:
    """What the card shows of the request's way to a decision (SPEC section 14), which changes while it stays open:
    the approvals given (read for the page by `with_approvals`), the groups it is routed to and its escalation's
    next step (a step widens them)."""
    given = tuple(approval.pk for approval in pending.approvals.all()) if needs_several(pending.require) else ()
    return given, pending.approvers, pending.escalation_step, pending.escalation_at


# How much of a request's arguments its card shows: the first rows, each value's first characters, and the first
# characters of the JSON view. An external agent may send up to 256 KB (approvals.external_wire.ARGUMENTS_LIMIT) and a
# card shows them three times, on every open inbox (issue 48: six cards of megabytes made a 138 MB page).
SHOWN_ROWS, SHOWN_VALUE, SHOWN_JSON = 20, 500, 4_000


@dataclass(frozen=True)
class ShownArguments:
    """A call's arguments as its card shows them: `rows` (name, value, whether the value is JSON), the indented
    JSON, and whether any of it is `cut` (the card then links to the whole and offers no editing)."""

    rows: list[dict[str, Any]]
    json: str
    cut: bool


def card_arguments(arguments: Any) -> ShownArguments:
    if not isinstance(arguments, dict):
        return ShownArguments([], "", cut=False)
    rows, cut = [], len(arguments) > SHOWN_ROWS
    for name, value in list(arguments.items())[:SHOWN_ROWS]:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        cut = cut or len(text) > SHOWN_VALUE
        rows.append(
            {"name": _cut(str(name), SHOWN_VALUE), "value": _cut(text, SHOWN_VALUE), "json": not isinstance(value, str)}
        )
    whole = json.dumps(arguments, indent=2, ensure_ascii=False)
    cut = cut or len(whole) > SHOWN_JSON
    return ShownArguments(rows, _cut(whole, SHOWN_JSON), cut)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
