"""A person's answer to a pending request outside a run (SPEC sections 4 and 12, "Respond"), whatever the channel:
the inbox's card and its batch and selection bars, the trial page, a held answer applied, the respond routes.

The answer is checked by its kind, then written as a decision (`approvals.decisions.decide`: a conditional update,
so two operators answering at once get one `accepted` and one `already_resolved`) and the session goes on by one
route (`agents.actions.continue_after`: the last answer queues its continuation in the same transaction, any other
is committed before the session's answers are read again); an external agent's request is settled instead.
"""

import uuid
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from agents.actions import continue_after, continue_session
from agents.checkpoints import fork, forked_from, request_copies
from agents.models import Run, RunStatus
from agents.requirements import needs_several
from agents.signals import requests_opened
from approvals.actions.expiry import expire_due
from approvals.actions.settling import is_external, settle
from approvals.decisions import Actor, Decision, announced_together, decide
from approvals.external_wire import request_ids
from approvals.kinds import KINDS, AnswerRefused
from approvals.models import NotAnApprover, PendingRequest, RequestStatus, refuse_unless_answerable, rights_of
from approvals.quorum import approve_toward, counts_toward_quorum, refuse_self_approval
from approvals.responses import Outcome, Response, ResponseRefused, Status
from console.models import Membership
from console.sql import Prepared

# The fields that carry an answer (the rest say which request and where the continuation goes; `remember`
# and its `expiresAt` are refused by the kinds that take none).
ANSWER_FIELDS = set(Response.model_fields) - {
    "request_id",
    "remember",
    "expires_at",
    "definition_version",
    "new_run_id",
    "checkpoint_id",
}

_TERMINAL_STATUS: dict[str, Status] = {
    RequestStatus.EXPIRED: "expired",
    RequestStatus.CANCELLED: "cancelled",
    RequestStatus.ABANDONED: "execution_ended",
}


def _answered(tenant: int, run: uuid.UUID, request: uuid.UUID) -> QuerySet[PendingRequest]:
    """The request an answer names, with all an answer reads, in one query; the session's conversation (a whole
    history) is not among it. `others_open`: whether another request of the session waits to be carried (open, or
    closed unanswered: its call must be closed): when none does, this answer is the last one and the continuation
    carries only it."""
    waiting = (RequestStatus.PENDING, RequestStatus.EXPIRED, RequestStatus.CANCELLED)
    others = PendingRequest.objects.filter(session=OuterRef("session"), status__in=waiting, answered_in=None).exclude(
        pk=OuterRef("pk")
    )
    found = PendingRequest.objects.select_related(
        "run__version", "session__agent", "session__tenant", "agent", "tenant"
    )
    found = found.annotate(others_open=Exists(others)).defer("session__conversation")
    return found.filter(tenant=tenant, run_id=run, id=request)


# Compiled once (issue 56): every answer reads it.
_ANSWERED = Prepared(_answered, tenant=int, run=uuid.UUID, request=uuid.UUID)


