"""Logging in, with password guessing throttled per username and client address.

The 10th wrong password for a username from one address within 15 minutes locks that pair out for 15
minutes: every password check of the pair is refused without looking at the password, whether it comes from
the login page (which answers 429 and says so) or from any other caller of `authenticate()` (the Django
admin's login). Another address, or another username from the same address, is not held up, so a guesser
cannot lock a user out of everywhere; a successful login forgets the failures of its own pair only.

Failures and lockouts live in the database, so every console process sees the same counts. A lockout row
is kept as the record of the attempt (the audit page lists those of the tenant's members to its admins).
"""

import logging
import math
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from console.models import LoginFailure, LoginLockout, Membership, Tenant

FAILURES_BEFORE_LOCKOUT = 10
FAILURE_WINDOW = timedelta(minutes=15)
LOCKOUT = timedelta(minutes=15)

logger = logging.getLogger(__name__)


def client_address(request: HttpRequest | None) -> str:
    """The address the server saw the request come from (daphne: the peer of the connection); empty when
    there is none, e.g. a unix socket, and then the username alone is the key."""
    if request is None:
        return ""
    return str(request.META.get("REMOTE_ADDR") or "")[:45]


def lockout_of(username: str, address: str) -> LoginLockout | None:
    """The lockout of the pair in force now, if any."""
    return (
        LoginLockout.objects.filter(username=username, address=address, until__gt=timezone.now())
        .order_by("-until")
        .first()
    )


def record_failure(username: str, address: str) -> LoginLockout | None:
    """Count a wrong password; the lockout it starts when it is the pair's 10th within the window."""
    now = timezone.now()
    # Failures older than the window count for nothing any more, whoever made them.
    LoginFailure.objects.filter(at__lte=now - FAILURE_WINDOW).delete()
    LoginFailure.objects.create(username=username, address=address, at=now)
    recent = LoginFailure.objects.filter(username=username, address=address, at__gt=now - FAILURE_WINDOW)
    if recent.count() < FAILURES_BEFORE_LOCKOUT:
        return None
    logger.warning("login locked for %r from %r until %s", username, address or "an unknown address", now + LOCKOUT)
    return LoginLockout.objects.create(username=username, address=address, locked_at=now, until=now + LOCKOUT)


def forget_failures(username: str, address: str) -> None:
    LoginFailure.objects.filter(username=username, address=address).delete()


def lockouts_of(tenant: Tenant) -> QuerySet[LoginLockout]:
    """The lockouts of the tenant's members, newest first."""
    usernames = Membership.objects.filter(tenant=tenant).values("user__username")
    return LoginLockout.objects.filter(username__in=usernames).order_by("-locked_at")


class ThrottledModelBackend(ModelBackend):
    """Django's ModelBackend behind the throttle: a locked pair is refused before its password is checked
    (PermissionDenied stops `authenticate()` at once), a wrong password is counted, a right one forgets the
    pair's failures. `aauthenticate()` goes through the same (ModelBackend's own would skip it)."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        if username is None:
            username = kwargs.get(User.USERNAME_FIELD)
        if username is None or password is None:
            return None
        address = client_address(request)
        if lockout_of(username, address) is not None:
            raise PermissionDenied("Too many failed logins.")
        user = super().authenticate(request, username, password, **kwargs)
        if user is None:
            record_failure(username, address)
        else:
            forget_failures(username, address)
        return user

    async def aauthenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        return await sync_to_async(self.authenticate)(request, username, password, **kwargs)


class LoginView(auth_views.LoginView):
    """The login page; a locked username and address get 429 and when to try again."""

    redirect_authenticated_user = True

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        username = form.cleaned_data.get("username")
        lockout = lockout_of(username, client_address(self.request)) if username else None
        if lockout is None:
            return super().form_invalid(form)
        seconds = math.ceil((lockout.until - timezone.now()).total_seconds())
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
