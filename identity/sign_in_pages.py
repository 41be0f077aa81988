"""Signing in through an OpenID Connect connection (SPEC section 19): `/oidc/<connection>/login/` sends the browser
to the provider (Authorization Code with PKCE, `state` and `nonce`: mozilla-django-oidc's request view), and
`/oidc/callback/` takes it back (the library's callback view: the state checked against this browser's session,
the code exchanged, the ID token verified by `identity.backend.OidcBackend`). Every failure is a page that says
what failed, and nobody is signed in by it."""

import logging
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import requests
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from console.models import Connection
from console.tenancy import SIGN_OUT_AT, SIGNED_IN_WITH
from identity.providers import Provider, SignInRefused, load_provider, settings_for

logger = logging.getLogger(__name__)

# The session's record of the sign-ins it started (mozilla-django-oidc's), and how long one may take.
STATES = "oidc_states"
STATE_SECONDS = 15 * 60


def failure_page(request: HttpRequest, reason: str, status: int = 400, provider: str = "") -> HttpResponse:
    """The page of a sign-in that failed: what failed, and the way back to the login page."""
    return render(request, "identity/sign_in_failed.html", {"reason": reason, "provider": provider}, status=status)


def provider_or_404(name: str) -> Provider:
    try:
        return load_provider(name)
    except Connection.DoesNotExist:
        raise Http404("No such identity provider.") from None


class SignIn(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """The redirect to the provider's authorization endpoint; the session remembers which connection the sign-in's
    `state` belongs to."""

    provider: Provider | None = None

    def get_settings(self, attr: str, *args: Any) -> Any:  # the library's reads Django's settings
        found = settings_for(self.provider) if self.provider is not None else {}
        return found[attr] if attr in found else (args[0] if args else None)

    def get(self, request: HttpRequest, connection: str) -> HttpResponse:
        try:
            self.provider = provider_or_404(connection)
        except SignInRefused as refused:
            return failure_page(request, refused.reason, refused.status, connection)
        self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
        self.OIDC_RP_CLIENT_ID = self.get_settings("OIDC_RP_CLIENT_ID")
        response: HttpResponse = super().get(request)
        state = parse_qs(urlsplit(response["Location"]).query)["state"][0]
        request.session[STATES][state]["connection"] = connection
        request.session.modified = True
        return response


class Callback(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """The provider's redirect back: the sign-in it finishes, or the page of what failed."""

    provider: Provider | None = None
    reason = "The identity provider did not sign you in."

    def get(self, request: HttpRequest) -> HttpResponse:
        started = request.session.get(STATES, {}).get(request.GET.get("state", ""))
        if not isinstance(started, dict) or "connection" not in started:
            # Neither an answer nor a refusal of a sign-in this browser started (a link anyone could send): the
            # session, signed in or not, stays as it is, and no words of the link's are shown.
            return failure_page(
                request,
                "This sign-in was not started in this browser, or its state was changed on the way: nobody was "
                "signed in. Start again from the login page.",
            )
        if request.GET.get("error"):
            said = request.GET.get("error_description") or request.GET["error"]
            self.reason = f"The identity provider refused the sign-in: {said}"
            return super().get(request)  # forgets the state (no replay)
        name = started["connection"]
        if time.time() - started.get("added_on", 0) > STATE_SECONDS:
            return failure_page(request, "This sign-in took too long. Start again from the login page.", provider=name)
        try:
            self.provider = request.oidc_provider = load_provider(name)  # type: ignore[attr-defined]
            response: HttpResponse = super().get(request)
            return response
        except Connection.DoesNotExist:
            return failure_page(request, "This identity provider was removed while you were signing in.", 410, name)
        except SignInRefused as refused:
            return failure_page(request, refused.reason, refused.status, name)
        except SuspiciousOperation as error:
            logger.warning("OpenID Connect sign-in through %s refused: %s", name, error)
            return failure_page(request, f"The sign-in could not be verified: {error}", provider=name)
        except requests.HTTPError as error:
            logger.warning("OpenID Connect sign-in through %s: the provider answered %s", name, error)
            return failure_page(request, "The identity provider refused to complete the sign-in.", 502, name)
        except requests.RequestException as error:
            logger.warning("OpenID Connect sign-in through %s: the provider could not be reached: %s", name, error)
            return failure_page(request, "The identity provider could not be reached. Try again later.", 502, name)
        except (jwt.PyJWTError, KeyError, TypeError, ValueError):
            # A token endpoint's answer with no ID token, or one that is no JWT, or a key set without key ids.
            logger.exception("OpenID Connect sign-in through %s: the provider's answer could not be read", name)
            return failure_page(
                request, "The identity provider's answer could not be read: nobody was signed in.", 502, name
            )

    def login_failure(self) -> HttpResponse:
        name = self.provider.name if self.provider else ""
        user = getattr(self, "user", None)
        if user is not None and not user.is_active:
            return failure_page(self.request, "Your account on this console is deactivated.", 403, name)
        return failure_page(self.request, self.reason, provider=name)

    def login_success(self) -> HttpResponse:
        response: HttpResponse = super().login_success()
        assert self.provider is not None
        session = self.request.session
        session[SIGNED_IN_WITH] = self.provider.method
        id_token = getattr(self.request, "oidc_id_token", "")
        signed_out_to = self.request.build_absolute_uri(reverse("login"))
        session[SIGN_OUT_AT] = self.provider.sign_out_url(id_token, signed_out_to) if id_token else ""
        return response
