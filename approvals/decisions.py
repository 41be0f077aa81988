"""The one door of decisions (SPEC sections 4, 12, 13): every end of a request is written here, whoever made it.

A decision is a `Decision`: who made it (`Actor`: a person, signed in how, through which channel; a rule at its
version; a policy; the tool's approval mode `never`; the system) and what (an answer, or a closing without one:
expired, cancelled, abandoned). `decide` writes it on its request as one conditional update (of two writers at
once, one wins) with the request's receipt in the same transaction, and once committed tells every open inbox, the
long polls and the webhooks that the request left (`approvals.push.notify_requests_closed`, batched per
`announced_together` block). `carry` and `carry_closed` mark decisions already written as carried by the run
that hands them to the engine: not decisions, so no receipt.

A decision nobody was asked for is one `Actor` too (`Actor.rule`, `Actor.policy`, `Actor.approval_mode`): an
external agent's request has a row (its agent reads it by id), so it is opened and decided here like any other;
a hosted turn's call decided without asking has no request (nobody was asked, nothing reads it by id): only its
receipt, written by `record_unasked` from the same actors. `tests/approvals/test_one_door.py` fails when code
outside this module writes a request's end.
"""

import contextlib
import copy
import uuid
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from django.db import transaction

from agents.models import Run
from agents.payloads import EventType
from approvals import receipts
from approvals.models import Approval, PendingRequest, RequestStatus, Rule, Via
from approvals.push import notify_requests_closed
from approvals.receipts import APPROVAL_MODE, CANCEL, HUMAN, POLICY, RULE, SYSTEM, Decider
from approvals.request_spans import trace_decision
from console import metrics
from console.models import Tenant
from console.sql import PreparedUpdate
from console.tenancy import AUTH_METHOD

__all__ = [
    "Actor",
    "Decision",
    "Via",
    "announced_together",
    "carry",
    "carry_closed",
    "decide",
    "hand_back",
    "note_remembered",
    "record_unasked",
]


@dataclass(frozen=True)
class Actor:
    """Who decides, carried unchanged from where the decision was made to its receipt: `via` (how an answer reached
    Airlock; None for a closing), `user` (the person; None for a rule, a policy, a mode, the system) and `decider`
    (the receipt's `decisionSource`, `answeredBy` and `authMethod`)."""

    via: Via | None
    decider: Decider
    user: Any = None
    # The away member a delegate answers for (SPEC section 14); None: in their own right.
    on_behalf_of: Any = None

    @classmethod
    def person(cls, user: Any, via: Via, auth: str | None = None) -> "Actor":
        """A person answering through `via`, signed in as `auth` says ("session", "token:<id>"), else as the
        request being served says (`AUTH_METHOD`), else "cli" (a command)."""
        name = getattr(user, "username", None) or "unknown"
        return cls(via, Decider(HUMAN, name, auth or AUTH_METHOD.get() or "cli"), user)

    def acting_for(self, away: Any) -> "Actor":
        """This person answering as the delegate of the away member `away` (a user)."""
        return replace(self, on_behalf_of=away, decider=replace(self.decider, on_behalf_of=away.username))

    @classmethod
    def rule(cls, rule_id: Any, version: int) -> "Actor":
        """A remembered rule, at the version that matched (`rule:<id>@<version>`)."""
        return cls(Via.RULE, Decider(RULE, f"rule:{rule_id}@{version}"))

    @classmethod
    def policy(cls, binding: Any, definition_version: int) -> "Actor":
        """A policy: its binding in the agent's `hooks`, at the definition version that declared it."""
        return cls(Via.POLICY, Decider(POLICY, f"policy:{binding or '?'}@{definition_version}"))

    @classmethod
    def approval_mode(cls) -> "Actor":
        """The tool's approval mode `never`: approved without asking."""
        return cls(Via.NEVER, Decider(APPROVAL_MODE, SYSTEM))

    @classmethod
    def escalation(cls, step: int) -> "Actor":
        """A step of the request's escalation (SPEC section 14), numbered from 1."""
        return cls(Via.ESCALATION, Decider(receipts.ESCALATION, f"escalation:{step}"))

    @classmethod
    def closing(cls, status: RequestStatus, user: Any = None) -> "Actor":
        """Who closes a request unanswered with `status`: the system (a deadline, a session moved on or deleted), or
        the person who cancelled it (`user`)."""
        if user is not None:
            return cls(None, Decider(CANCEL, user.username, AUTH_METHOD.get() or "cli"), user)
        source = {RequestStatus.EXPIRED: receipts.EXPIRY, RequestStatus.CANCELLED: CANCEL}.get(status, receipts.ABANDON)
        return cls(None, Decider(source, SYSTEM))


