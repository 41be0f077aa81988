"""Answers given in the console are held for `ANSWER_UNDO_SECONDS` before they apply, so the one who gave
them can undo them (issue 31): until the window closes nothing runs, nothing reaches the agent and no webhook
goes out. A held answer is a row (`HeldAnswer`), so a crash or a closed browser loses nothing: a timer in the
process that held it applies it when the window closes, and the deadline sweep applies any a timer missed.

Applying is `answer_request`, exactly as an answer given at once (a window of 0 applies inline); a request
closed meanwhile (another answer, its deadline, a cancel) drops the held answer, which keeps the reason.
While held, the request's card leaves every inbox, as an answered one does; an Undo brings it back.
"""

import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import Q
from django.utils import timezone

from approvals.actions.answers import Answered, acting, answer_request, refuse_by_requirement, response_refusal
from approvals.decisions import Actor, Via
from approvals.kinds import SELECTABLE
from approvals.models import (
    UNSETTLED,
    HeldAnswer,
    HeldState,
    PendingRequest,
    RequestStatus,
)
from approvals.push import notify_requests_held, notify_requests_released
from approvals.responses import TAKEN, Outcome, Response, ResponseRefused
from console.models import Membership

logger = logging.getLogger(__name__)

# An apply that began this long ago and never settled stopped with its process: the sweep tries it again.
STALLED = timedelta(minutes=1)
# The session key saying until when a browser has an answer held (a timestamp): its pages show the notices.
HELD_UNTIL = "airlock_held_until"


class UndoRefused(Exception):
    def __init__(self, detail: str, status: int = 409) -> None:
        super().__init__(detail)
        self.detail, self.status = detail, status


@dataclass
class Held:
    """What `hold_answers` did: the `batch` its notice and Undo name, the requests `held` in it, and the outcome
    of each answer applied or refused at once (request id -> Outcome or ResponseRefused)."""

    batch: uuid.UUID = field(default_factory=uuid.uuid4)
    held: list[PendingRequest] = field(default_factory=list)
    outcomes: dict[str, Outcome | ResponseRefused] = field(default_factory=dict)
    # Why a bulk answer was refused as a whole (its bar's form), before any answer.
    problems: list[str] = field(default_factory=list)
    # request id -> (agent, tool): what a bulk answer's problem lines start with
    names: dict[str, tuple[str, str]] = field(default_factory=dict)

    def answered(self) -> Answered:
        """As a bulk answer reports: the requests answered (held ones included), a line for each of the others."""
        done = Answered(ids=[str(p.id) for p in self.held], problems=list(self.problems))
        for rid, outcome in self.outcomes.items():
            agent, tool = self.names[rid]
            if isinstance(outcome, ResponseRefused):
                done.problems.append(f"{agent} · {tool}: {outcome.detail}")
            elif outcome.status in TAKEN:
                done.ids.append(rid)
            else:
                done.problems.append(f"{tool}: {outcome.message}")
        return done


def hold_answers(membership: Membership, actor: Actor, answers: list[tuple[PendingRequest, Response]]) -> Held:
    """Check each answer now (a refusal is reported at once, as `answer_request` words it) and hold it; with a
    window of 0, or for an answer at an earlier checkpoint (it forks the session), apply it at once."""
    now, window = timezone.now(), timedelta(seconds=settings.ANSWER_UNDO_SECONDS)
    held = Held()
    for pending, response in answers:
        rid = str(pending.id)
        held.names[rid] = (pending.agent.name, pending.tool_name)
        try:
            checked = _checked(membership, actor, pending, response)
        except ResponseRefused as refused:
            held.outcomes[rid] = refused
            continue
        if checked is not None:
            held.outcomes[rid] = checked
            continue
        at_once = not window or response.checkpoint_id is not None
        row = HeldAnswer(
            tenant_id=membership.tenant_id,
            request=pending,
            membership=membership,
            batch=held.batch,
            via=actor.via or "",
            auth_method=actor.decider.auth or "",
            response=response.model_dump(mode="json", by_alias=True),
            due_at=now if at_once else now + window,
        )
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            detail = (
                "Another answer to this request was just given (it may still be undone); this answer changed nothing."
            )
            held.outcomes[rid] = Outcome("already_resolved", rid, detail)
            continue
        if at_once:
            held.outcomes[rid] = _apply(row, now)
        else:
            held.held.append(pending)
    if held.held:
        tenant_id, ids = membership.tenant_id, [str(p.id) for p in held.held]
        transaction.on_commit(partial(notify_requests_held, tenant_id, ids))
        transaction.on_commit(partial(_start_timer, held.batch, window.total_seconds()))
    return held


