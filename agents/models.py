import uuid
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.definitions import MAX_SUBAGENT_DEPTH, ConnectionRefused, DefinitionContent, PoliciesRefused
from agents.policies import CompilesThrottled, SampleAgent, compile_problems, save_samples, try_builder
from console.models import Connection, Tenant


class AgentQuerySet(models.QuerySet["Agent"]):
    def live(self) -> "AgentQuerySet":
        return self.filter(deleted_at__isnull=True)

    def names_in(self, tenant: Tenant) -> list[str]:
        """The tenant's agent names, sorted, each once (a deleted agent's name may be reused)."""
        return list(self.filter(tenant=tenant).order_by("name").values_list("name", flat=True).distinct())


class Agent(models.Model):
    """An agent definition; its content lives in immutable versions, the newest being current."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    name = models.SlugField(max_length=63)
    current_version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], condition=Q(deleted_at__isnull=True), name="agent_name_unique_live"
            )
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def create(cls, tenant: Tenant, content: DefinitionContent, user: Any) -> "Agent":
        """A new agent with `content` as version 1 (ConnectionRefused: see `append_version`)."""
        with transaction.atomic():
            agent = cls.objects.create(tenant=tenant, name=content.name)
            agent.append_version(content, user, note="created")
        return agent

    def append_version(self, content: DefinitionContent, user: Any, note: str = "") -> "AgentVersion":
        """Store `content` as the next version; earlier versions are never touched. Raises
        ConnectionRefused when it names a connection the tenant may not use, PoliciesRefused when its
        policies do not compile or fail at the sample inputs of their points (agents.policies.compile_problems:
        the compiling is rate-limited per tenant)."""
        problems = content.connection_problems(Connection.objects.specs_for(self.tenant, content.connection_names))
        if problems is None:
            problems = subagent_problems(self.tenant, content)
        if problems is not None:
            raise ConnectionRefused(*problems)
        tenant = str(self.tenant_id)
        builder = try_builder(self.name, self.current_version + 1, tenant)
        samples = save_samples(builder, SampleAgent.of(content)) if content.hooks else None
        try:
            uncompiled = compile_problems(content.hooks, tenant, samples)
        except CompilesThrottled as throttled:
            raise PoliciesRefused({"hooks": str(throttled)}, throttled.retry_after) from None
        if uncompiled:
            raise PoliciesRefused({"hooks": "; ".join(uncompiled)})
        with transaction.atomic():
            locked = Agent.objects.select_for_update().get(pk=self.pk)
            number = locked.current_version + 1
            version = AgentVersion.objects.create(
                agent=self,
                number=number,
                content=content.wire(),
                created_by=user if getattr(user, "is_authenticated", False) else None,
                note=note,
            )
            self.current_version = number
            self.updated_at = version.created_at
            self.save(update_fields=["current_version", "updated_at"])
        return version

    def rollback(self, number: int, user: Any) -> "AgentVersion":
        old = self.versions.get(number=number)
        return self.append_version(old.definition, user, note=f"rollback to version {number}")

    def soft_delete(self) -> None:
        self.deleted_at = timezone.now()
        self.save(update_fields=["deleted_at"])

    @property
    def current(self) -> "AgentVersion":
        return self.versions.get(number=self.current_version)


def subagent_problems(tenant: Tenant, content: DefinitionContent) -> tuple[str, dict[str, str]] | None:
    """Why `content`'s sub-agents cannot be saved (SPEC section 10): one is not an agent of the tenant (400
    `unknown_subagent`), a chain of sub-agents leads back to the agent (400 `subagent_cycle`), or goes deeper
    than MAX_SUBAGENT_DEPTH (400 `subagent_too_deep`), or one is external (400 `external_subagent`); None when
    all is well. Other agents are read as their current versions are, level by level."""
    live = Agent.objects.live().filter(tenant=tenant)
    known = set(live.filter(name__in=content.sub_agents).values_list("name", flat=True))
    unknown = {
        f"subAgents.{i}": f"no agent named {name!r} in this tenant"
        for i, name in enumerate(content.sub_agents)
        if name not in known and name != content.name
    }
    if unknown:
        return "unknown_subagent", unknown
    named = AgentVersion.objects.filter(
        agent__in=live.filter(name__in=content.sub_agents), number=F("agent__current_version")
    ).select_related("agent")
    external = {version.agent.name for version in named if version.definition.runs_elsewhere}
    if external:
        says = "is an external agent or a gateway: it runs elsewhere, so no agent here can call it"
        fields = {f"subAgents.{i}": f"{name!r} {says}" for i, name in enumerate(content.sub_agents) if name in external}
        return "external_subagent", fields
    chains = [(f"subAgents.{i}", [content.name, name]) for i, name in enumerate(content.sub_agents)]
    for _ in range(MAX_SUBAGENT_DEPTH + 1):
        for field, chain in chains:
            if chain[-1] == content.name:
                return "subagent_cycle", {field: f"{' → '.join(chain)}: the agent would call itself"}
            if len(chain) > MAX_SUBAGENT_DEPTH + 1:
                depth = f"sub-agents go {MAX_SUBAGENT_DEPTH} deep at most"
                return "subagent_too_deep", {field: f"{' → '.join(chain)}: {depth}"}
        names = {chain[-1] for _, chain in chains}
        current = AgentVersion.objects.filter(agent__in=live.filter(name__in=names), number=F("agent__current_version"))
        calls = {version.agent.name: version.definition.sub_agents for version in current.select_related("agent")}
        chains = [(field, [*chain, name]) for field, chain in chains for name in calls.get(chain[-1], [])]
        if not chains:
            return None
    return None


_PARSED: dict[tuple[int, Any], DefinitionContent] = {}


class AgentVersion(models.Model):
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    content = models.JSONField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "number"], name="version_number_unique")]
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"{self.agent.name} v{self.number}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("an agent version is immutable")
        super().save(*args, **kwargs)

    @cached_property
    def definition(self) -> DefinitionContent:
        """The parsed content. A version never changes, so a stored one is parsed once per process: the
        same instance every time, which keeps what is derived from it (the engine's agent) at hand."""
        if self.pk is None:
            return DefinitionContent.model_validate(self.content, context={"stored": True})
        # The creation time is in the key too: a test database hands out the same ids again.
        key = (self.pk, self.created_at)
        parsed = _PARSED.get(key)
        if parsed is None:
            if len(_PARSED) >= 1024:
                _PARSED.clear()
            parsed = _PARSED[key] = DefinitionContent.model_validate(self.content, context={"stored": True})
        return parsed


class SessionQuerySet(models.QuerySet["Session"]):
    def live(self) -> "SessionQuerySet":
        """Sessions not deleted: a run names one of these by its key (a deleted one keeps its history)."""
        return self.filter(deleted_at__isnull=True)


class Session(models.Model):
    """A conversation: the engine's message history and the agent it is bound to."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sessions")
    key = models.CharField(max_length=200)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    conversation = models.JSONField(null=True, blank=True)
    last_run = models.ForeignKey("Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # Deleted (DELETE /api/sessions/{key}): its future is gone, its history stays; the key starts a new one.
    deleted_at = models.DateTimeField(null=True, blank=True)
    # A fork (an answer given at an earlier checkpoint, SPEC section 9): the session and checkpoint it started from.
    forked_from_session = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_from_checkpoint = models.ForeignKey(
        "Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )

    objects = SessionQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "key"], condition=models.Q(deleted_at__isnull=True), name="session_key_unique_live"
            )
        ]

    def __str__(self) -> str:
        return self.key


class RunStatus(models.TextChoices):
    """A run's status. The labels of the waiting ones say what is awaited in words that fit every request kind
    that waits so (approvals.kinds: an approval, a plan, "Go on?"; a question or an input; a client tool), never
    a kind's name of their own: a question's run is not "Awaiting Input"."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    AWAITING_INPUT = "awaiting_input", "Awaiting an answer"
    AWAITING_TOOL_RESULT = "awaiting_tool_result", "Awaiting the client"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BLOCKED = "blocked"


AWAITING = (RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_INPUT, RunStatus.AWAITING_TOOL_RESULT)
FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.BLOCKED, *AWAITING)