@dataclass(frozen=True)
class Decision:
    """What `actor` decided about a request: its `answer`, or (`answer` None) a closing with `closing` (expired,
    cancelled, abandoned). `carried_in`: the run that hands the answer to the engine now (a run request's answers,
    the continuation queued with the last answer, an external agent's own run). `answered_too`: a closing also ends
    an answer stored but carried by no run yet (its agent, session or run is gone); the answer stays for the audit.
    `completes`: the approval that completes the request's quorum (approvals.quorum), written with the decision."""

    actor: Actor
    answer: dict[str, Any] | None = None
    closing: RequestStatus | None = None
    carried_in: Run | None = None
    answered_too: bool = False
    completes: Approval | None = None


def decide(pending: PendingRequest, decision: Decision, now: datetime, *, announce: bool = True) -> bool:
    """Write `decision` on `pending` while the request is still open for it (an answer: open and unanswered; a
    closing: pending and carried by no run), with its receipt, in one transaction; False, and nothing written, when
    another decision came first. Once committed, the inboxes, long polls and webhooks hear that it left, unless
    `announce` is False (a request born decided: nobody saw it open)."""
    actor = decision.actor
    if decision.answer is not None:
        changes: dict[str, Any] = {
            "answer": decision.answer,
            "answered_by": actor.user,
            "answered_at": now,
            "answered_via": actor.via,
            "answered_auth": actor.decider.auth or "",
            "answered_for": actor.on_behalf_of,
        }
        if decision.carried_in is not None:
            changes |= {"status": RequestStatus.ANSWERED, "answered_in": decision.carried_in, "closed_at": now}
        with transaction.atomic(savepoint=False):
            wrote = _written(pending, changes, actor, now)
            if wrote and decision.completes is not None:
                decision.completes.save(force_insert=True)
    else:
        assert decision.closing is not None, "a decision is an answer or a closing"
        changes = {"status": decision.closing, "closed_at": now, "closed_by": actor.user}
        wrote = _written(pending, {**changes, "answer": None}, actor, now)
        still_open = PendingRequest.objects.filter(pk=pending.pk, status=RequestStatus.PENDING, answered_in=None)
        if not wrote and decision.answered_too and still_open.update(**changes):
            # Answered before (that answer had its receipt): closed now without another.
            for name, value in changes.items():
                setattr(pending, name, value)
            wrote = True
    if wrote and announce:
        _announce(pending)
    return wrote


# A request open for a decision: pending, unanswered, carried by no run.
_UNDECIDED = PreparedUpdate(
    lambda request: PendingRequest.objects.filter(
        pk=request, status=RequestStatus.PENDING, answered_in=None, answer__isnull=True
    ),
    request=uuid.UUID,
)


def _written(pending: PendingRequest, changes: dict[str, Any], actor: Actor, now: datetime) -> bool:
    """`changes` written on `pending` while it is undecided, with its receipt as the write leaves it, in one
    transaction (`receipts.record_closing`); on `pending` too once written."""
    closed = copy.copy(pending)
    for name, value in changes.items():
        setattr(closed, name, value)
    if not receipts.record_closing(_UNDECIDED.bind(changes, request=pending.pk), closed, now, actor.decider):
        return False
    for name, value in changes.items():
        setattr(pending, name, value)
    metrics.count_decision(pending, actor.decider.source, now)
    trace_decision(pending, actor.decider.source, now)
    return True


def carry(requests: list[PendingRequest], run: Run, now: datetime) -> bool:
    """Mark the requests whose answers were decided before (inbox, respond API, a rule) carried by `run`, in one
    conditional update while each is as it was found: open with its answer, carried by no run. False when any was
    carried or closed in between (the caller's transaction then writes nothing)."""
    if not requests:
        return True
    found = PendingRequest.objects.filter(
        pk__in=[r.pk for r in requests], status=RequestStatus.PENDING, answered_in=None, answer__isnull=False
    )
    changes = {"status": RequestStatus.ANSWERED, "answered_in": run, "closed_at": now}
    if found.update(**changes) != len(requests):
        return False
    for request in requests:
        for name, value in changes.items():
            setattr(request, name, value)
    return True


