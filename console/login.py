"""The login throttle: password guessing held up per username and client address (the login page is
console/views/login_pages.py).

The 10th wrong password for a username from one address within 15 minutes locks that pair out for 15
minutes: every password check of the pair is refused without looking at the password, whether it comes from
the login page (which answers 429 and says so) or from any other caller of `authenticate()` (the Django
admin's login). Another address, or another username from the same address, is not held up, so a guesser
cannot lock a user out of everywhere; a successful login forgets the failures of its own pair only.

A check is counted as a failure before the password is looked at (`reserve_check`), one reservation of a
pair at a time, so a burst of guesses sent together checks no more passwords than the limit; the checks
still under way hold the pair as a lockout does. Failures and lockouts live in the database, so every
console process sees the same counts. A lockout row is kept as the record of the attempt (the audit page
lists those of the tenant's members to its admins).
"""

import logging
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
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


def held_until(username: str, address: str) -> datetime | None:
    """Until when the pair may not check a password: the end of its lockout, or, while every place of the
    window is taken by checks still under way, until the oldest leaves it; None when it may now."""
    lockout = lockout_of(username, address)
    if lockout is not None:
        return lockout.until
    counted = _counted_checks(username, address)
    if len(counted) < FAILURES_BEFORE_LOCKOUT:
        return None
    return counted[0] + FAILURE_WINDOW


def _counted_checks(username: str, address: str) -> list[datetime]:
    """When the pair's checks of the window were made, oldest first: its failures, and the checks under way."""
    recent = LoginFailure.objects.filter(username=username, address=address, at__gt=timezone.now() - FAILURE_WINDOW)
    return list(recent.order_by("at").values_list("at", flat=True))


def reserve_check(username: str, address: str) -> int | None:
    """Count the password check about to be made as a failure: the place it took in the window (the last,
    `FAILURES_BEFORE_LOCKOUT`, locks the pair out if the password is wrong), or None when the pair may not
    make one.

    Counted before the password is looked at, and one reservation of a pair at a time, so that checks
    started together cannot overtake one another past the limit: the failures of a burst never exceed it.
    """
    with transaction.atomic():
        _take_turns(username, address)
        if lockout_of(username, address) is not None:
            return None
        counted = len(_counted_checks(username, address))
        if counted >= FAILURES_BEFORE_LOCKOUT:
            return None
        # Failures older than the window count for nothing any more, whoever made them.
        LoginFailure.objects.filter(at__lte=timezone.now() - FAILURE_WINDOW).delete()
        LoginFailure.objects.create(username=username, address=address)
        return counted + 1


def _take_turns(username: str, address: str) -> None:
    """PostgreSQL: reservations of one pair wait for each other until the transaction ends (SQLite's
    IMMEDIATE transactions already take turns); other pairs may share a key by chance and then just wait."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"airlock.login:{address} {username}"])


def lock_out(username: str, address: str) -> LoginLockout:
    now = timezone.now()
    logger.warning("login locked for %r from %r until %s", username, address or "an unknown address", now + LOCKOUT)
    return LoginLockout.objects.create(username=username, address=address, locked_at=now, until=now + LOCKOUT)


def forget_failures(username: str, address: str) -> None:
    LoginFailure.objects.filter(username=username, address=address).delete()


def lockouts_of(tenant: Tenant) -> QuerySet[LoginLockout]:
    """The lockouts of the tenant's members, newest first."""
    usernames = Membership.objects.filter(tenant=tenant).values("user__username")
    return LoginLockout.objects.filter(username__in=usernames).order_by("-locked_at")


class ThrottledModelBackend(ModelBackend):
    """Django's ModelBackend behind the throttle: each check is counted as a failure before it is made, a
    held pair is refused without one (PermissionDenied stops `authenticate()` at once), a right password
    forgets the pair's failures, its own included. `aauthenticate()` goes through the same (ModelBackend's
    own would skip it)."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        if username is None:
            username = kwargs.get(User.USERNAME_FIELD)
        if username is None or password is None:
            return None
        address = client_address(request)
        place = reserve_check(username, address)
        if place is None:
            raise PermissionDenied("Too many failed logins.")
        user = super().authenticate(request, username, password, **kwargs)
        if user is None:
            if place == FAILURES_BEFORE_LOCKOUT:
                lock_out(username, address)
        else:
            forget_failures(username, address)
        return user

    async def aauthenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        return await sync_to_async(self.authenticate)(request, username, password, **kwargs)

    def user_can_authenticate(self, user: Any) -> bool:
        """Active, and with PASSWORD_LOGIN=0 (SPEC section 19) a superuser: everyone else signs in through the
        company's identity provider (their password sessions end too)."""
        return super().user_can_authenticate(user) and (settings.PASSWORD_LOGIN or user.is_superuser)
