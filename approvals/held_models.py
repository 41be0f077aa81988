"""An answer given in the console and held for its undo window (SPEC section 11; approvals/actions/held.py)."""

import uuid

from django.db import models
from django.utils import timezone

from console.models import Membership, Tenant


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
    request = models.ForeignKey("approvals.PendingRequest", on_delete=models.CASCADE, related_name="held_answers")
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
