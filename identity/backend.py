"""The authentication backend of a sign-in through an OpenID Connect connection (SPEC section 19):
mozilla-django-oidc's, given the provider the callback found (`request.oidc_provider`) rather than Django's
settings, with the ID token checks it leaves out (`iss`, `aud`, `exp` required; asymmetric algorithms only) and
the person found by their subject at that provider, created just in time and kept in step with the claims."""

import re
from typing import Any

import jwt
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from identity.claims import follow_claims, grants
from identity.models import OidcIdentity
from identity.providers import Provider, SignInRefused, settings_for

# Seconds of clock difference allowed between the provider and this server when checking `exp` and `iat`.
LEEWAY_SECONDS = 60


class OidcBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's: it reads one provider's settings from Django's; ours come with the request.
        self.UserModel = get_user_model()
        self.provider: Provider | None = None

    def get_settings(self, attr: str, *args: Any) -> Any:  # the library's is a staticmethod reading Django's
        assert self.provider is not None
        found = settings_for(self.provider)
        return found[attr] if attr in found else (args[0] if args else None)

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        provider = getattr(request, "oidc_provider", None)
        if provider is None or "nonce" not in kwargs:
            return None  # a password check, or no sign-in through a provider
        self.provider = provider
        found = settings_for(provider)
        self.OIDC_OP_TOKEN_ENDPOINT = found["OIDC_OP_TOKEN_ENDPOINT"]
        self.OIDC_OP_USER_ENDPOINT = found["OIDC_OP_USER_ENDPOINT"]
        self.OIDC_OP_JWKS_ENDPOINT = found["OIDC_OP_JWKS_ENDPOINT"]
        self.OIDC_RP_CLIENT_ID = found["OIDC_RP_CLIENT_ID"]
        self.OIDC_RP_CLIENT_SECRET = found["OIDC_RP_CLIENT_SECRET"]
        self.OIDC_RP_SIGN_ALGO = found["OIDC_RP_SIGN_ALGO"]
        self.OIDC_RP_IDP_SIGN_KEY = None
        return super().authenticate(request, **kwargs)

    def get_user(self, user_id: Any) -> Any:
        """The session's user while active (the library's would keep a deactivated one signed in)."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def _verify_jws(self, payload: str, key: Any) -> dict[str, Any]:
        """The ID token's claims once its signature, issuer, audience and times check out; else what failed."""
        assert self.provider is not None
        alg = jwt.get_unverified_header(payload).get("alg")
        if alg != self.OIDC_RP_SIGN_ALGO:  # one asymmetric algorithm (Provider.algorithm): never none, never HS*
            raise SuspiciousOperation(f"The ID token is signed with {alg}, not {self.OIDC_RP_SIGN_ALGO}.")
        try:
            return jwt.decode(
                payload,
                key,
                algorithms=[alg],
                audience=self.provider.settings.client_id,
                issuer=self.provider.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise SuspiciousOperation("The ID token has expired.") from None
        except jwt.InvalidAudienceError:
            raise SuspiciousOperation("The ID token was issued to another client than this console.") from None
        except jwt.InvalidIssuerError:
            issuer = self.provider.issuer
            raise SuspiciousOperation(f"The ID token was issued by another issuer than {issuer}.") from None
        except jwt.InvalidSignatureError:
            raise SuspiciousOperation("The ID token's signature does not verify with the provider's keys.") from None
        except jwt.PyJWTError as error:
            raise SuspiciousOperation(f"The ID token is not valid: {error}.") from None

    def store_tokens(self, access_token: str, id_token: str) -> None:
        # Kept for signing out (the provider's end-session `id_token_hint`), on the request the callback reads.
        self.request.oidc_id_token = id_token

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims with the userinfo endpoint's (where the provider has one) over them."""
        if not self.OIDC_OP_USER_ENDPOINT:
            return payload
        info = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or info.get("sub", payload["sub"]) != payload["sub"]:
            raise SuspiciousOperation("The provider's userinfo names another person than the ID token.")
        return payload | info

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return isinstance(claims.get("sub"), str) and bool(claims["sub"])

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        assert self.provider is not None
        return self.UserModel.objects.filter(
            oidc_identities__connection__name=self.provider.name, oidc_identities__subject=claims["sub"]
        )

    def create_user(self, claims: dict[str, Any]) -> Any:
        """The person's first sign-in: a user of their own (no password), once the mapping gives them a tenant."""
        assert self.provider is not None
        if not grants(self.provider.settings, claims):
            raise self._no_tenant()
        with transaction.atomic():
            user = self.UserModel.objects.create_user(username_for(claims), email=claims.get("email") or "")
            OidcIdentity.objects.create(connection_id=self.provider.connection_id, subject=claims["sub"], user=user)
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        """Their tenants, roles and groups as the claims map them now; refused when that is no tenant."""
        assert self.provider is not None
        email = claims.get("email")
        if isinstance(email, str) and email != user.email:
            user.email = email
            user.save(update_fields=["email"])
        if not follow_claims(user, self.provider.method, self.provider.settings, claims):
            raise self._no_tenant()
        return user

    def _no_tenant(self) -> SignInRefused:
        assert self.provider is not None
        return SignInRefused(
            f"{self.provider.display_name} signed you in, but gives you no tenant of this console: your groups "
            "are not mapped to any. Ask your administrator for access.",
            403,
        )


USERNAME_CHARS = re.compile(r"[^\w.@+-]")


def username_for(claims: dict[str, Any]) -> str:
    """A free username from the person's claims: their preferred username, else their e-mail address, else their
    subject, with -2, -3... when taken (a local account of that name stays someone else's)."""
    named = (claims.get(key) for key in ("preferred_username", "email", "sub"))
    wanted = next((value for value in named if isinstance(value, str) and value), "user")
    base = USERNAME_CHARS.sub("-", wanted)[:140] or "user"
    users = get_user_model().objects
    name, number = base, 1
    while users.filter(username=name).exists():
        number += 1
        name = f"{base}-{number}"
    return name
