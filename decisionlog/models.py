"""How far each tenant's chain of receipts has reached each log sink granted to it."""

from django.db import models

from console.models import Connection, Tenant


class SinkCursor(models.Model):
    """The last receipt (`sequence` in the tenant's chain) that a log sink acknowledged for a tenant: shipping goes
    on after it. Moved only once the sink acknowledged (decisionlog.shipping), under a lease, so a process that dies
    mid-delivery leaves it where the sink last said yes."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="+")
    sequence = models.PositiveBigIntegerField(default=0)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # Failures since the last delivery, and when the next attempt is due (backoff).
    attempts = models.PositiveIntegerField(default=0)
    retry_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    # A process shipping for this pair holds it until then (several `serve` processes may run the loop), renewed
    # at each batch; `leased_by` names it (host:pid), so a process of the same host may take over from a dead one
    # at once rather than when its lease lapses.
    leased_until = models.DateTimeField(null=True, blank=True)
    leased_by = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "connection"], name="sink_cursor_per_tenant")]

    def __str__(self) -> str:
        return f"receipts of {self.tenant_id} at {self.sequence} on {self.connection_id}"
