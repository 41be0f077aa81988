"""`console.sql`: `update_together` (UPDATEs in one statement on PostgreSQL, their rows locked in the order given),
`Prepared` (a SELECT compiled once a thread, the same objects or dicts as Django's queryset would give), `Constant` (a
SELECT without values, compiled once) and `PreparedUpdate` (an UPDATE whose condition is compiled once, writing what
the queryset's `update` writes); what a field sends as it is."""

import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import connection, connections
from django.db.models import Count, F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import AgentVersion, Event, Run, Session
from console import sql
from console.models import ApiToken, hash_token
from console.sql import Constant, Prepared, PreparedUpdate, update_together
from tests.helpers import EMAIL, call_line, make_agent, run_ok


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql
def test_the_other_updates_lock_their_rows_before_the_main_one_touches_its_own(operator, admin):
    """A run's outcome writes its session's row before the run's (agents.outcomes): it waits for a session another
    transaction holds without having touched the run. That transaction (the last answer's continuation, which holds
    the session's lock and inserts a run of the session) may be waiting on the run's row itself: had the outcome
    touched the run first, the two would deadlock (seen in tests/approvals/test_losing_answers.py)."""
    make_agent(admin)
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "order"})
    run = Run.objects.get(id=asked["runId"])
    params = connection.get_connection_params()
    holder = psycopg.connect(**params)
    holder.execute("SELECT 1 FROM agents_session WHERE id = %s FOR UPDATE", [run.session_id])
    written: dict[str, Any] = {}

    def write() -> None:
        try:
            session = (Session.objects.filter(pk=run.session_id), {"updated_at": timezone.now()})
            written["rows"] = update_together((Run.objects.filter(pk=run.pk), {"output": "after"}), session)
        finally:
            connections.close_all()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with psycopg.connect(**params, autocommit=True) as checker:
            deadline = time.monotonic() + 10
            waiting = "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'WITH w0 AS%%'"
            while not checker.execute(waiting).fetchone():
                assert time.monotonic() < deadline, "the update never waited for the session's row"
                time.sleep(0.05)
            # The run's row is untouched while its statement waits: locking it does not wait.
            checker.execute("BEGIN")
            checker.execute("SELECT 1 FROM agents_run WHERE id = %s FOR UPDATE NOWAIT", [run.pk])
            checker.execute("ROLLBACK")
    finally:
        holder.rollback()
        holder.close()
        writer.join(10)
    assert written["rows"] == 1 and Run.objects.get(pk=run.pk).output == "after"


@pytest.mark.django_db
def test_the_main_update_writes_only_when_every_other_wrote_a_row(operator, admin):
    make_agent(admin)
    run = Run.objects.get(id=run_ok(operator, {"message": "hello", "sessionId": "s"})["runId"])
    missing = (Session.objects.filter(pk=-1), {"updated_at": timezone.now()})
    assert update_together((Run.objects.filter(pk=run.pk), {"output": "no"}), missing) == 0
    assert Run.objects.get(pk=run.pk).output != "no"
    assert update_together((Run.objects.filter(pk=run.pk), {"output": "yes"})) == 1
    assert Run.objects.get(pk=run.pk).output == "yes"


def _fields(instance: Any) -> dict[str, Any]:
    return {field.attname: getattr(instance, field.attname) for field in type(instance)._meta.concrete_fields}


@pytest.mark.django_db
def test_a_prepared_select_gives_what_the_queryset_gives_with_its_related_objects_in_one_statement(operator, admin):
    def tokens(token_hash: str) -> Any:
        return ApiToken.objects.select_related("membership__user", "membership__tenant").filter(token_hash=token_hash)

    live = Prepared(tokens, token_hash=str)
    token_hash = hash_token(operator.token)
    expected = tokens(token_hash).get()
    for _ in range(2):  # compiled on the first, sent again on the second
        with CaptureQueriesContext(connection) as queries:
            found = live.first(token_hash=token_hash)
            assert found is not None
            related = (found.membership, found.membership.user, found.membership.tenant)
        assert len(queries) == 1
        assert _fields(found) == _fields(expected)  # datetimes converted as Django converts them, on either database
        assert [_fields(r) for r in related] == [
            _fields(r) for r in (operator.membership, operator.user, operator.tenant)
        ]
        assert not found._state.adding and found._state.db == "default"
    assert live.first(token_hash=hash_token(admin.token)).membership.user.username == "ada"
    assert live.first(token_hash=hash_token("al_nothing")) is None


