"""Personas shared by every test: an admin, an operator and a reader of tenant "acme", and an outsider
who is admin of another tenant ("globex")."""

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.signals import request_finished
from django.db import connections
from django.test import Client
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.actions import apply_due
from console.models import ApiToken, Connection, Membership, Tenant

PASSWORD = "correct horse battery staple"

# Connections opened by the threads of async tests must close at the end of each request, as they did
# before persistent connections: PostgreSQL refuses to drop a test database that a connection still uses.
for _alias in connections:
    connections.settings[_alias]["CONN_MAX_AGE"] = 0


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """On SQLite the test database is a file in WAL mode, as the product runs it. Django's default, a
    shared-cache in-memory database, locks whole tables: a test thread reading a run while a turn's
    thread writes it failed at once with "database table is locked" instead of waiting its timeout.
    Under pytest-xdist each worker has its own database (PostgreSQL: `test_airlock_gw0`, … by the suffix
    fixture; SQLite: each worker's own temporary folder)."""
    settings = connections.settings["default"]
    if settings["ENGINE"] == "django.db.backends.sqlite3":
        settings.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


@dataclass
class Persona:
    user: User
    membership: Membership
    client: Client
    token: str

    @property
    def tenant(self) -> Tenant:
        return self.membership.tenant

    def api(self, method: str, path: str, body: object = None, **headers: str):
        """Call the JSON API with this persona's bearer token."""
        import json

        kwargs = {"HTTP_AUTHORIZATION": f"Bearer {self.token}", **headers}
        if body is not None:
            kwargs["data"] = json.dumps(body)
            kwargs["content_type"] = "application/json"
        return getattr(Client(), method.lower())(path, **kwargs)


def make_persona(username: str, tenant: Tenant, role: str) -> Persona:
    user = User.objects.create_user(username, password=PASSWORD)
    membership = Membership.objects.create(user=user, tenant=tenant, role=role)
    client = Client()
    client.force_login(user)
    _, token = ApiToken.issue(membership, "tests")
    return Persona(user, membership, client, token)


def pytest_collection_modifyitems(config, items):
    """Tests marked `postgresql` prove what only PostgreSQL can; on SQLite they are deselected (not
    skipped): the PostgreSQL pass of `make test` runs them."""
    if connections["default"].vendor == "postgresql":
        return
    kept = [item for item in items if item.get_closest_marker("postgresql") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI no test may be skipped: a skip there means a service (PostgreSQL, Redis, Chromium) did not
    come up, and a green run would hide it. On a developer's machine skips stay allowed (`-rs` lists them)."""
    report = yield
    if report.skipped and os.environ.get("CI") and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, which must run every test: {reason}"
    return report


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Every persona hashes a password; the production hasher takes about a second each here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# The undo window console answers are held for in production (console/settings.py), read before a test sets one.
PRODUCTION_WINDOW: float = django_settings.ANSWER_UNDO_SECONDS
# The modules whose tests answer in the console (inbox cards, the selection, a run's batch bar, the trial page):
# each of their tests runs twice, its answers applied inline (a window of 0) and held for the production window.
# Not here: the respond API's and the receipts' tests (the API never holds an answer: approvals/views/answer_pages.py
# is hold_answers' only caller), and test_losing_answers.py, whose races are steered at the hold itself.
HELD_TOO = {
    "tests.agents.test_trial_pages",
    "tests.approvals.test_cards",
    "tests.approvals.test_claims",
    "tests.approvals.test_deleted_agent",
    "tests.approvals.test_client_tool_outcomes",
    "tests.approvals.test_inbox_pages",
    "tests.approvals.test_inbox_tools",
    "tests.approvals.test_inbox_views",
    "tests.approvals.test_person_kinds",
    "tests.approvals.test_routing",
    "tests.approvals.test_routing_push",
    "tests.approvals.test_rule_scopes",
    "tests.approvals.test_triage",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__ in HELD_TOO:
        windows = [0, PRODUCTION_WINDOW]
        metafunc.parametrize("answer_window", windows, indirect=True, ids=["applied-inline", "held"])


@pytest.fixture(autouse=True)
def answer_window(request, settings) -> Iterator[float]:
    """How long console answers are held before they apply: 0 (inline, the same code path) unless the module is
    one of HELD_TOO, whose tests run with the production window as well; the undo tests set their own. Held, an
    answer applies as the window closes after each request ends (the timer's `apply_due`, with its clock moved
    past the window), so a test goes on as a person who waits out the window does, and no test sleeps."""
    window = getattr(request, "param", 0)
    settings.ANSWER_UNDO_SECONDS = window
    if not window:
        yield window
        return

    def window_closed(**kwargs: object) -> None:
        apply_due(timezone.now() + timedelta(seconds=window))

    request_finished.connect(window_closed, dispatch_uid="tests.answer_window")
    try:
        yield window
    finally:
        request_finished.disconnect(dispatch_uid="tests.answer_window")


@pytest.fixture(autouse=True)
def unthrottled_policy_compiles(settings):
    """A test database hands the same tenant ids out again, and one process's quota outlives a test: tests
    compile as many policies as they need (tests/policies/test_policy_sandbox.py sets the quota it tests)."""
    settings.POLICY_COMPILES_PER_MINUTE = 1_000_000


@pytest.fixture
def acme(db) -> Tenant:
    return Tenant.objects.create(slug="acme", name="Acme")


@pytest.fixture
def globex(db) -> Tenant:
    return Tenant.objects.create(slug="globex", name="Globex")


@pytest.fixture
def admin(acme) -> Persona:
    return make_persona("ada", acme, "admin")


@pytest.fixture
def operator(acme) -> Persona:
    return make_persona("otto", acme, "operator")


@pytest.fixture
def reader(acme) -> Persona:
    return make_persona("rita", acme, "reader")


@pytest.fixture
def outsider(globex) -> Persona:
    return make_persona("oscar", globex, "admin")


def definition(name: str = "helper", **fields) -> DefinitionContent:
    """A hosted definition; its instructions' `{{team}}` is a parameter without a default (left as written)."""
    basics = {"name": name, "instructions": "You help {{team}}.", "parameters": [{"name": "team"}]}
    return DefinitionContent.model_validate({**basics, **fields})


def grant(name: str, kind: str, *tenants: Tenant, **settings) -> Connection:
    """A connection of the installation (as superusers define them), granted to `tenants`, or to every
    tenant when none are given."""
    connection = Connection(name=name, kind=kind, all_tenants=not tenants, **settings)
    connection.full_clean()
    connection.save()
    connection.tenants.set(tenants)
    return connection


@pytest.fixture
def agent(admin) -> Agent:
    return Agent.create(admin.tenant, definition(parameters=[{"name": "team", "default": "ops"}]), admin.user)


@pytest.fixture(scope="session", autouse=True)
def _end_stray_connections(django_db_setup, django_db_blocker):
    """Worker threads of async tests (asgiref's executors) may still hold a connection when the session
    ends; PostgreSQL then refuses to drop the test database. End them before pytest-django drops it."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture
async def empty_channel_layer():
    """The in-memory channel layer lives as long as the process; start a websocket test without earlier
    groups."""
    from channels.layers import get_channel_layer

    await get_channel_layer().flush()


@pytest.fixture
async def close_worker_thread_connections():
    """ORM calls from async code run in asgiref's worker thread, whose connection outlives the test; on
    PostgreSQL that open session keeps the test database from being dropped at the end."""
    from asgiref.sync import sync_to_async

    yield
    await sync_to_async(connections.close_all)()
