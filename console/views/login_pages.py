"""The login page: Django's, with a username and address the throttle holds (console/login.py) answered 429
and told when to try again, and, where `seed_demo` installed the demo, who to log in as and where the password
is (a newcomer's first question)."""

import math
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils import timezone

from console.login import client_address, held_until
from console.management.commands.seed_demo import DEMO_USERS
from console.models import Connection, ConnectionKind, Membership
from console.tenancy import SIGN_OUT_AT


def demo_logins() -> dict[str, Any] | None:
    """The demo users still in the demo tenant and where their password is kept; None without demo data."""
    users = list(
        Membership.objects.filter(tenant__slug="demo", user__username__in=DEMO_USERS, user__is_active=True)
        .order_by("user__username")
        .values_list("user__username", flat=True)
    )
    if not users:
        return None
    kept = settings.DATA_DIR / "demo-password"
    try:
        where = str(kept.relative_to(settings.BASE_DIR))
    except ValueError:  # a data folder elsewhere: named by its setting rather than its path on the server
        where = "demo-password in the data folder (AIRLOCK_DATA_DIR)"
    return {"users": [name for name in DEMO_USERS if name in users], "password_file": where if kept.exists() else None}


def sign_in_providers() -> list[dict[str, str]]:
    """The installation's OpenID Connect connections, as the login page offers them (SPEC section 19)."""
    found = Connection.objects.filter(kind=ConnectionKind.OIDC).order_by("name")
    return [{"name": connection.name, "display_name": connection.sign_in_name} for connection in found]


class LoginView(auth_views.LoginView):
    """The login page; a locked username and address get 429 and when to try again."""

    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(**kwargs) | {
            "demo": demo_logins(),
            "providers": sign_in_providers(),
            "password_login": settings.PASSWORD_LOGIN,
        }

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        username = form.cleaned_data.get("username")
        until = held_until(username, client_address(self.request)) if username else None
        if until is None:
            return super().form_invalid(form)
        seconds = math.ceil((until - timezone.now()).total_seconds())
        minutes = math.ceil(seconds / 60)
        form.errors.clear()
        form.add_error(
            None,
            f"Too many failed logins for this username from your address. Try again in {minutes} minute"
            f"{'' if minutes == 1 else 's'}.",
        )
        response = self.render_to_response(self.get_context_data(form=form), status=429)
        response["Retry-After"] = str(seconds)
        return response


class LogoutView(auth_views.LogoutView):
    """Signing out: the console session ends, then a session signed in through an identity provider that offers
    RP-initiated logout goes on to the provider's end-session endpoint (SPEC section 19), which returns to the login
    page."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        provider_sign_out = request.session.get(SIGN_OUT_AT)
        response = super().post(request, *args, **kwargs)
        return HttpResponseRedirect(provider_sign_out) if provider_sign_out else response
