import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Prefetch, prefetch_related_objects
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver
from django.utils import timezone

from agents.definitions import UnknownGroup
from agents.models import Agent, AgentVersion, Run, Session
from agents.queries import picked
from agents.request_kinds import RequestKind, kind_choices
from approvals.answerers import ApproverGroup, Away, Rights, groups_of, rights_of, routed_to
from approvals.held_models import UNSETTLED, HeldAnswer, HeldState
from approvals.receipts import ChainSignature, Receipt, ReceiptHead, genesis
from approvals.rule_models import Rule, RuleVersion

# The tables declared beside: the receipts' (approvals.receipts), the rules' (approvals.rule_models), the held
# answers' (approvals.held_models).
__all__ = [
    "UNSETTLED",
    "ApproverGroup",
    "Away",
    "ChainSignature",
    "HeldAnswer",
    "HeldState",
    "Receipt",
    "ReceiptHead",
    "Rule",
    "RuleVersion",
    "groups_of",
    "rights_of",
    "routed_to",
]
from console.models import Membership, Tenant


class RequestStatus(models.TextChoices):
    PENDING = "pending"
    ANSWERED = "answered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"


class Via(models.TextChoices):
    """How an answer reached Airlock (`PendingRequest.answered_via`, `answeredVia` on the wire; blank for a request
    closed unanswered). Who decided is the receipt's (`approvals.decisions.Actor`)."""

    INBOX = "inbox", "the inbox"
    TRIAL = "trial", "the trial page"
    API = "api", "the respond API"
    RUN = "run", "a run request's answers"
    RULE = "rule", "a remembered rule"
    POLICY = "policy", "a policy"
    NEVER = "never", "the tool's approval mode never"
    ESCALATION = "escalation", "the request's escalation"
    SLACK = "slack", "Slack"
    AG_UI = "ag-ui", "an AG-UI client"
    A2A = "a2a", "an A2A client"


TERMINAL = (RequestStatus.EXPIRED, RequestStatus.CANCELLED, RequestStatus.ABANDONED)
# A request still waiting for its answer (the inbox, the pending counts).
OPEN = models.Q(status=RequestStatus.PENDING, answer__isnull=True)


def with_approvals(requests: Iterable["PendingRequest"]) -> None:
    """Read the approvals of those of `requests` whose requirement counts them (SPEC section 14), in one query (none
    when no request has one): their cards and JSON say the count."""
    given = Prefetch("approvals", queryset=Approval.objects.select_related("on_behalf_of"))  # "dan for sam"
    prefetch_related_objects([pending for pending in requests if pending.require is not None], given)


def mark_answerable(membership: Membership, requests: Iterable["PendingRequest"]) -> None:
    """Set `answerable` on each request: whether the member may answer it (SPEC sections 11 and 14). The member's
    rights are read only when a request is routed to a group."""
    listed = list(requests)
    rights = rights_of(membership) if any(pending.approvers for pending in listed) else None
    for pending in listed:
        pending.answerable = pending.answerable_by(membership, rights)  # type: ignore[attr-defined]


class NotAnApprover(Exception):
    """A member outside the group a request is routed to, answering it or closing it unanswered (SPEC section
    11): a 403 `not_an_approver`, nothing changed."""

    code, status = "not_an_approver", 403

    def __init__(self, pending: "PendingRequest") -> None:
        self.pending = pending
        groups = "those groups" if len(pending.groups) > 1 else "that group"
        self.detail = f"The request is for {pending.approvers_label}: only members of {groups} and admins answer it."
        super().__init__(self.detail)

    @property
    def run_detail(self) -> str:
        """The refusal as the run routes word it (a run request's answers and abandonments, a cancel, a
        deletion): naming the request, and that closing it unanswered takes the same right."""
        only = "only members of that group and admins answer it, or close it unanswered"
        return f"The request {self.pending.id} is for {self.pending.approvers_label}: {only}."


def refuse_unless_answerable(
    membership: Membership, requests: Iterable["PendingRequest"], rights: Rights | None = None
) -> None:
    """Answering a request and closing it unanswered (abandoning it, cancelling its run, deleting its session)
    take the same right, or an operator outside a group would stop what the group decides: raises NotAnApprover
    for the first of `requests` the member may not answer (`PendingRequest.answerable_by`)."""
    for pending in requests:
        if not pending.answerable_by(membership, rights):
            raise NotAnApprover(pending)


