import copy
import hashlib
import secrets
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator, validate_slug
from django.db import models, transaction
from django.db.models import Q
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone
from pydantic import ValidationError as PydanticError

from console.connections import BUILTIN, ENV_NAME, SLACK_API_BASE_URL, ConnectionSpec, OidcSettings, split_address
from console.problems import ApiError
from console.sql import Prepared


class Tenant(models.Model):
    slug = models.SlugField(max_length=63, unique=True, validators=[validate_slug])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    # Where the tenant's request events go (SPEC section 11, approvals/webhooks.py): a webhook connection of the
    # installation granted to the tenant, chosen by its admins on the Tenant page.
    request_webhook = models.ForeignKey(
        "Connection", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

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
    # The sign-in that keeps this membership in step with its claims at every sign-in ("oidc:<connection name>",
    # SPEC section 19), or empty: kept by hand.
    managed_by = models.CharField(max_length=80, blank=True)
    # When the member hid the dashboard's first-steps panel (console/views/dashboard_pages.py); null: shown.
    first_steps_hidden_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} as {self.role}"

    def allows(self, role: str) -> bool:
        """True when this membership's role is at least `role`."""
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]

    def hide_first_steps(self) -> None:
        """Hide the dashboard's first-steps panel for this member (once: a second hiding keeps the first time)."""
        if self.first_steps_hidden_at is None:
            self.first_steps_hidden_at = timezone.now()
            self.save(update_fields=["first_steps_hidden_at"])


LAST_USED_GRANULARITY = timedelta(minutes=1)


def bearer_token(header: str | None) -> str:
    """The token an `Authorization: Bearer <token>` header carries (the scheme in any case, RFC 9110 section 11.1);
    "" for none."""
    return header.split(" ", 1)[1].strip() if header and header[:7].lower() == "bearer " else ""


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
        return _live_token(hash_token(raw))

    @classmethod
    def bearer(cls, header: str | None) -> "ApiToken":
        """The live token an `Authorization: Bearer <token>` header carries, for the apps served beside the API (the
        MCP gateway, A2A); ApiError 401 when it carries none."""
        raw = bearer_token(header)
        token = cls.authenticate(raw) if raw else None
        if token is None:
            raise ApiError(401, "unauthenticated", "An Airlock API token is needed: Authorization: Bearer <token>.")
        return token

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


# The lookup every API request sends (issue 56), compiled once: a live token (not revoked, its user active) by its
# hash, which is unique, with its membership, user and tenant.
_LIVE_TOKEN = Prepared(
    lambda token_hash: ApiToken.objects.select_related("membership__user", "membership__tenant").filter(
        token_hash=token_hash, revoked_at__isnull=True, membership__user__is_active=True
    ),
    token_hash=str,
)

# A live token read by its hash is kept this long by the process that read it (issue 56): an API client's requests
# come in bursts (a run started, its stream, its answer), each of which read it again. A token revoked, its
# membership changed or removed, its user deactivated stops working at once in the process that did it (any write of
# those rows through the ORM empties the kept ones, `_forget_tokens`) and within TOKEN_KEPT_SECONDS in every other.
TOKEN_KEPT_SECONDS = 1.0
_KEPT_TOKENS: dict[str, tuple[float, "ApiToken"]] = {}
_KEPT_TOKENS_MOST = 1024
# How many times the kept tokens were forgotten: a token read before a forgetting is not kept after it.
_forgotten = [0]


