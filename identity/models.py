from django.conf import settings
from django.db import models
from django.utils import timezone

from console.models import Connection


class OidcIdentity(models.Model):
    """The person an OpenID Connect provider names `subject` (its `sub` claim, which never changes for them): the
    user their sign-ins through `connection` are (SPEC section 19). A user is found by it, never by a name or an
    e-mail address another provider or a local account could also carry."""

    connection = models.ForeignKey(Connection, on_delete=models.CASCADE, related_name="+")
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["connection", "subject"], name="one_user_per_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.connection.name}: {self.user}"