class Digest(models.Model):
    """A member's opt-in to e-mail digests (SPEC section 11): requests of the tenant they may answer that have
    waited longer than `after_minutes`, at most one e-mail every `after_minutes` (approvals/digests.py)."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="digest")
    after_minutes = models.PositiveIntegerField()
    # Requests that reached the member up to here were old enough for a digest already sent: none is listed twice.
    through = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"digest of {self.membership} after {self.after_minutes} min"


@receiver(post_save, sender=Tenant)
def _start_chain(sender: type[Tenant], instance: Tenant, created: bool, **kwargs: Any) -> None:
    """A new tenant's chain of receipts starts empty, its head ready to be locked by the first decision."""
    if created:
        ReceiptHead.objects.get_or_create(tenant=instance, defaults={"hash": genesis(instance.pk)})


@receiver(pre_save, sender=AgentVersion)
def _refuse_unknown_groups(sender: type[AgentVersion], instance: AgentVersion, **kwargs: Any) -> None:
    """Every save of a definition (API, form, rollback) names only groups the tenant has. A receiver because
    groups live here, above agents.models in the layers; `Agent.append_version` raises what it raises."""
    named = instance.definition.approver_groups
    if not named:
        return
    tenant_id = instance.agent.tenant_id
    groups = ApproverGroup.objects.filter(tenant_id=tenant_id, name__in=named.values())
    known = set(groups.values_list("name", flat=True))
    unknown = {field: f"no group named {name!r} in this tenant" for field, name in named.items() if name not in known}
    if unknown:
        raise UnknownGroup(unknown)


class PendingRequestQuerySet(models.QuerySet["PendingRequest"]):
    def open(self) -> "PendingRequestQuerySet":
        """The requests still waiting for their answer: pending, nothing stored yet (the `OPEN` indexes)."""
        return self.filter(OPEN)

    def answerable_by(self, membership: Membership) -> "PendingRequestQuerySet":
        """The requests the member may answer: none for a reader, all for an admin, else those routed to no
        group or to one of the member's."""
        rights = rights_of(membership)
        if not rights.operator:
            return self.none()
        if rights.any_group:
            return self
        return self.filter(models.Q(approvers="") | routed_to(rights.all_groups))

    def matching(
        self, *, status: str | None = None, agent: str | None = None, kind: str | None = None, tool: str | None = None
    ) -> "PendingRequestQuerySet":
        """The requests the filters pick (the inbox's and `GET /api/requests`'); an empty filter picks any.
        `status`: `pending` is the requests still waiting (`open()`), `answered` those with an answer stored,
        any other a status."""
        requests: PendingRequestQuerySet = self
        if status == "pending":
            requests = requests.open()
        elif status == "answered":
            requests = requests.exclude(answer__isnull=True)
        elif status:
            requests = requests.filter(status=status)
        return picked(requests, agent__name=agent, kind=kind, tool_name=tool)