def _live_token(token_hash: str) -> ApiToken | None:
    """The live token of `token_hash` with its membership, user and tenant, as `_LIVE_TOKEN` reads it or as it was
    kept: a copy of each, so that what a request sets on them stays its own."""
    now = time.monotonic()
    kept = _KEPT_TOKENS.get(token_hash)
    if kept is None or kept[0] <= now:
        before = _forgotten[0]
        token = _LIVE_TOKEN.first(token_hash=token_hash)
        if token is None:
            return None
        if len(_KEPT_TOKENS) >= _KEPT_TOKENS_MOST:
            _KEPT_TOKENS.clear()
        kept = (now + TOKEN_KEPT_SECONDS, token)
        if _forgotten[0] == before:  # else a change read meanwhile may not be in it: used once, not kept
            _KEPT_TOKENS[token_hash] = kept
    token = kept[1]
    used = timezone.now()
    # Record use at most once a minute: a write on every request would cost more than it tells.
    if token.last_used_at is None or used - token.last_used_at > LAST_USED_GRANULARITY:
        token.last_used_at = used
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=used)  # not a change that forgets the kept tokens
    membership = copy.copy(token.membership)
    membership._state.fields_cache = {"user": copy.copy(membership.user), "tenant": copy.copy(membership.tenant)}
    own = copy.copy(token)
    own._state.fields_cache = {"membership": membership}
    return own


@receiver([post_save, post_delete], sender=ApiToken)  # a deleted membership, user or tenant deletes its tokens
@receiver(post_save, sender=Membership)
@receiver(post_save, sender=settings.AUTH_USER_MODEL)
@receiver(post_save, sender=Tenant)
def _forget_tokens(**_: Any) -> None:
    _forget()
    transaction.on_commit(_forget)  # and again once committed: a token read before that saw the row unchanged


def _forget() -> None:
    _forgotten[0] += 1
    _KEPT_TOKENS.clear()