def _checked(membership: Membership, actor: Actor, pending: PendingRequest, response: Response) -> Outcome | None:
    """None for an answer that may be held; else the outcome that settles it now. A request no longer open,
    or past its deadline, gets `answer_request`'s own words (and stores nothing)."""
    refuse_by_requirement(acting(membership, actor, pending), pending, response)  # 403s and 400s now, not later
    overdue = pending.expires_at is not None and pending.expires_at <= timezone.now()
    closed = pending.status != RequestStatus.PENDING or pending.answer is not None
    if closed or overdue:
        return answer_request(membership, actor, response, run_id=pending.run_id)
    return None if response.checkpoint_id is not None else response_refusal(pending, response)


def _start_timer(batch: uuid.UUID, seconds: float) -> None:
    timer = threading.Timer(seconds + 0.05, _apply_in_thread, [batch])
    timer.daemon = True
    timer.start()


def _apply_in_thread(batch: uuid.UUID) -> None:
    try:
        apply_due(batch=batch)
    except Exception:
        logger.exception("held answers of %s failed to apply; the sweep tries again", batch)
    finally:
        close_old_connections()


def apply_due(now: datetime | None = None, *, batch: uuid.UUID | None = None) -> list[HeldAnswer]:
    """Apply the held answers whose window closed (of `batch` only, when given), and those whose apply began
    over a minute ago and never settled; each is claimed by a conditional update first, so a timer and the
    sweep never apply one twice. The rows it settled."""
    now = now or timezone.now()
    due = Q(state=HeldState.HELD, due_at__lte=now) | Q(state=HeldState.APPLYING, due_at__lte=now - STALLED)
    rows = HeldAnswer.objects.select_related("membership__user", "membership__tenant", "request").filter(due)
    if batch is not None:
        rows = rows.filter(batch=batch)
    settled = []
    for row in rows.order_by("due_at", "created_at")[:500]:
        claimed = HeldAnswer.objects.filter(pk=row.pk, state=row.state, due_at=row.due_at)
        if claimed.update(state=HeldState.APPLYING, due_at=now):
            retried = row.state == HeldState.APPLYING
            row.state, row.due_at = HeldState.APPLYING, now
            _apply(row, now, retried=retried)
            settled.append(row)
    return settled


def _apply(row: HeldAnswer, now: datetime, *, retried: bool = False) -> Outcome:
    """Give the held answer of `row` through `answer_request` and settle the row: applied, or dropped with why."""
    membership, rid = row.membership, str(row.request_id)
    # Applied in a timer or a sweep, outside the request that gave it: its receipt says how its giver signed in
    # then, not "cli" (a row from before the column says nothing: "cli").
    actor = Actor.person(membership.user, Via(row.via), row.auth_method or "cli")
    try:
        response = Response.model_validate(row.response)
        outcome = answer_request(membership, actor, response, run_id=row.request.run_id)
    except ResponseRefused as refused:  # the member's right changed meanwhile, or the agent's version went
        outcome = Outcome("invalid_response", rid, refused.detail)
    applied = outcome.status in TAKEN
    if retried and outcome.status == "already_resolved":
        # The apply that stopped may have stored this very answer before its process went.
        stored = PendingRequest.objects.filter(pk=row.request_id, answered_by=membership.user, answered_via=row.via)
        applied = stored.exists()
    message = outcome.message
    if not applied and outcome.status == "already_resolved":
        answered = PendingRequest.objects.filter(pk=row.request_id).values_list("answered_by__username", flat=True)
        message = f"{answered.first() or 'someone'} answered it meanwhile."
    row.state = HeldState.APPLIED if applied else HeldState.DROPPED
    row.settled_at, row.outcome = now, message
    row.save(update_fields=["state", "settled_at", "outcome"])
    if not applied:
        # Its card left every inbox when it was held; still open (a refused answer), it comes back.
        transaction.on_commit(partial(_release, [row.request_id]))
    return outcome