def answer_request(
    membership: Membership, actor: Actor, response: Response, *, run_id: uuid.UUID | None = None
) -> Outcome:
    """`actor`'s answer to the request `response.request_id` of the tenant (of the run `run_id`, when the route names
    a run), hosted or external: the inbox, the trial page, a held answer applied, `POST /api/runs/{id}/responses` and
    `POST /api/requests/{id}/responses` (which may name an external request by its agent's own `requestId`, SPEC
    section 12). Raises PendingRequest.DoesNotExist for a request this tenant (or its run) never issued,
    ResponseRefused for a refused answer (403 `not_an_approver` for a member outside the group the request is routed
    to)."""
    user = actor.user
    if run_id is None:
        ids = request_ids(membership.tenant_id, response.request_id)
        found_ids = PendingRequest.objects.filter(tenant=membership.tenant, id__in=ids).values_list("id", "run_id")
        named = found_ids.first()
        if named is None:
            raise PendingRequest.DoesNotExist
        stored_id, run_id = named
        response = response.model_copy(update={"request_id": stored_id})
    pending = _ANSWERED.get(tenant=membership.tenant_id, run=run_id, request=response.request_id)
    rid = str(pending.id)
    actor = acting(membership, actor, pending)
    if response.checkpoint_id is not None:
        # At the session's latest checkpoint an answer is like any other; at an earlier one, where the request
        # was pending, it forks the session from there, whatever became of the request since (SPEC section 9).
        checkpoints = pending.session.checkpoints.select_related("session__agent", "run", "version")
        checkpoint = checkpoints.filter(id=response.checkpoint_id).first()
        if checkpoint is None:
            detail = f"The request's session has no checkpoint {response.checkpoint_id}."
            return Outcome("invalid_response", rid, detail)
        if checkpoints.filter(number__gt=checkpoint.number).exists():
            if rid not in checkpoint.open_requests:
                return Outcome("invalid_response", rid, f"The request was not pending at checkpoint {checkpoint.id}.")
            refuse_by_requirement(actor, pending, response)
            if needs_several(pending.require) and response.approved is not False:
                detail = "A request that needs several approvals takes no answer at an earlier checkpoint (a fork)."
                raise ResponseRefused("approvals_required", detail, 409)
            now = timezone.now()
            copies = request_copies(checkpoint, now)
            copy = copies[pending.id]
            payload = _payload(copy, response)
            if isinstance(payload, Outcome):
                return replace(payload, request_id=rid)
            forked = fork(checkpoint, list(copies.values()), copy, Decision(actor, payload), now)
            if forked is None:
                return Outcome("execution_ended", rid, "The request's session or its agent was deleted.")
            transaction.on_commit(partial(requests_opened.send, PendingRequest, requests=forked.waiting))
            continuation = continue_session(user, forked.session)
            return Outcome(
                "accepted",
                str(copy.id),
                f"The answer was stored in a new session, forked at checkpoint {checkpoint.id}.",
                str(continuation.id) if continuation else None,
                session_id=forked.session.key,
                forked_from=forked_from(forked.session),
            )
    if pending.status in _TERMINAL_STATUS:
        why: str = pending.status
        if pending.status == RequestStatus.ABANDONED and pending.agent.deleted_at is not None:
            why = "its agent was deleted"
        elif pending.status == RequestStatus.ABANDONED and pending.session.deleted_at is not None:
            why = "its session was deleted"
        return Outcome(_TERMINAL_STATUS[pending.status], rid, f"The request was closed: {why}.")
    now = timezone.now()
    if pending.expires_at is not None and pending.expires_at <= now and pending.answer is None:
        # Past its deadline but not swept yet: close it now, as the sweep would, and say so.
        expire_due(now)
        return Outcome("expired", rid, "The request's deadline passed before this answer arrived.")
    payload = _payload(pending, response)
    if isinstance(payload, Outcome):
        return payload
    if pending.answer is not None and _lost_with_its_worker(pending):
        detail = (
            "The turn that carried this request's answer was lost with its worker and cannot be resumed by an"
            " answer; send the next turn of the session: the stored answer goes with it."
        )
        return Outcome("runtime_unavailable", rid, detail)
    if pending.answer is not None or pending.status == RequestStatus.ANSWERED:
        return Outcome("already_resolved", rid, "The request was answered before; this answer changed nothing.")
    decision, now = Decision(actor, payload), timezone.now()
    if pending.require is not None:
        counted = _toward_quorum(membership, actor, pending, payload, response, now)
        if isinstance(counted, Outcome):
            return counted
        decision = counted

    def write(carried_in: Run | None) -> bool:
        return decide(pending, replace(decision, carried_in=carried_in), now)

    continued = None
    if is_external(pending):  # an external agent reads its decision; no run of Airlock's continues
        # Its waiters wake to the request settled: answered, its run completed. Stored and settled in one
        # transaction: a cancel meanwhile (`cancel_request`, which closes an answer not carried yet) waits for both,
        # then finds the request settled (409), so an answer is never both accepted and cancelled.
        with announced_together(), transaction.atomic():
            if recorded := write(None):
                settle(pending)
    else:
        # The last answer (no other request was waiting when it was read, and none opens while the session waits)
        # is all the continuation carries.
        last = not pending.others_open  # type: ignore[attr-defined]  # annotated by _answered
        recorded, continued = continue_after(pending, payload, user, write, last=last)
    if not recorded:
        # Another answer won, or the sweep closed the request (expired) since it was read above.
        now_status = PendingRequest.objects.filter(pk=pending.pk).values_list("status", flat=True).first()
        if now_status in _TERMINAL_STATUS:
            return Outcome(_TERMINAL_STATUS[now_status], rid, f"The request was closed meanwhile: {now_status}.")
        return Outcome("already_resolved", rid, "The request was answered meanwhile; this answer changed nothing.")
    return Outcome("accepted", rid, "The answer was stored.", str(continued.id) if continued else None)


def acting(membership: Membership, actor: Actor, pending: PendingRequest) -> Actor:
    """`actor` as it answers `pending`: refused (403 `not_an_approver`) outside the member's right; the delegate of
    an away member when it answers in their right only (SPEC sections 11 and 14)."""
    rights = rights_of(membership) if pending.approvers else None
    try:
        refuse_unless_answerable(membership, [pending], rights)
    except NotAnApprover as refused:
        raise ResponseRefused(refused.code, refused.detail, refused.status) from None
    away = rights.on_behalf_of(pending.groups, pending.separated_from)[1] if rights is not None else None
    return actor.acting_for(away) if away is not None else actor


def refuse_by_requirement(actor: Actor, pending: PendingRequest, response: Response) -> None:
    """What a request's requirement refuses (SPEC section 14): an approval from the one who asked (or their
    delegate), and a rule remembered from one approval of several. Only an approval: the one who asked may deny,
    answer a question, or give a client tool's result."""
    if pending.require is None:
        return
    if _approves(pending, response):
        refuse_self_approval(pending, actor)
    if response.remember and pending.approvals_required > 1:
        detail = "The request needs several approvals: one person cannot remember a rule that would skip them."
        raise ResponseRefused("remember_not_allowed", detail)


