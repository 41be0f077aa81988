"""Password guessing is throttled per username and client address: the 10th wrong password within 15 minutes
locks that pair out for 15 minutes (429 on the login page), and the lockout shows in the audit."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import aauthenticate, authenticate
from django.contrib.auth.hashers import MD5PasswordHasher
from django.db import connection
from django.test import Client, RequestFactory
from django.utils import timezone

from console.models import LoginFailure, LoginLockout
from tests.conftest import PASSWORD

HERE, THERE = "10.0.0.1", "10.0.0.2"
LOCKED_MESSAGE = "Too many failed logins"


def log_in(username: str, password: str, address: str = HERE, client: Client | None = None):
    client = client or Client()
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def fail(username: str, times: int, address: str = HERE) -> list[int]:
    return [log_in(username, "wrong", address).status_code for _ in range(times)]


def logged_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def move_back(minutes: int) -> None:
    """Everything the throttle stored happened `minutes` earlier."""
    shift = timedelta(minutes=minutes)
    for failure in LoginFailure.objects.all():
        failure.at -= shift
        failure.save(update_fields=["at"])
    for lockout in LoginLockout.objects.all():
        lockout.locked_at -= shift
        lockout.until -= shift
        lockout.save(update_fields=["locked_at", "until"])


def test_it_locks_a_username_and_address_out_after_ten_wrong_passwords(admin):
    assert fail("ada", 9) == [200] * 9
    tenth = log_in("ada", "wrong")
    assert tenth.status_code == 429
    assert LOCKED_MESSAGE in tenth.content.decode()
    client = Client()
    right = log_in("ada", PASSWORD, client=client)
    assert right.status_code == 429
    assert LOCKED_MESSAGE in right.content.decode()
    assert 14 * 60 < int(right["Retry-After"]) <= 15 * 60
    assert not logged_in(client)


def test_it_lets_the_same_user_in_from_another_address(admin):
    fail("ada", 10)
    client = Client()
    assert log_in("ada", PASSWORD, address=THERE, client=client).status_code == 302
    assert logged_in(client)


def test_it_lets_another_user_in_from_the_same_address(admin, operator):
    fail("ada", 10)
    client = Client()
    assert log_in("otto", PASSWORD, client=client).status_code == 302
    assert logged_in(client)


def test_it_keeps_counting_an_address_when_another_address_logs_in(admin):
    assert fail("ada", 9) == [200] * 9
    assert log_in("ada", PASSWORD, address=THERE).status_code == 302
    assert log_in("ada", "wrong").status_code == 429


def test_it_forgets_an_address_failures_once_it_logs_in(admin):
    fail("ada", 9)
    assert log_in("ada", PASSWORD).status_code == 302
    assert fail("ada", 9) == [200] * 9


def test_it_lets_the_pair_in_again_once_the_lockout_is_over(admin):
    fail("ada", 10)
    move_back(14)
    assert log_in("ada", PASSWORD).status_code == 429
    move_back(1)
    client = Client()
    assert log_in("ada", PASSWORD, client=client).status_code == 302
    assert logged_in(client)


def test_it_counts_only_the_failures_of_the_last_15_minutes(admin):
    fail("ada", 9)
    move_back(16)
    assert fail("ada", 9) == [200] * 9
    assert log_in("ada", "wrong").status_code == 429


def test_it_locks_unknown_usernames_alike(db):
    """The lockout does not tell a guesser which usernames exist."""
    assert fail("nobody", 9) == [200] * 9
    assert log_in("nobody", "wrong").status_code == 429


def test_it_does_not_count_a_form_without_a_password(admin):
    for _ in range(12):
        assert log_in("ada", "").status_code == 200
    assert LoginFailure.objects.count() == 0


def test_it_refuses_every_password_check_of_a_locked_pair(admin):
    """The Django admin's login and any other caller of authenticate() go through the same lock."""
    fail("ada", 10)
    request = RequestFactory().post("/admin/login/", REMOTE_ADDR=HERE)
    assert authenticate(request, username="ada", password=PASSWORD) is None
    assert async_to_sync(aauthenticate)(request, username="ada", password=PASSWORD) is None
    request = RequestFactory().post("/admin/login/", REMOTE_ADDR=THERE)
    assert authenticate(request, username="ada", password=PASSWORD) == admin.user


def test_it_stops_counting_while_locked(admin):
    fail("ada", 10)
    fail("ada", 20)
    assert LoginFailure.objects.count() == 10
    assert LoginLockout.objects.count() == 1


def test_it_shows_lockouts_of_the_tenant_members_to_its_admins(admin, reader, outsider):
    fail("rita", 10)
    fail("oscar", 10, address=THERE)
    page = admin.client.get("/audit/").content.decode()
    assert "Sign-in lockouts" in page
    assert "rita" in page and HERE in page
    assert "oscar" not in page and THERE not in page
    assert "Sign-in lockouts" not in reader.client.get("/audit/").content.decode()


def test_it_records_each_lockout_once_with_its_end(admin):
    before = timezone.now()
    fail("ada", 10)
    lockout = LoginLockout.objects.get()
    assert (lockout.username, lockout.address) == ("ada", HERE)
    assert before <= lockout.locked_at <= timezone.now()
    assert lockout.until - lockout.locked_at == timedelta(minutes=15)


def test_it_throttles_a_request_without_a_client_address_by_username(admin):
    """A server on a unix socket has no client address; the username alone is then the key."""
    assert fail("ada", 10, address="")[-1] == 429
    assert log_in("ada", PASSWORD, address=HERE).status_code == 302


class CountingHasher(MD5PasswordHasher):
    """The test hasher, counting the passwords it checks; each check takes a while, as a real hash does, so
    that checks started together overlap."""

    checks = 0
    _lock = threading.Lock()

    def verify(self, password: str, encoded: str) -> bool:
        with self._lock:
            CountingHasher.checks += 1
        time.sleep(0.05)
        return super().verify(password, encoded)


@pytest.mark.django_db(transaction=True)
def test_it_checks_at_most_ten_of_thirty_wrong_passwords_sent_at_once(admin, settings):
    """On PostgreSQL (the PostgreSQL pass) the guesses race for real; on SQLite they overlap in the hash."""
    settings.PASSWORD_HASHERS = [f"{__name__}.CountingHasher"]
    CountingHasher.checks = 0
    barrier = threading.Barrier(30)

    def guess(_: int) -> int:
        try:
            barrier.wait(timeout=30)
            return log_in("ada", "wrong").status_code
        finally:
            connection.close()  # each thread's own connection, or the test database cannot be dropped

    with ThreadPoolExecutor(max_workers=30) as pool:
        statuses = list(pool.map(guess, range(30)))
    assert CountingHasher.checks == 10
    assert LoginFailure.objects.count() == 10
    assert LoginLockout.objects.count() == 1
    # The refused guesses are told to wait; a wrong one answered after the window filled is told so too.
    assert statuses.count(429) >= 21 and set(statuses) <= {200, 429}
    assert log_in("ada", PASSWORD).status_code == 429