def carry_closed(pending: PendingRequest, run: Run) -> bool:
    """Mark a request closed unanswered (expired, cancelled) carried by `run`, which tells the model its call did not
    run; False when another run carried it first."""
    return bool(PendingRequest.objects.filter(pk=pending.pk, answered_in=None).update(answered_in=run))


def hand_back(run: Run, ran: set[str]) -> None:
    """The answers `run` carried but its turn did not consume (it failed): open again, for the session's next turn to
    carry; an approved call in `ran` (its side effects happened) is marked so it never runs again."""
    carried = PendingRequest.objects.filter(answered_in=run, status=RequestStatus.ANSWERED)
    for pending in carried.filter(call_id__in=ran):
        pending.answer = {**(pending.answer or {}), "ranInFailedTurn": True}
        pending.save(update_fields=["answer"])
    carried.update(status=RequestStatus.PENDING, answered_in=None, closed_at=None)
    PendingRequest.objects.filter(answered_in=run).update(answered_in=None)


def note_remembered(pending: PendingRequest, rule_id: str) -> None:
    """Note on an approval's answer the rule it remembered (`rememberedRuleId`), once the rule is made."""
    pending.answer = {**(pending.answer or {}), "rememberedRuleId": rule_id}
    PendingRequest.objects.filter(pk=pending.pk).update(answer=pending.answer)


def record_unasked(run: Run, events: Iterable[Any]) -> None:
    """The receipts of the calls `run`'s turn decided without asking anyone (its stored `events`: `request.answered`
    naming a rule that approved the call or a policy that denied it, whose request id is no request's), decided by
    the same actors as an external agent's request a rule or a policy decides."""
    decided = [
        e for e in events if e.type == EventType.REQUEST_ANSWERED and (e.data.get("ruleId") or e.data.get("policy"))
    ]
    if not decided:
        return
    ids = [e.data["requestId"] for e in decided]
    # A request's (a person answered a policy's escalation) or a call's whose receipt is written already.
    asked = PendingRequest.objects.filter(id__in=ids).values_list("id", flat=True)
    written = receipts.Receipt.objects.filter(request_id__in=ids).values_list("request_id", flat=True)
    known = {str(request_id) for request_id in [*asked, *written]}
    rule_ids = {e.data["ruleId"] for e in decided if e.data.get("ruleId")}
    # The version each rule is at now (the receipt names `rule:<id>@<version>`).
    versions = {str(pk): n for pk, n in Rule.objects.filter(id__in=rule_ids).values_list("id", "version")}
    facts = []
    for event in decided:
        data = event.data
        if data["requestId"] in known:
            continue
        if rule_id := data.get("ruleId"):
            actor, result = Actor.rule(rule_id, versions.get(rule_id, 1)), "approved"
        else:
            actor = Actor.policy(data["policy"].get("binding"), run.version.number)
            result = "denied-by-permission-request-hook"
        name, arguments = data.get("toolName") or "", data.get("arguments")
        facts.append(
            receipts.call_facts(
                run, run.agent.name, data["requestId"], name, arguments, actor.decider, result, event.timestamp
            )
        )
    receipts.record(run.tenant_id, facts)


# The requests decided in the current `announced_together` block, by tenant id: the tenant (when read already) and
# their ids.
_TOGETHER: ContextVar[dict[int, tuple[Tenant | None, list[str]]] | None] = ContextVar(
    "airlock_decided_together", default=None
)


@contextlib.contextmanager
def announced_together() -> Iterator[None]:
    """Announce the requests decided in the block in one push per tenant, once the block's work is committed (a
    sweep, a cancel, a run that carries many answers); nothing when the block raises."""
    decided: dict[int, tuple[Tenant | None, list[str]]] = {}
    token = _TOGETHER.set(decided)
    try:
        yield
    finally:
        _TOGETHER.reset(token)
    for tenant_id, (tenant, ids) in decided.items():
        transaction.on_commit(partial(notify_requests_closed, tenant_id, ids, tenant))


def _announce(pending: PendingRequest) -> None:
    tenant = pending.tenant if PendingRequest.tenant.is_cached(pending) else None  # read already: not again
    together = _TOGETHER.get()
    if together is None:
        transaction.on_commit(partial(notify_requests_closed, pending.tenant_id, [str(pending.id)], tenant))
        return
    known, ids = together.get(pending.tenant_id, (None, []))
    together[pending.tenant_id] = (known or tenant, [*ids, str(pending.id)])