class MetricsToken(models.Model):
    """A bearer token for `GET /metrics` (SPEC section 18): the installation's, not a tenant's, made by `manage.py
    create_metrics_token`; stored as its hash (`hash_token`), the raw value shown once."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, name: str) -> tuple["MetricsToken", str]:
        prefix = secrets.token_hex(4)
        raw = f"alm_{prefix}_{secrets.token_urlsafe(32)}"
        return cls.objects.create(name=name, prefix=prefix, token_hash=hash_token(raw)), raw

    @classmethod
    def accepts(cls, raw: str) -> bool:
        return cls.objects.filter(token_hash=hash_token(raw)).exists()


class ConnectionKind(models.TextChoices):
    OPENAI = "openai", "OpenAI-compatible model provider"
    ANTHROPIC = "anthropic", "Anthropic model provider"
    MCP = "mcp", "MCP server"
    WEBHOOK = "webhook", "Webhook (policy verdicts, request events)"
    SLACK = "slack", "Slack app (approvals in channels)"
    OTLP = "otlp", "OTLP/HTTP logs endpoint (the decision log)"
    SYSLOG = "syslog", "Syslog server, RFC 5424 over TCP (the decision log)"
    OIDC = "oidc", "OpenID Connect provider (sign-in)"


_env_name = RegexValidator(ENV_NAME, "the name of an environment variable: capitals, digits and _")


def _env_names(value: Any) -> None:
    if not isinstance(value, list):
        raise ValidationError("a list of environment variable names")
    for name in value:
        if not isinstance(name, str):
            raise ValidationError("a list of environment variable names")
        _env_name(name)


def _strings(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValidationError("a list of strings")


def _variable_field(label: str, help_text: str) -> "models.CharField[str, str]":
    """A setting that names the environment variable holding a secret: the secret itself is never stored."""
    return models.CharField(label, max_length=128, blank=True, validators=[_env_name], help_text=help_text)


class ConnectionQuerySet(models.QuerySet["Connection"]):
    def granted_to(self, tenant: Tenant) -> "ConnectionQuerySet":
        return self.filter(Q(all_tenants=True) | Q(tenants=tenant)).distinct()

    def specs_for(self, tenant: Tenant, names: Iterable[str] = ()) -> dict[str, ConnectionSpec]:
        """The connections of `names` (all when empty) that `tenant` may use, built-in ones included.
        Asks the database only for names that are not built in."""
        names = set(names)
        specs = {name: spec for name, spec in BUILTIN.items() if not names or name in names}
        stored = names - specs.keys()
        if len(stored) == 1:  # an agent's one model connection: what every run of it asks for
            found = _GRANTED.first(tenant=tenant.pk, name=next(iter(stored)))
            specs |= {found.name: found.spec} if found is not None else {}
        elif stored or not names:
            query = self.granted_to(tenant)
            if stored:
                query = query.filter(name__in=stored)
            specs |= {connection.name: connection.spec for connection in query}
        return specs


class Connection(models.Model):
    """A model provider, MCP server, webhook (policy verdicts, request events), Slack app or decision log sink the
    installation runs for its tenants."""

    name = models.SlugField(max_length=63, unique=True, validators=[validate_slug])
    kind = models.CharField(max_length=16, choices=ConnectionKind.choices)
    description = models.CharField(max_length=500, blank=True)
    base_url = models.URLField(
        "base URL",
        max_length=500,
        blank=True,
        help_text="Model providers: the API's base URL. Slack: the Web API's (empty: https://slack.com/api).",
    )
    api_key_env = _variable_field(
        "API key variable", "Model providers: the variable holding the key. Slack: the bot token's (xoxb-…)."
    )
    command = models.CharField(max_length=500, blank=True, help_text="MCP over stdio: the program to start.")
    args = models.JSONField(default=list, blank=True, validators=[_strings], help_text="MCP over stdio: arguments.")
    env = models.JSONField(
        "environment variables",
        default=list,
        blank=True,
        validators=[_env_names],
        help_text="MCP over stdio: variables passed on.",
    )
    url = models.URLField(
        "URL",
        max_length=500,
        blank=True,
        help_text="MCP over streamable HTTP, the webhook, the OTLP/HTTP endpoint's base, or the OpenID issuer.",
    )
    secret_env = _variable_field(
        "secret variable",
        "Webhooks: the variable holding the secret. Slack: the app's signing secret's. OTLP: the headers' (k=v,k2=v2). "
        "OpenID Connect: the client secret's.",
    )
    address = models.CharField(max_length=300, blank=True, help_text="Syslog: the server's host:port.")
    tls = models.BooleanField("TLS", default=False, help_text="Syslog: over TLS.")
    oidc = models.JSONField(
        "OpenID Connect settings",
        default=dict,
        blank=True,
        help_text='OpenID Connect: {"clientId", "scopes", "displayName", "groupsClaim", "tenants"} (SPEC section 19).',
    )
    all_tenants = models.BooleanField(default=False, help_text="Granted to every tenant, present and future.")
    tenants = models.ManyToManyField(Tenant, blank=True, related_name="connections")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConnectionQuerySet.as_manager()

    # The settings each kind uses; any other must stay empty.
    FIELDS_BY_KIND = {
        ConnectionKind.OPENAI: {"base_url", "api_key_env"},
        ConnectionKind.ANTHROPIC: {"base_url", "api_key_env"},
        ConnectionKind.MCP: {"command", "args", "env", "url"},
        ConnectionKind.WEBHOOK: {"url", "secret_env"},
        ConnectionKind.SLACK: {"base_url", "api_key_env", "secret_env"},
        ConnectionKind.OTLP: {"url", "secret_env"},
        ConnectionKind.SYSLOG: {"address", "tls"},
        ConnectionKind.OIDC: {"url", "secret_env", "oidc"},
    }
    SETTINGS = ("base_url", "api_key_env", "command", "args", "env", "url", "secret_env", "address", "tls", "oidc")

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.name in BUILTIN:
            errors["name"] = f"{self.name!r} is a built-in connection every tenant has."
        used = self.FIELDS_BY_KIND.get(ConnectionKind(self.kind), set()) if self.kind in ConnectionKind else set()
        for setting in self.SETTINGS:
            if setting not in used and getattr(self, setting):
                errors[setting] = f"A {self.kind} connection has no {setting}."
        if self.kind == ConnectionKind.MCP and bool(self.command) == bool(self.url):
            errors["command"] = "Give either a stdio command or a streamable-HTTP url, not both or neither."
        if self.kind == ConnectionKind.WEBHOOK and not self.url:
            errors["url"] = "A webhook needs its url."
        if self.kind == ConnectionKind.SLACK:
            self.base_url = self.base_url or SLACK_API_BASE_URL
            if not self.api_key_env:
                errors["api_key_env"] = "A Slack app needs the variable holding its bot token."
            if not self.secret_env:
                errors["secret_env"] = "A Slack app needs the variable holding its signing secret."
        if self.kind == ConnectionKind.OTLP and not self.url:
            errors["url"] = "An OTLP sink needs its endpoint's url."
        if self.kind == ConnectionKind.SYSLOG:
            try:
                split_address(self.address)
            except ValueError as error:
                errors["address"] = f"A syslog sink's address: {error}."
        if self.kind == ConnectionKind.OIDC:
            errors |= self._oidc_problems()
        if errors:
            raise ValidationError(errors)

    def _oidc_problems(self) -> dict[str, str]:
        """What an OpenID Connect connection lacks: its issuer, its secret's variable, settings that parse and name
        tenants that exist."""
        errors = {}
        if not self.url:
            errors["url"] = "An OpenID Connect provider needs its issuer (https://login.example.com/...)."
        if not self.secret_env:
            errors["secret_env"] = "An OpenID Connect provider needs the variable holding its client secret."
        try:
            found = OidcSettings.model_validate(self.oidc, strict=True)
        except PydanticError as error:
            said = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in error.errors())
            return errors | {"oidc": said}
        missing = set(found.tenants) - set(Tenant.objects.filter(slug__in=found.tenants).values_list("slug", flat=True))
        if missing:
            errors["oidc"] = f"tenants: no tenant {', '.join(sorted(missing))}."
        return errors

    @property
    def oidc_settings(self) -> OidcSettings:
        """The OpenID Connect settings of this connection (checked at save: `clean`)."""
        return OidcSettings.model_validate(self.oidc)

    @property
    def sign_in_name(self) -> str:
        """What the login page calls an OpenID Connect connection: "Sign in with <this>"."""
        return self.oidc_settings.display_name or self.name

    @property
    def spec(self) -> ConnectionSpec:
        return ConnectionSpec(
            name=self.name,
            kind=self.kind,
            base_url=self.base_url,
            api_key_env=self.api_key_env,
            command=self.command,
            args=tuple(self.args),
            env=tuple(self.env),
            url=self.url,
            secret_env=self.secret_env,
            address=self.address,
            tls=self.tls,
        )


# The connection of one name that a tenant may use (issue 56): a run's start and every queued turn read it.
_GRANTED = Prepared(
    lambda tenant, name: Connection.objects.filter(Q(all_tenants=True) | Q(tenants=tenant), name=name).distinct(),
    tenant=int,
    name=str,
)


class LoginFailure(models.Model):
    """A wrong password for `username` from `address` (console/login.py counts the recent ones)."""

    username = models.CharField(max_length=150)
    address = models.CharField(max_length=45, blank=True)  # an IPv6 address at most; empty when unknown
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["username", "address", "at"]), models.Index(fields=["at"])]

    def __str__(self) -> str:
        return f"{self.username} from {self.address or 'an unknown address'} at {self.at:%Y-%m-%d %H:%M:%S}"


class LoginLockout(models.Model):
    """Password checks of `username` from `address` refused until `until`: kept as the audit's record."""

    username = models.CharField(max_length=150)
    address = models.CharField(max_length=45, blank=True)
    locked_at = models.DateTimeField(default=timezone.now)
    until = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["username", "address", "until"]), models.Index(fields=["-locked_at"])]

    def __str__(self) -> str:
        return f"{self.username} from {self.address or 'an unknown address'} until {self.until:%Y-%m-%d %H:%M:%S}"
