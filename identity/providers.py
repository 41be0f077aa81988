"""An OpenID Connect connection as a sign-in uses it (SPEC section 19): its settings, the provider's discovery
document and the client secret from the connection's variable. The installation wrote the connection, so reading
its variable and fetching its issuer's documents stays on the server's side of the trust line (SPEC section 2).

mozilla-django-oidc does the protocol; `settings_for` gives it a provider's settings under the names it asks for."""

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import requests

from console.connections import OidcSettings
from console.models import Connection, ConnectionKind

logger = logging.getLogger(__name__)

# How long a provider's discovery document is kept before it is fetched again, and how long a fetch may take.
DISCOVERY_SECONDS = 300
TIMEOUT_SECONDS = 10
# The ID token algorithms accepted (asymmetric only: a token signed with the client secret, or unsigned, never).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")


class SignInRefused(Exception):
    """A sign-in that cannot go on, with what a person reads on the failure page (`status`: 400 for a broken
    sign-in, 403 for a person the mapping refuses, 502 for a provider that failed)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Provider:
    connection_id: int
    name: str
    issuer: str
    settings: OidcSettings
    client_secret: str
    discovery: dict[str, Any]

    @property
    def display_name(self) -> str:
        return self.settings.display_name or self.name

    @property
    def method(self) -> str:
        """How its members signed in, as receipts, audit and events say (`authMethod`)."""
        return f"oidc:{self.name}"

    @property
    def algorithm(self) -> str:
        """The ID tokens' algorithm mozilla-django-oidc expects: RS256 where the provider offers it."""
        announced = self.discovery.get("id_token_signing_alg_values_supported", ["RS256"])
        offered = [alg for alg in announced if alg in ALGORITHMS]
        return "RS256" if "RS256" in offered or not offered else offered[0]

    def sign_out_url(self, id_token: str, signed_out_to: str) -> str:
        """Where signing out sends the browser (RP-initiated logout), or "" when the provider offers none."""
        endpoint = self.discovery.get("end_session_endpoint")
        if not isinstance(endpoint, str) or not endpoint:
            return ""
        query = {
            "id_token_hint": id_token,
            "post_logout_redirect_uri": signed_out_to,
            "client_id": self.settings.client_id,
        }
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(query)}"


def settings_for(provider: Provider) -> dict[str, Any]:
    """The provider's settings under mozilla-django-oidc's names (its views and backend ask `get_settings`)."""
    found = provider.discovery
    basic = "client_secret_post" not in found.get("token_endpoint_auth_methods_supported", ["client_secret_basic"])
    return {
        "OIDC_OP_AUTHORIZATION_ENDPOINT": found["authorization_endpoint"],
        "OIDC_OP_TOKEN_ENDPOINT": found["token_endpoint"],
        "OIDC_OP_USER_ENDPOINT": found.get("userinfo_endpoint"),
        "OIDC_OP_JWKS_ENDPOINT": found["jwks_uri"],
        "OIDC_RP_CLIENT_ID": provider.settings.client_id,
        "OIDC_RP_CLIENT_SECRET": provider.client_secret,
        "OIDC_RP_SIGN_ALGO": provider.algorithm,
        "OIDC_RP_IDP_SIGN_KEY": None,
        "OIDC_RP_SCOPES": provider.settings.scopes,
        "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_callback",
        "OIDC_USE_NONCE": True,
        "OIDC_USE_PKCE": True,
        "OIDC_TOKEN_USE_BASIC_AUTH": basic,
        "OIDC_TIMEOUT": TIMEOUT_SECONDS,
        "OIDC_VERIFY_SSL": True,
        "OIDC_PROXY": None,
        "OIDC_ALLOW_UNSECURED_JWT": False,
        "OIDC_CREATE_USER": True,
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_STORE_ID_TOKEN": False,
        "OIDC_AUTH_REQUEST_EXTRA_PARAMS": {},
    }


def load_provider(name: str) -> Provider:
    """The provider of the OpenID Connect connection `name`; Connection.DoesNotExist when there is none, or
    SignInRefused when it cannot be used now (its secret unset, its issuer unreachable or inconsistent)."""
    connection = Connection.objects.get(kind=ConnectionKind.OIDC, name=name)
    secret = os.environ.get(connection.secret_env, "")
    if not secret:
        logger.error("OpenID Connect connection %s: the variable %s is unset or empty", name, connection.secret_env)
        raise SignInRefused(
            f"Sign-in with {name} is not set up on this server (its client secret is missing). Tell the "
            "installation's administrator.",
            502,
        )
    return Provider(connection.pk, name, connection.url, connection.oidc_settings, secret, discovered(connection.url))


_DISCOVERED: dict[str, tuple[float, dict[str, Any]]] = {}
_LOCK = threading.Lock()


def discovered(issuer: str) -> dict[str, Any]:
    """The issuer's discovery document (`/.well-known/openid-configuration`), kept DISCOVERY_SECONDS."""
    with _LOCK:
        kept = _DISCOVERED.get(issuer)
    if kept is not None and time.monotonic() - kept[0] < DISCOVERY_SECONDS:
        return kept[1]
    url = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=TIMEOUT_SECONDS)
        response.raise_for_status()
        found = response.json()
    except (requests.RequestException, ValueError) as error:
        logger.warning("OpenID Connect discovery at %s failed: %s", url, error)
        raise SignInRefused(f"The identity provider at {issuer} could not be reached. Try again later.", 502) from None
    needed = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
    if not isinstance(found, dict) or any(not isinstance(found.get(key), str) for key in needed):
        raise SignInRefused(f"The identity provider at {issuer} does not describe itself as OpenID Connect.", 502)
    if found["issuer"] != issuer:
        raise SignInRefused(f"The identity provider at {issuer} calls itself {found['issuer']}: not signing in.", 502)
    with _LOCK:
        _DISCOVERED[issuer] = (time.monotonic(), found)
    return found