@pytest.mark.django_db
def test_a_prepared_select_places_each_value_wherever_the_query_holds_it(admin):
    make_agent(admin)
    versions = Prepared(
        lambda tenant, name: (
            AgentVersion.objects.select_related("agent")
            .filter(agent__tenant=tenant, agent__name=name)
            .filter(number=F("agent__current_version"))
            .annotate(name_again=F("agent__name"))
        ),
        tenant=int,
        name=str,
    )
    version = versions.first(tenant=admin.tenant.pk, name="assistant")
    assert version is not None and version.agent.name == "assistant" and version.name_again == "assistant"
    assert version.number == version.agent.current_version
    assert versions.first(tenant=admin.tenant.pk + 1, name="assistant") is None
    assert versions.first(tenant=admin.tenant.pk, name="nobody") is None


@pytest.mark.django_db
def test_a_value_a_lookup_rewrites_is_refused_when_first_compiled():
    contains = Prepared(lambda name: User.objects.filter(username__contains=name), name=str)
    with pytest.raises(ValueError, match=r"\['name'\] do not reach the SQL unchanged"):
        contains.first(name="ad")


@pytest.mark.django_db(transaction=True)
def test_each_thread_sends_it_on_its_own_connection(operator):
    live = Prepared(lambda token_hash: ApiToken.objects.filter(token_hash=token_hash), token_hash=str)
    token_hash = hash_token(operator.token)
    assert live.first(token_hash=token_hash) is not None
    found: list[Any] = []

    def look() -> None:
        try:
            found.append(live.first(token_hash=token_hash))
        finally:
            connections.close_all()

    other = threading.Thread(target=look)
    other.start()
    other.join(10)
    assert found and found[0] is not None and found[0].pk == ApiToken.objects.get(token_hash=token_hash).pk


@pytest.mark.django_db
def test_a_prepared_select_takes_uuids_and_datetimes_as_each_database_sends_them(operator, admin):
    make_agent(admin)
    first = run_ok(operator, {"message": "hello", "sessionId": "s"})["runId"]
    second = run_ok(operator, {"message": "again", "sessionId": "s"})["runId"]
    session = Run.objects.get(id=first).session_id
    runs = Prepared(
        lambda session, before, other: (
            Run.objects.filter(session=session, created_at__lte=before).exclude(id=other).order_by("created_at")
        ),
        session=int,
        before=datetime,
        other=uuid.UUID,
    )
    now, nobody = timezone.now(), uuid.uuid4()
    assert [str(run.id) for run in runs.all(session=session, before=now, other=nobody)] == [first, second]
    assert [str(run.id) for run in runs.all(session=session, before=now, other=uuid.UUID(first))] == [second]
    earlier = Run.objects.get(id=first).created_at
    assert [str(run.id) for run in runs.all(session=session, before=earlier, other=nobody)] == [first]
    assert str(runs.first(session=session, before=now, other=nobody).id) == first
    assert runs.first(session=session, before=now - timedelta(days=1), other=nobody) is None


@pytest.mark.django_db
def test_get_raises_the_models_own_does_not_exist(operator):
    tokens = Prepared(lambda token_hash: ApiToken.objects.filter(token_hash=token_hash), token_hash=str)
    assert tokens.get(token_hash=hash_token(operator.token)).membership_id == operator.membership.pk
    with pytest.raises(ApiToken.DoesNotExist):
        tokens.get(token_hash=hash_token("al_nothing"))


@pytest.mark.django_db
def test_a_constant_select_is_compiled_once_and_reads_the_rows_as_they_are_each_time(operator, admin):
    def staff() -> Any:
        return User.objects.values("is_staff").annotate(n=Count("id")).values_list("is_staff", "n").order_by()

    counts = Constant(staff)
    assert sorted(counts.rows()) == sorted(staff())
    compiled = dict(counts._compiled)
    User.objects.create_user("newcomer", is_staff=True)
    User.objects.create_user("another")
    with CaptureQueriesContext(connection) as queries:
        rows = counts.rows()
    assert sorted(rows) == sorted(staff())  # what the table holds now, not what it held
    assert len(queries) == 1 and counts._compiled == compiled


def _samples() -> list[Any]:
    """Values of each type a field may send as it is, and of types close to them that it may not."""
    aware = timezone.now()
    return [
        *("", "é x", 0, 1, 7, True, False, None, uuid.uuid4(), {"a": [1, None]}, ["x"], 1.5),
        *(aware, aware.astimezone(timezone.get_fixed_timezone(300)), aware.replace(tzinfo=None)),
    ]