class RunQuerySet(models.QuerySet["Run"]):
    def held_by(self, run: "Run") -> "RunQuerySet":
        """`run` while its turn is still held by the worker that holds it here: lease-guarded updates go
        through this, so a reclaimed run's late outcome (or retry) changes nothing."""
        return self.filter(pk=run.pk, status=RunStatus.RUNNING, worker_id=run.worker_id)


class Run(models.Model):
    """One turn of a session (or a sessionless one-off). Once finished it is never rewritten."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="runs")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="runs")
    version = models.ForeignKey(AgentVersion, on_delete=models.PROTECT, related_name="runs")
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.CASCADE, related_name="runs")
    previous_run = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    status = models.CharField(max_length=24, choices=RunStatus.choices, default=RunStatus.RUNNING)
    message = models.TextField(null=True, blank=True)
    culture = models.CharField(max_length=35, blank=True)
    parameters = models.JSONField(default=dict)
    # The documents the run was given, `[[name, text], ...]` (attachments as their text), so a replay has them.
    documents = models.JSONField(default=list, blank=True)
    # The client tools its caller offered besides the definition's (`RunRequest.clientTools`, AG-UI's `tools`), or
    # those of the run that asked, for a turn carrying answers: the continuation offers them again.
    client_tools = models.JSONField(default=list, blank=True)
    output = models.TextField(null=True, blank=True)
    usage = models.JSONField(default=dict)
    error = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The queue (agents/queue.py): a queued run keeps what its turn needs until a worker runs it.
    lane = models.CharField(max_length=64, default="default")
    queued_input = models.JSONField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Who runs the turn and until when, unless renewed: an expired lease means its process died.
    worker_id = models.CharField(max_length=64, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # The interception records of the turn's policies (SPEC section 8), in order, as the standard's wire shape.
    records = models.JSONField(default=list, blank=True)
    # The W3C traceparent of the call that started it (SPEC section 18), its span's parent; kept only while tracing.
    traceparent = models.CharField(max_length=55, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="run_tenant_recent"),
            models.Index(fields=["tenant", "status", "-created_at"], name="run_tenant_status"),
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
            models.Index(fields=["status", "lane"], name="run_status_lane"),
        ]
        constraints = [
            # One turn at a time per session, whoever writes it: `record_run` asks under the session's lock first (a
            # second turn gets 409 `session_busy`); the last answer's continuation leans on this alone
            # (`agents.queue.queue_continuation`).
            models.UniqueConstraint(
                fields=["session"],
                condition=Q(status__in=[RunStatus.QUEUED, RunStatus.RUNNING]),
                name="run_one_turn_per_session",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.status})"


class Event(models.Model):
    """A stored event of a run's history; `parent` chains each event to the one before it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    sequence = models.PositiveIntegerField()
    parent_id = models.UUIDField(null=True, blank=True)
    type = models.CharField(max_length=48)
    data = models.JSONField(default=dict)
    timestamp = models.DateTimeField(default=timezone.now)
    # A sub-agent's event (SPEC section 10): the envelope's `agentId` (`subagent.started` names it).
    agent_id = models.CharField(max_length=100, blank=True, default="")
    # A `tool.execution_start` of a tool with side effects: the run is never retried once one started
    # (agents/queue.py). A fact of the row, not of the event's `data`, which is the SDK's (SPEC section 10).
    side_effects = models.BooleanField(default=False)

    class Meta:
        ordering = ["run", "sequence"]
        constraints = [models.UniqueConstraint(fields=["run", "sequence"], name="event_sequence_unique")]
        # The audit reads events of a type across the tenant's runs, newest first (approvals.audit: policy
        # verdicts, rule decisions).
        indexes = [models.Index(fields=["type", "-timestamp"], name="event_type_recent")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.sequence} {self.type}"


