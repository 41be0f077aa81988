"""A remembered "do not ask again" (SPEC section 13) and the versions its edits keep: approvals/remembered_rules.py
matches and makes them, approvals/actions/rules.py edits and revokes them."""

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from agents.models import Agent, Session
from console.models import Tenant


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
    created_from = models.ForeignKey("approvals.PendingRequest", null=True, blank=True, on_delete=models.SET_NULL)
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