@pytest.mark.django_db
def test_a_value_a_field_sends_as_it_is_is_what_the_field_would_have_sent(recwarn):
    """`console.sql` skips a field's steps for the values it reads off the field's methods as sent unchanged: for every
    field of every model, each value that is skipped is what `get_db_prep_save` gives, of the same type."""
    skipped = set()
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            as_is = sql.sent_as_is(field, connection)
            for value in _samples():
                try:
                    theirs = field.get_db_prep_save(value, connection)
                except (TypeError, ValueError, ValidationError):
                    # Not a value of this field: it must be left to the field, which refuses it.
                    assert type(value) not in as_is, (field, value)
                    continue
                ours = sql._prepared(field, value, connection)
                same = getattr(ours, "obj", ours) == getattr(theirs, "obj", theirs)  # psycopg's Jsonb: by its value
                assert type(ours) is type(theirs) and same, (field, value, ours, theirs)
                if ours is value and type(value) in as_is:
                    skipped.add((type(field).__name__, type(value).__name__))
    # What an event row sends as it is, whatever the database: its text, its flags, its nulls.
    assert {("CharField", "str"), ("TextField", "str"), ("BooleanField", "bool"), ("ForeignKey", "NoneType")} <= skipped
    if connection.vendor == "postgresql":
        assert {("UUIDField", "UUID"), ("ForeignKey", "UUID"), ("DateTimeField", "datetime")} <= skipped
    assert ("DateTimeField", "datetime") not in skipped or connection.vendor == "postgresql"


@pytest.mark.django_db
def test_a_prepared_values_select_gives_the_querysets_dicts(operator, admin):
    make_agent(admin)
    run = Run.objects.get(id=run_ok(operator, {"message": "hello", "sessionId": "s"})["runId"])
    since = Event.objects.filter(run=run).order_by("timestamp").values_list("timestamp", flat=True)[0]

    def later(run_id: uuid.UUID, sequence: int, since: datetime) -> Any:
        events = Event.objects.filter(run_id=run_id, sequence__gt=sequence, timestamp__gte=since)  # a positive column
        return events.order_by("sequence").values("id", "sequence", "data", "timestamp", "run__status")

    rows = Prepared(later, run_id=uuid.UUID, sequence=int, since=datetime)
    count = Event.objects.filter(run=run).count()
    for sequence in (0, 1, count):  # compiled on the first, sent again after
        expected = list(later(run.id, sequence, since))
        assert rows.dicts(run_id=run.id, sequence=sequence, since=since) == expected
        assert len(expected) == count - sequence
    assert rows.dicts(run_id=uuid.uuid4(), sequence=0, since=since) == []


_HELD = PreparedUpdate(
    lambda run, worker: Run.objects.filter(pk=run, status="running", worker_id=worker), run=uuid.UUID, worker=str
)
_SESSION = PreparedUpdate(lambda session: Session.objects.filter(pk=session), session=int)


@pytest.mark.django_db
def test_a_prepared_update_writes_what_the_querysets_update_writes(operator, admin):
    make_agent(admin)
    ours, theirs = (Run.objects.get(id=run_ok(operator, {"message": "hi", "sessionId": s})["runId"]) for s in "ab")
    Run.objects.filter(pk__in=[ours.pk, theirs.pk]).update(status="running", worker_id="w1")
    when = timezone.now()
    changes = {"status": "completed", "output": "done", "usage": {"requests": 1}, "error": None, "finished_at": when}
    changes |= {"lease_expires_at": None, "queued_input": None}
    assert update_together(_HELD.bind(changes, run=ours.pk, worker="w1")) == 1
    assert Run.objects.filter(pk=theirs.pk).update(**changes) == 1
    ignored = {"id", "session_id", "message", "created_at"}
    assert {k: v for k, v in _fields(Run.objects.get(pk=ours.pk)).items() if k not in ignored} == {
        k: v for k, v in _fields(Run.objects.get(pk=theirs.pk)).items() if k not in ignored
    }
    # Held by another worker, or no longer running: nothing written.
    assert _HELD.bind({"output": "late"}, run=ours.pk, worker="w2").run() == 0
    assert _HELD.bind({"output": "late"}, run=ours.pk, worker="w1").run() == 0
    # A model instance is set as its key, as `update` sets it; with another update, in one statement on PostgreSQL.
    session = ours.session
    assert session is not None
    moved = update_together(
        _SESSION.bind({"last_run": theirs, "updated_at": when}, session=session.pk),
        (Run.objects.filter(pk=ours.pk), {"output": "together"}),
    )
    assert moved == 1 and Session.objects.get(pk=session.pk).last_run_id == theirs.pk
    assert Run.objects.get(pk=ours.pk).output == "together"


@pytest.mark.django_db
def test_a_prepared_update_refuses_what_it_cannot_write_as_django_would():
    with pytest.raises(ValueError):
        _SESSION.bind({"updated_at": F("created_at")}, session=1)
    with pytest.raises(ValueError):
        PreparedUpdate(lambda name: Run.objects.filter(agent__name=name), name=str).bind({"output": "x"}, name="a")