class PendingRequest(models.Model):
    """Something a run asks of the outside world; answered once, or closed with a terminal kind. Its end is
    written by `approvals.decisions.decide` only."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="requests")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="requests")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="requests")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="requests")
    kind = models.CharField(max_length=16, choices=kind_choices)
    tool_name = models.CharField(max_length=200)
    call_id = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict)
    message = models.TextField(blank=True)
    requested_schema = models.JSONField(null=True, blank=True)
    # What the engine needs to resume the call (e.g. an MCP request state); never shown to users.
    engine_state = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=RequestStatus.choices, default=RequestStatus.PENDING)
    opened_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    answer = models.JSONField(null=True, blank=True)
    answered_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    answered_at = models.DateTimeField(null=True, blank=True)
    answered_via = models.CharField(max_length=16, blank=True, choices=Via.choices)
    # How the person who answered signed in (the receipt's `authMethod`: session, token:<id>, slack:..., oidc:...).
    answered_auth = models.CharField(max_length=64, blank=True)
    # The away member a delegate answered for (SPEC section 14); None: in their own right.
    answered_for = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who closed it without an answer (a cancel); None when the system did (deadline, the session moved on).
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The policy escalation this request stands for (SPEC section 8): {binding, reason, message}.
    policy = models.JSONField(null=True, blank=True)
    # The run that carried the answer to the engine (the continuation).
    answered_in = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Who said they are handling it (SPEC section 11): a signal to the other operators, not a lock.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    # The groups routed to answer it, comma-joined ("" for any operator), named by the definition when it opened.
    approvers = models.CharField(max_length=255, blank=True)
    # What deciding it requires (SPEC section 14: `approvals`, `fromEach`, `selfApproval`); None: one answer does.
    require = models.JSONField(null=True, blank=True)
    # Its escalation's steps (SPEC section 14: `after`, then `to` groups or `then` an end), the next one's index and
    # when it is due (the deadline sweep takes them: approvals/actions/escalation.py).
    escalation = models.JSONField(null=True, blank=True)
    escalation_step = models.PositiveSmallIntegerField(default=0)
    escalation_at = models.DateTimeField(null=True, blank=True)
    # When its escalation's `to` steps added each group ({group: ISO time}; the groups it opened with are not in it)
    # and the last such time: a digest lists it to a new group's members from then (approvals/digests.py).
    widened = models.JSONField(null=True, blank=True)
    widened_at = models.DateTimeField(null=True, blank=True)
    # Who asked: the member who started the turn, or whose token opened the external request (separation of duties).
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = PendingRequestQuerySet.as_manager()

    class Meta:
        ordering = ["opened_at"]
        indexes = [
            models.Index(fields=["tenant", "status", "opened_at"], name="request_tenant_status"),
            models.Index(fields=["session", "status"], name="request_session_status"),
            # The open requests (pending, no answer yet) are a sliver of a tenant's history: the inbox page,
            # its tool list and every pending count read these two small indexes, never the answered rows
            # (bench/inbox_scale.py).
            models.Index(fields=["tenant", "opened_at", "id"], condition=OPEN, name="request_open"),
            models.Index(fields=["tenant", "tool_name"], condition=OPEN, name="request_open_tool"),
            # The escalation steps due: few requests have one, fewer are open.
            models.Index(
                fields=["escalation_at"],
                condition=OPEN & models.Q(escalation_at__isnull=False),
                name="request_escalation_due",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool_name or 'output'} ({self.status})"

    @property
    def approval_mode(self) -> str:
        """The approval mode the request was opened under, by the version of the run that asked."""
        return self.approval_mode_in({t.name: t.approval for t in self.run.version.definition.tools})

    def approval_mode_in(self, modes: Mapping[str, str]) -> str:
        """The request's approval mode by the definition whose tool `modes` (name -> mode) are given; an MCP
        tool carries its server's."""
        return (self.engine_state or {}).get("approvalMode") or modes.get(self.tool_name, "always")

    def answerable_by(self, membership: Membership, rights: Rights | None = None) -> bool:
        """Whether the member may answer it: an operator when it is routed to no group; else an admin or a
        member of one of its groups, or a delegate standing in for one (`rights`: the member's, when read)."""
        if not membership.allows("operator"):
            return False
        if not self.approvers or membership.allows("admin"):
            return True
        return (rights or rights_of(membership)).on_behalf_of(self.groups)[0]

    @property
    def groups(self) -> list[str]:
        """The groups routed to answer it; none: any operator."""
        return self.approvers.split(",") if self.approvers else []

    @property
    def separated_from(self) -> Any:
        """The id of the user the request's requirement keeps from approving it (SPEC section 14, `selfApproval`
        false): who asked; None when it keeps nobody."""
        require = self.require
        return None if require is None or require.get("selfApproval") else self.requested_by_id

    @property
    def approvers_wire(self) -> str | list[str] | None:
        """The groups as the definition names them: one group, a list, or None for any operator."""
        groups = self.groups
        return None if not groups else groups[0] if len(groups) == 1 else groups

    @property
    def approvers_label(self) -> str:
        """The groups routed to answer it, as a sentence says them ("sre or security")."""
        return " or ".join(self.groups)

    @property
    def next_escalation(self) -> tuple[str, datetime] | None:
        """What its escalation does next and when (SPEC section 14): ("escalates to sre-leads", at), ("denied unless
        decided", at); None when no step is left."""
        steps = self.escalation or []
        if self.escalation_at is None or self.escalation_step >= len(steps):
            return None
        step = steps[self.escalation_step]
        if step.get("to"):
            return f"escalates to {', '.join(step['to'])}", self.escalation_at
        ends = {"deny": "denied", "approve": "approved", "expire": "closed expired"}
        return f"{ends[step['then']]} unless decided before", self.escalation_at

    @property
    def approvals_required(self) -> int:
        """How many distinct people's approvals decide it approved (SPEC section 14)."""
        return int((self.require or {}).get("approvals", 1))

    def claim(self, user: Any, now: datetime) -> bool:
        """Mark the open request as handled by `user` (taking over anyone else's claim); False when it is
        answered or closed meanwhile."""
        if not PendingRequest.objects.open().filter(pk=self.pk).update(claimed_by=user, claimed_at=now):
            return False
        self.claimed_by, self.claimed_at = user, now
        return True

    def release(self) -> None:
        """Let the claim go, whoever held it."""
        PendingRequest.objects.filter(pk=self.pk).update(claimed_by=None, claimed_at=None)
        self.claimed_by, self.claimed_at = None, None

    @property
    def asker(self) -> tuple[str, str] | None:
        """(name, agentId) of the sub-agent that asked, the innermost when sub-agents call sub-agents (SPEC
        section 10; its engine state leads back to it, agents/engine/subagent_turns.py); None: the run's agent."""
        state, found = self.engine_state or {}, None
        while "subagent" in state:
            found = (state["subagent"]["name"], state["subagent"]["agentId"])
            state = state.get("inner") or {}
        return found

    @property
    def asker_id(self) -> str | None:
        """The `agentId` the events of the sub-agent that asked carry; None for the run's agent."""
        asker = self.asker
        return asker[1] if asker is not None else None

    @property
    def choices(self) -> list[str]:
        """A question's choices (SPEC section 9; `ask_user(question, choices?, allow_freeform?)`), else none."""
        if self.kind != RequestKind.QUESTION:
            return []
        return [str(choice) for choice in self.arguments.get("choices") or []]

    @property
    def allows_freeform(self) -> bool:
        """Whether a question takes words of the person's own: as the tool says, else only without choices."""
        said = self.arguments.get("allow_freeform")
        return bool(said) if said is not None else not self.choices

    def wire(self) -> dict[str, Any]:
        wire = {
            "requestId": str(self.id),
            "kind": self.kind,
            "toolName": self.tool_name or None,
            "callId": self.call_id,
            "arguments": self.arguments,
            "message": self.message or None,
            "requestedSchema": self.requested_schema,
            "expiresAt": self.expires_at.isoformat() if self.expires_at else None,
            "policy": self.policy,
        }
        if self.kind == RequestKind.QUESTION:
            wire |= {"question": self.message, "choices": self.choices, "allowFreeform": self.allows_freeform}
        if self.require is not None:  # SPEC section 14: what deciding it requires, every approval given so far
            given = [] if self._state.adding else [approval.wire() for approval in self.approvals.all()]
            wire |= {"require": self.require, "approvals": given}
        return wire


