"""Slack's tables (SPEC section 17): where a tenant's requests are posted, who a Slack user is in a tenant, and the
outbox of what Slack must show (a request's message in a channel, a notice to one person)."""

from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from approvals.models import ApproverGroup, PendingRequest
from console.models import Connection, Membership, Tenant


class SlackChannel(models.Model):
    """A channel of a Slack app connection where the tenant's requests are posted: those of one agent, or those
    routed to one approver group (for a routed request, its groups' channels win over its agent's). A channel gets
    the requests opened after it was mapped."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="slack_channels")
    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="+")
    # A channel id (C0123ABCD) or name, as chat.postMessage takes it; the id Slack answers is kept per message.
    channel = models.CharField(max_length=80)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    group = models.ForeignKey(ApproverGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(agent__isnull=False, group__isnull=True) | Q(agent__isnull=True, group__isnull=False),
                name="slack_channel_agent_or_group",
            ),
            models.UniqueConstraint(
                fields=["connection", "channel", "agent"], condition=Q(agent__isnull=False), name="slack_channel_agent"
            ),
            models.UniqueConstraint(
                fields=["connection", "channel", "group"], condition=Q(group__isnull=False), name="slack_channel_group"
            ),
        ]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.channel} for {self.target}"

    @property
    def target(self) -> str:
        """What it is the channel of, as a sentence says it ("agent mailer", "group sre")."""
        return (
            f"agent {self.agent.name}" if self.agent is not None else f"group {self.group.name if self.group else '?'}"
        )

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "connection": self.connection.name,
            "channel": self.channel,
            "agent": self.agent.name if self.agent is not None else None,
            "group": self.group.name if self.group is not None else None,
            "createdAt": self.created_at.isoformat(),
        }


class SlackLink(models.Model):
    """A member's Slack user: their clicks in Slack are their answers (`authMethod` `slack:<team>/<user>`)."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="slack_link")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    team_id = models.CharField(max_length=32)
    user_id = models.CharField(max_length=32)
    linked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "team_id", "user_id"], name="slack_link_one_member"),
        ]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.user_id} is membership {self.membership_id}"


class SlackLinkCode(models.Model):
    """A member's one-time code, sent to the bot as `/airlock link CODE`; only its hash is kept."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="+")
    code_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"link code of membership {self.membership_id}"


class SlackPlaced(models.Model):
    """That a request's channels were worked out for the groups it was routed to then (`approvers`): an escalation
    that adds groups makes them be worked out again."""

    request = models.OneToOneField(PendingRequest, on_delete=models.CASCADE, primary_key=True, related_name="+")
    approvers = models.CharField(max_length=255, blank=True)

    def __str__(self) -> str:
        return f"{self.request_id} placed for {self.approvers or 'any operator'}"


class OutboxFields(models.Model):
    """What the outbox keeps of a delivery: when it is due (None: nothing to send), how often it failed and why, and
    the lease of the process sending it now."""

    due_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    leased_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True


class SlackMessage(OutboxFields):
    """A request's message in one channel, and what it must show: posted once, updated when its state changes
    (approvals toward a quorum, its end). `shown` is the state Slack shows; `due_at` set means Slack is behind."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    request = models.ForeignKey(PendingRequest, on_delete=models.CASCADE, related_name="slack_messages")
    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=80)
    # The channel's id and the message's timestamp as Slack answered the post: what chat.update names.
    channel_id = models.CharField(max_length=32, blank=True)
    ts = models.CharField(max_length=32, blank=True)
    shown = models.CharField(max_length=300, blank=True)
    final = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["request", "connection", "channel"], name="slack_message_once"),
        ]
        indexes = [
            models.Index(fields=["due_at"], condition=Q(due_at__isnull=False), name="slack_message_due"),
            models.Index(fields=["request"], condition=Q(final=False), name="slack_message_live"),
        ]

    def __str__(self) -> str:
        return f"request {self.request_id} in {self.channel}"


class SlackNotice(OutboxFields):
    """A message only `user_id` sees in `channel` (chat.postEphemeral): why a click changed nothing."""

    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=32)
    user_id = models.CharField(max_length=32)
    text = models.CharField(max_length=3000)

    class Meta:
        indexes = [models.Index(fields=["due_at"], condition=Q(due_at__isnull=False), name="slack_notice_due")]

    def __str__(self) -> str:
        return f"notice to {self.user_id} in {self.channel}"


class SlackDelivery(models.Model):
    """A signed request from Slack handled already (its body's digest): a retry (`X-Slack-Retry-Num`) or a replay
    of it changes nothing. Kept a little longer than a signature is valid."""

    key = models.CharField(max_length=64, unique=True)
    received_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return self.key
