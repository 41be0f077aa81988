"""Connections: what makes the server start a process, open a network connection or read an environment
variable (SPEC section 2). They belong to the installation: superusers define them (Django admin,
`manage.py load_connections`) and grant them to tenants; a tenant's definition only names one.

This module holds what needs no database: the kinds, the frozen settings a turn runs with
(`ConnectionSpec`) and the connections every tenant has. The stored ones are `console.models.Connection`.
"""

import hashlib
import hmac
import os
import sys
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic.alias_generators import to_camel

ENV_NAME = r"^[A-Z_][A-Z0-9_]{0,127}$"

# The header of a webhook POST (policy verdicts, request events) carrying the body's HMAC-SHA256.
SIGNATURE_HEADER = "X-Airlock-Signature"

MODEL_KINDS = frozenset({"scripted", "openai", "anthropic"})

# A Slack app (SPEC section 17) keeps its settings in the spec's own fields: the bot token's variable in
# `api_key_env`, the signing secret's in `secret_env`, the Web API's base URL in `base_url`. Their names in a
# `load_connections` file (and the API's documentation) are Slack's words for them.
SLACK_API_BASE_URL = "https://slack.com/api"
SLACK_WIRE_FIELDS = {"botTokenEnv": "api_key_env", "signingSecretEnv": "secret_env", "apiBaseUrl": "base_url"}

# The decision log's sinks (SPEC section 18): an OTLP/HTTP logs endpoint (`url`, and the variable holding its headers,
# `k=v,k2=v2`, kept in `secret_env` and called `headersEnv` in a file) or a syslog server (`address` host:port, `tls`).
SINK_KINDS = frozenset({"otlp", "syslog"})
OTLP_WIRE_FIELDS = {"headersEnv": "secret_env"}

# An OpenID Connect provider (SPEC section 19) people sign in with: its issuer in `url`, the variable holding the
# client secret in `secret_env`; the rest, the client and how claims map to tenants, roles and approver groups,
# in the connection's `oidc` (`OidcSettings`, as the file writes it).
OIDC_WIRE_FIELDS = {"issuer": "url", "clientSecretEnv": "secret_env"}
OIDC_SETTINGS = ("clientId", "scopes", "displayName", "groupsClaim", "tenants")
SLUG = r"^[-a-zA-Z0-9_]+$"


class OidcTenant(BaseModel):
    """What a tenant gives for values of the groups claim: a role (the highest of those matched), approver groups."""

    model_config = ConfigDict(extra="forbid")

    roles: dict[str, Literal["admin", "operator", "reader"]] = {}
    groups: dict[str, Annotated[str, StringConstraints(pattern=SLUG, max_length=63)]] = {}


class OidcSettings(BaseModel):
    """An OpenID Connect connection's client and claim mapping (`Connection.oidc`, camelCase as in the file)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, validate_by_name=True)

    client_id: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    scopes: str = "openid email profile"
    display_name: Annotated[str, StringConstraints(max_length=100)] = ""
    groups_claim: Annotated[str, StringConstraints(min_length=1, max_length=100)] = "groups"
    tenants: dict[Annotated[str, StringConstraints(pattern=SLUG, max_length=63)], OidcTenant] = Field(min_length=1)

    @field_validator("scopes")
    @classmethod
    def _openid(cls, scopes: str) -> str:
        if "openid" not in scopes.split():
            raise ValueError('the scopes must include "openid"')
        return " ".join(scopes.split())


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (an IPv6 host in brackets) as its host and port; ValueError naming what is wrong."""
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise ValueError("give host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("put an IPv6 host in brackets: [::1]:514")
    if not host or any(char.isspace() or char in "/@[]" for char in host):
        raise ValueError("the host is not a host name or address")
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError("the port is a number from 1 to 65535")
    return host, int(port)


@dataclass(frozen=True)
class ConnectionSpec:
    """The settings of one connection as a turn uses them; equal settings compare (and hash) equal."""

    name: str
    kind: str
    base_url: str = ""
    api_key_env: str = ""
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    url: str = ""
    secret_env: str = ""
    address: str = ""
    tls: bool = False

    def webhook_headers(self, body: bytes) -> dict[str, str]:
        """The headers of a JSON POST of `body` to this webhook: signed (`sha256=<hex HMAC-SHA256 of the body>`)
        with the secret in the connection's variable, read now so a rotated secret applies at once; unsigned
        when the variable is unset or empty."""
        headers = {"Content-Type": "application/json"}
        secret = os.environ.get(self.secret_env, "") if self.secret_env else ""
        if secret:
            headers[SIGNATURE_HEADER] = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return headers


# Every tenant has these; an installation cannot define a connection of the same name.
BUILTIN: dict[str, ConnectionSpec] = {
    "scripted": ConnectionSpec("scripted", "scripted"),
    "meetings": ConnectionSpec("meetings", "mcp", command=sys.executable, args=("-m", "agents.mcp_demo")),
}