def _attachment_path(instance: "Attachment", filename: str) -> str:
    return f"attachments/{instance.tenant_id}/{instance.id}"


class Attachment(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="attachments")
    name = models.CharField(max_length=255)
    content_type = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    file = models.FileField(upload_to=_attachment_path)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


class Checkpoint(models.Model):
    """A session's state after one of its runs ended (SPEC section 9): its conversation, the ids of its
    requests still open, the definition version, the run and its status. Never rewritten.

    Stored compactly (`agents.checkpoints` writes and reads them): a full copy of the conversation's messages
    (`root` null), or only the messages appended since the checkpoint numbered one less, which extends the same
    `root`; the conversation's other fields are kept whole on each. A checkpoint lives as long as its session:
    a delta needs every checkpoint back to its root."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="checkpoints")
    # 1, 2, … within the session, in the order its runs ended.
    number = models.PositiveIntegerField()
    run = models.OneToOneField(Run, null=True, on_delete=models.SET_NULL, related_name="checkpoint")
    status = models.CharField(max_length=24, choices=RunStatus.choices)
    version = models.ForeignKey(AgentVersion, on_delete=models.PROTECT, related_name="+")
    open_requests = models.JSONField(default=list)
    root = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    messages = models.JSONField(default=list)
    # The conversation without its messages (usage, conversation_id, deferred_tool_requests, …); None: no
    # conversation yet (the session's first turn failed).
    state = models.JSONField(null=True, blank=True)
    # How many messages the whole conversation has, and their digest: the next checkpoint stores a delta only
    # when its conversation begins with exactly these.
    length = models.PositiveIntegerField(default=0)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-number"]
        constraints = [models.UniqueConstraint(fields=["session", "number"], name="checkpoint_number_unique")]

    def __str__(self) -> str:
        return f"checkpoint {self.number} of {self.session_id} ({self.status})"
