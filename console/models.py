import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.validators import validate_slug
from django.db import models
from django.utils import timezone


class Tenant(models.Model):
    slug = models.SlugField(max_length=63, unique=True, validators=[validate_slug])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    READER = "reader", "Reader"
    OPERATOR = "operator", "Operator"
    ADMIN = "admin", "Admin"


ROLE_RANK = {Role.READER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"

    def allows(self, role: str) -> bool:
        """True when this membership's role is at least `role`."""
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]


LAST_USED_GRANULARITY = timedelta(minutes=1)


def hash_token(raw: str) -> str:
    # Tokens carry 256 bits of randomness, so a plain SHA-256 is enough (no salt or stretching needed).
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, membership: Membership, name: str) -> tuple["ApiToken", str]:
        """Create a token and return it with its raw value, which is shown once and never stored."""
        prefix = secrets.token_hex(4)
        raw = f"al_{prefix}_{secrets.token_urlsafe(32)}"
        token = cls.objects.create(membership=membership, name=name, prefix=prefix, token_hash=hash_token(raw))
        return token, raw

    @classmethod
    def authenticate(cls, raw: str) -> "ApiToken | None":
        # token_hash is unique: no ordering needed, which `first()` would add.
        found = cls.objects.select_related("membership__user", "membership__tenant").filter(
            token_hash=hash_token(raw), revoked_at__isnull=True, membership__user__is_active=True
        )[:1]
        token = next(iter(found), None)
        now = timezone.now()
        # Record use at most once a minute: a write on every request would cost more than it tells.
        if token is not None and (token.last_used_at is None or now - token.last_used_at > LAST_USED_GRANULARITY):
            token.last_used_at = now
            token.save(update_fields=["last_used_at"])
        return token

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])
