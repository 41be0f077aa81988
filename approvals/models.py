import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver
from django.utils import timezone

from agents.definitions import UnknownGroup
from agents.models import Agent, AgentVersion, Run, Session
from agents.queries import picked
from agents.request_kinds import KIND_NAMES, REQUEST_KINDS
from approvals.receipts import ChainSignature, Receipt, ReceiptHead, genesis

__all__ = ["ChainSignature", "Receipt", "ReceiptHead"]  # the receipts' tables, declared in approvals.receipts
from console.models import Membership, Tenant


class RequestKind(models.TextChoices):
    """A request's stored kind: the names of `agents.request_kinds.REQUEST_KINDS`, in their order, as members the
    ORM and the code can name, labelled with each kind's one name (`KIND_NAMES`)."""

    APPROVAL = "approval", KIND_NAMES["approval"].label
    CLIENT_TOOL = "client_tool", KIND_NAMES["client_tool"].label
    INPUT = "input", KIND_NAMES["input"].label
    QUESTION = "question", KIND_NAMES["question"].label
    PLAN = "plan", KIND_NAMES["plan"].label
    CONTINUATION = "continuation", KIND_NAMES["continuation"].label


if tuple(RequestKind.values) != REQUEST_KINDS:
    raise ImproperlyConfigured(f"RequestKind's values {RequestKind.values} are not REQUEST_KINDS {REQUEST_KINDS}.")


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


TERMINAL = (RequestStatus.EXPIRED, RequestStatus.CANCELLED, RequestStatus.ABANDONED)
# A request still waiting for its answer (the inbox, the pending counts).
OPEN = models.Q(status=RequestStatus.PENDING, answer__isnull=True)


class ApproverGroup(models.Model):
    """A tenant's named group of members (SPEC section 11): a definition routes requests to it by name
    (`"approvers": "finance"`), and only its members and admins answer those."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="approver_groups")
    name = models.SlugField(max_length=63)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="approver_groups")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="approver_group_name_unique")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


def groups_of(membership: Membership) -> set[str]:
    """The names of the tenant's groups the member belongs to."""
    groups = ApproverGroup.objects.filter(tenant_id=membership.tenant_id, members=membership.user_id)
    return set(groups.values_list("name", flat=True))


def mark_answerable(membership: Membership, requests: Iterable["PendingRequest"]) -> None:
    """Set `answerable` on each request: whether the member may answer it (SPEC section 11). The member's groups
    are read only when a request is routed to one."""
    listed = list(requests)
    groups = groups_of(membership) if any(pending.approvers for pending in listed) else set()
    for pending in listed:
        pending.answerable = pending.answerable_by(membership, groups)  # type: ignore[attr-defined]


class NotAnApprover(Exception):
    """A member outside the group a request is routed to, answering it or closing it unanswered (SPEC section
    11): a 403 `not_an_approver`, nothing changed."""

    code, status = "not_an_approver", 403

    def __init__(self, pending: "PendingRequest") -> None:
        self.pending = pending
        self.detail = f"The request is for {pending.approvers}: only members of that group and admins answer it."
        super().__init__(self.detail)

    @property
    def run_detail(self) -> str:
        """The refusal as the run routes word it (a run request's answers and abandonments, a cancel, a
        deletion): naming the request, and that closing it unanswered takes the same right."""
        only = "only members of that group and admins answer it, or close it unanswered"
        return f"The request {self.pending.id} is for {self.pending.approvers}: {only}."


def refuse_unless_answerable(membership: Membership, requests: Iterable["PendingRequest"]) -> None:
    """Answering a request and closing it unanswered (abandoning it, cancelling its run, deleting its session)
    take the same right, or an operator outside a group would stop what the group decides: raises NotAnApprover
    for the first of `requests` the member may not answer (`PendingRequest.answerable_by`)."""
    for pending in requests:
        if not pending.answerable_by(membership):
            raise NotAnApprover(pending)