class Approval(models.Model):
    """One person's approval of a request whose requirement needs more than its first answer (SPEC section 14):
    it counts toward the quorum while it approves the arguments the request would run with
    (`arguments_digest`). The one that completes the quorum decides the request (approvals.decisions)."""

    request = models.ForeignKey(PendingRequest, on_delete=models.CASCADE, related_name="approvals")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    # The username when it was given: the record keeps it if the user is deleted.
    username = models.CharField(max_length=150)
    on_behalf_of = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField()
    arguments_digest = models.CharField(max_length=64)
    # The approval as given (`approved`, `reason`, `overrideArguments`).
    answer = models.JSONField()
    # The approver's groups among the request's when it was given (`fromEach` counts them).
    groups = models.JSONField(default=list)
    via = models.CharField(max_length=16, choices=Via.choices)
    auth_method = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["request", "by", "arguments_digest"], name="approval_once_per_person"),
        ]
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"approval of {self.request_id} by {self.username}"

    def wire(self) -> dict[str, Any]:
        """`approvals[]` as the API, the events and the receipts show it (SPEC section 14)."""
        given = {"by": self.username, "at": self.at.isoformat(), "argumentsDigest": self.arguments_digest}
        given["authMethod"] = self.auth_method
        if self.on_behalf_of is not None:
            given["onBehalfOf"] = self.on_behalf_of.username
        return given