def undo(membership: Membership, user: Any, batch: uuid.UUID) -> list[HeldAnswer]:
    """Take back the held answers of `batch` (only the one who gave them may): their requests stay pending and
    come back to every inbox; the audit lists each as undone. Raises HeldAnswer.DoesNotExist for a batch this
    tenant does not have, UndoRefused when it is not the caller's or nothing is held any more."""
    rows = list(notice_rows(membership.tenant_id).filter(batch=batch))
    if not rows:
        raise HeldAnswer.DoesNotExist
    who = rows[0].membership.user
    if who.pk != user.pk:
        raise UndoRefused(f"Only {who.username}, who gave this answer, can undo it.", 403)
    now = timezone.now()
    undone = [
        row
        for row in rows
        if HeldAnswer.objects.filter(pk=row.pk, state=HeldState.HELD).update(
            state=HeldState.UNDONE, settled_at=now, outcome=f"Undone by {user.username}."
        )
    ]
    if not undone:
        states = {row.state for row in rows}
        if HeldState.UNDONE in states:
            raise UndoRefused("It was undone already.")
        if HeldState.DROPPED in states:
            raise UndoRefused(f"Nothing to undo: it was not applied. {rows[0].outcome}")
        raise UndoRefused("Too late to undo: the answer was applied.")
    for row in undone:
        row.state, row.settled_at = HeldState.UNDONE, now
    transaction.on_commit(partial(_release, [row.request_id for row in undone]))
    return undone


def _release(request_ids: list[uuid.UUID]) -> None:
    cards = PendingRequest.objects.open().select_related("agent", "session", "run__version", "claimed_by")
    notify_requests_released(list(cards.filter(id__in=request_ids).order_by("opened_at", "id")))


def notice_rows(tenant_id: int) -> Any:
    """The tenant's held answers with what a notice of them reads."""
    related = ("membership__user", "request__agent")
    return HeldAnswer.objects.select_related(*related).filter(tenant_id=tenant_id).order_by("created_at", "id")


@dataclass
class Notice:
    """A console answer as its notice shows it (templates/approvals/_undo.html)."""

    batch: uuid.UUID
    summary: str
    state: str
    outcome: str
    due_at: datetime
    # What an applied approval counted toward, its request still waiting for more (SPEC section 14).
    counted: str = ""

    @property
    def wait_ms(self) -> int:
        """How long until its window closes (then the notice asks how it went)."""
        return max(250, int((self.due_at - timezone.now()).total_seconds() * 1000) + 300)


def notices(rows: list[HeldAnswer]) -> list[Notice]:
    """One notice per batch of `rows`, in their order: "Approved send_email", "Approved 3 requests"."""
    batches: dict[uuid.UUID, list[HeldAnswer]] = {}
    for row in rows:
        batches.setdefault(row.batch, []).append(row)
    return [_notice(listed) for listed in batches.values()]


def _notice(rows: list[HeldAnswer]) -> Notice:
    first = rows[0]
    verb = "Approved" if first.response.get("approved") else "Denied"
    if len(rows) > 1:  # a batch bar's: approvals, all approved or all denied
        summary = f"{verb} {len(rows)} requests"
    elif first.request.kind in SELECTABLE:
        summary = f"{verb} {first.request.tool_name}"
    else:  # the notice is short: what the answer held is the card's to say (`Kind.done`)
        summary = f"Answered {first.request.tool_name or 'the request'}"
    states = {row.state for row in rows}
    if states & set(UNSETTLED):
        state = HeldState.HELD if HeldState.HELD in states else HeldState.APPLYING
    else:  # a bulk answer settles each request on its own: applied if any was, and why the others were dropped
        state = next(s for s in (HeldState.APPLIED, HeldState.UNDONE, HeldState.DROPPED) if s in states)
    dropped = dict.fromkeys(f"{row.request.tool_name}: {row.outcome}" for row in rows if row.state == "dropped")
    counted = [
        row.outcome for row in rows if row.state == HeldState.APPLIED and row.request.status == RequestStatus.PENDING
    ]
    due = max(row.due_at for row in rows)
    return Notice(first.batch, summary, state, "; ".join(dropped), due, " ".join(dict.fromkeys(counted)))