def _approves(pending: PendingRequest, response: Response) -> bool:
    """Whether `response` approves `pending` (`approved: true`, or `json: true` for a kind that reads it so)."""
    if response.approved is not None or response.json_value is None:
        return response.approved is True
    read = KINDS[pending.kind].read_json(response.json_value)
    return read is not None and read.get("approved") is True


def _toward_quorum(
    membership: Membership, actor: Actor, pending: PendingRequest, payload: dict[str, Any], response: Response, now: Any
) -> Decision | Outcome:
    """An answer to a request with a requirement (SPEC section 14): refused from the one who asked; an approval
    that does not complete its quorum recorded (`recorded`, or `already_approved_by_you`); the decision that
    completes it, carrying every approval that counted."""
    rid = str(pending.id)
    refuse_by_requirement(actor, pending, response)
    if not counts_toward_quorum(pending, payload):
        return Decision(actor, payload)
    try:
        tally = approve_toward(membership, actor, pending, payload, now)
    except PendingRequest.DoesNotExist:
        return Outcome("already_resolved", rid, "The request was decided meanwhile; this approval changed nothing.")
    if tally.repeated:
        detail = f"You approved these arguments before; {tally.given} of {tally.required}, {tally.waiting_for()}."
        return Outcome("already_approved_by_you", rid, detail, approvals=tally.wire())
    if not tally.complete:
        detail = f"Approval recorded: {tally.given} of {tally.required}, {tally.waiting_for()}."
        return Outcome("recorded", rid, detail, approvals=tally.wire())
    approvals = [given.wire() for given in tally.counted]
    return Decision(actor, {**payload, "approvals": approvals}, completes=tally.mine)


@dataclass
class Answered:
    """What a bulk answer did: the requests answered, and why each of the others was not (a line each)."""

    ids: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def response_refusal(pending: PendingRequest, response: Response) -> Outcome | None:
    """The outcome refusing `response` to the open request `pending`, as `answer_request` would refuse it,
    or None; stores nothing (raises ResponseRefused). For an answer checked now and applied later."""
    payload = _payload(pending, response)
    return payload if isinstance(payload, Outcome) else None


def _given(response: Response, name: str) -> bool:
    return bool(getattr(response, name) != Response.model_fields[name].default)


def _payload(pending: PendingRequest, response: Response) -> dict[str, Any] | Outcome:
    """The stored answer for `pending`, or the outcome that refuses it (raises ResponseRefused for a 400)."""
    kind = KINDS[pending.kind]
    if response.json_value is not None:
        # `json` is the answer read as the kind's type (a boolean for an approval, a result for a client
        # tool, …); given with the kind's own fields, or of no type the kind reads, it is a mismatch.
        read = kind.read_json(response.json_value)
        given = {name for name in ANSWER_FIELDS - {"json_value"} if _given(response, name)}
        if read is None or given:
            return Outcome("response_type_mismatch", str(pending.id), kind.takes)
        response = response.model_copy(update={**read, "json_value": None})
    # A field of another kind would be silently dropped from what the client meant (an `errorMessage`
    # sent with an approval): the answer is for another kind of request.
    foreign = ANSWER_FIELDS - kind.fields
    missing = kind.required is not None and getattr(response, kind.required) is None
    if missing or any(_given(response, name) for name in foreign):
        return Outcome("response_type_mismatch", str(pending.id), kind.takes)
    modes = None
    if response.definition_version is not None:
        version = pending.agent.versions.filter(number=response.definition_version).first()
        if version is None:
            detail = f"The agent {pending.agent.name!r} has no version {response.definition_version}."
            raise ResponseRefused("unknown_version", detail)
        modes = {t.name: t.approval for t in version.definition.tools}
    if response.new_run_id is not None and Run.objects.filter(id=response.new_run_id).exists():
        raise ResponseRefused("run_exists", f"A run {response.new_run_id} exists already.", 409)
    try:
        stored = kind.answer(pending, response.model_dump(mode="json", by_alias=True), modes)
    except AnswerRefused as refused:
        if refused.code == "invalid_content":
            return Outcome("invalid_response", str(pending.id), refused.detail)
        raise ResponseRefused(refused.code, refused.detail) from None
    # Kept with the answer: the continuation, started by whichever answer comes last, honours them.
    if response.definition_version is not None:
        stored["definitionVersion"] = response.definition_version
    if response.new_run_id is not None:
        stored["newRunId"] = str(response.new_run_id)
    return stored


def _lost_with_its_worker(pending: PendingRequest) -> bool:
    """Whether the answer stored on `pending` came back from a continuation whose worker died for good (failed
    `worker_lost`, no attempt left): nothing runs it until the session's next turn."""
    last = pending.session.last_run
    lost = last is not None and last.status == RunStatus.FAILED and (last.error or {}).get("code") == "worker_lost"
    return lost and pending.status == RequestStatus.PENDING and pending.answered_in_id is None