class Digest(models.Model):
    """A member's opt-in to e-mail digests (SPEC section 11): requests of the tenant they may answer that have
    waited longer than `after_minutes`, at most one e-mail every `after_minutes` (approvals/digests.py)."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="digest")
    after_minutes = models.PositiveIntegerField()
    # Requests opened up to here were old enough for a digest already sent: none is listed twice.
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
        if not membership.allows("operator"):
            return self.none()
        if membership.allows("admin"):
            return self
        return self.filter(models.Q(approvers="") | models.Q(approvers__in=groups_of(membership)))

    def matching(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        kind: str | None = None,
        tool: str | None = None,
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
    kind = models.CharField(max_length=16, choices=RequestKind.choices)
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
    # The group routed to answer it ("" for any operator), named by the definition when it opened.
    approvers = models.CharField(max_length=63, blank=True)

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

    def answerable_by(self, membership: Membership, groups: set[str] | None = None) -> bool:
        """Whether the member may answer it: an operator when it is routed to no group; else an admin or a
        member of its group (`groups`: the member's, when already read)."""
        if not membership.allows("operator"):
            return False
        if not self.approvers or membership.allows("admin"):
            return True
        return self.approvers in (groups_of(membership) if groups is None else groups)

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
        return wire


class HeldState(models.TextChoices):
    HELD = "held"
    APPLYING = "applying"
    APPLIED = "applied"
    UNDONE = "undone"
    DROPPED = "dropped"


# A held answer not settled yet: its request is out of every inbox, and no other answer may be held for it.
UNSETTLED = (HeldState.HELD, HeldState.APPLYING)


class HeldAnswer(models.Model):
    """An answer given in the console, held until `due_at` so the one who gave it can undo it
    (approvals.actions.held); a row, so a crash or a closed browser loses nothing. The answers of one bulk
    answer share a `batch`: one notice, one Undo."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    request = models.ForeignKey(PendingRequest, on_delete=models.CASCADE, related_name="held_answers")
    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="held_answers")
    batch = models.UUIDField(db_index=True)
    via = models.CharField(max_length=16)
    # How the one who gave it signed in (`console.tenancy.AUTH_METHOD`: "session", "token:<id>"): it is applied
    # later, in a timer or a sweep, and its receipt must still say how they signed in (issue 50).
    auth_method = models.CharField(max_length=64, blank=True)
    # The validated `approvals.responses.Response`, as the respond API takes it (camelCase).
    response = models.JSONField()
    # When it applies; while applying, when that began (a sweep retries an apply that stopped with its process).
    due_at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=HeldState.choices, default=HeldState.HELD)
    created_at = models.DateTimeField(default=timezone.now)
    settled_at = models.DateTimeField(null=True, blank=True)
    # What became of it: the outcome's message once applied or dropped.
    outcome = models.TextField(blank=True)

    class Meta:
        constraints = [
            # One held answer per request at a time: a second operator's answer waits for the first to settle.
            models.UniqueConstraint(
                fields=["request"],
                condition=models.Q(state__in=["held", "applying"]),
                name="one_held_answer_per_request",
            )
        ]
        indexes = [models.Index(fields=["state", "due_at"], name="held_answer_due")]

    def __str__(self) -> str:
        return f"held answer to {self.request_id} ({self.state})"


class Rule(models.Model):
    """A remembered "do not ask again": approves matching calls of one agent's tool without asking."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rules")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="rules")
    tool_name = models.CharField(max_length=200)
    arguments_hash = models.CharField(max_length=64, blank=True)
    # The exact arguments the hash stands for, kept to show them (matching uses the hash).
    arguments = models.JSONField(null=True, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_from = models.ForeignKey(PendingRequest, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Who revoked it (the audit names them); null for a rule revoked before this was kept, or by no one signed in.
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Scope (SPEC section 13): a rule remembered "for this session" holds in that session only; null: always.
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.CASCADE, related_name="rules")
    # A rule no longer applies from this moment on (kept, like a revoked one, for the record).
    expires_at = models.DateTimeField(null=True, blank=True)
    # The current version (receipts name `rule:<id>@<version>`); the ones before are its `versions`.
    version = models.PositiveIntegerField(default=1)
    # Who made the current version by editing, and when (null: version 1, `created_by` at `created_at`).
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    edited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "agent", "tool_name"], name="rule_lookup")]

    def __str__(self) -> str:
        return f"rule {self.tool_name} for {self.agent_id}"

    @property
    def scope(self) -> str:
        return "always" if self.session_id is None else "session"

    def expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())


class RuleVersion(models.Model):
    """What an earlier version of a rule said, kept when an edit made the next one: the record (receipts name
    `rule:<id>@<version>`) keeps what each version approved. `edited_by`/`edited_at`: who made this version and
    when (version 1: the rule's creator at its creation)."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    arguments_hash = models.CharField(max_length=64, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    expires_at = models.DateTimeField(null=True, blank=True)
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    edited_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "version"], name="rule_version_once")]

    def __str__(self) -> str:
        return f"rule {self.rule_id} version {self.version}"
