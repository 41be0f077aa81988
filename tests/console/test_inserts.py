"""`console.inserts.insert_rows`: the rows `bulk_create` writes, on PostgreSQL as one JSON parameter whose every value
PostgreSQL reads back as the value Django's own parameter gives."""

import decimal
import json
import uuid
from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection, transaction
from django.db.models import TextChoices
from django.tasks import TaskResultStatus
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_tasks_db.models import DBTaskResult, get_date_max

from agents.models import Event, Run
from console.inserts import INSERT_BATCH, _json_form, _json_row, _statement, insert_rows
from tests.console.test_sql import _samples
from tests.helpers import make_agent, run_ok


@pytest.mark.django_db
def test_insert_rows_writes_what_bulk_create_writes(operator, admin):
    make_agent(admin)
    run = Run.objects.get(id=run_ok(operator, {"message": "hello", "sessionId": "s"})["runId"])
    when = timezone.now()

    def events(first: int, count: int) -> list[Event]:
        return [
            Event(
                run=run,
                sequence=first + n,
                parent_id=uuid.UUID(int=n) if n % 2 else None,
                type="assistant.message",
                data={"content": f"é {n}", "list": [1, None, True]},
                timestamp=when,
                agent_id="sub" if n else "",
                side_effects=bool(n % 3),
            )
            for n in range(count)
        ]

    ours, theirs = (
        events(1000, INSERT_BATCH + 3),
        events(2000, INSERT_BATCH + 3),
    )  # more rows than one statement takes on SQLite
    insert_rows(ours)
    Event.objects.bulk_create(theirs)
    assert all(not event._state.adding and event._state.db == "default" for event in ours)

    def stored(first: int) -> list[dict[str, Any]]:
        rows = Event.objects.filter(run=run, sequence__gte=first, sequence__lt=first + 1000).order_by("sequence")
        return [{**row, "id": None, "sequence": row["sequence"] - first} for row in rows.values()]

    assert stored(1000) == stored(2000) and len(stored(1000)) == INSERT_BATCH + 3
    # One row, its `parent_id` a NULL.
    insert_rows(events(3000, 1))
    Event.objects.bulk_create(events(4000, 1))
    assert stored(3000) == stored(4000) and stored(3000)[0]["parent_id"] is None
    assert [e.id for e in ours] == list(
        Event.objects.filter(run=run, sequence__gte=1000, sequence__lt=2000)
        .order_by("sequence")
        .values_list("id", flat=True)
    )


@pytest.mark.django_db
def test_insert_rows_refuses_a_row_without_its_key_or_of_another_model(operator, admin):
    make_agent(admin)
    run = Run.objects.get(id=run_ok(operator, {"message": "hello", "sessionId": "s"})["runId"])
    keyless = Event(run=run, sequence=50, type="assistant.message")
    keyless.id = None
    with pytest.raises(ValueError):
        insert_rows([keyless])
    with pytest.raises(ValueError):
        insert_rows([Event(run=run, sequence=51, type="assistant.message"), run])
    assert not Event.objects.filter(run=run, sequence__in=[50, 51]).exists()


class _Choice(TextChoices):
    SOME = "some"


def _json_samples() -> list[Any]:
    """`_samples()` and values whose JSON form is text of another kind, or that JSON escapes."""
    return [
        *_samples(),
        *('quote " back \\ slash', "line\nbreak \t tab", "😀 e\u0301", "\u2028", _Choice.SOME, -1, 2**40),
        *({"nested": {"deep": ["😀", 1.25, False, None]}}, [], {}, 0.1, decimal.Decimal("1.50")),
    ]


@pytest.mark.postgresql
@pytest.mark.django_db
def test_postgresql_reads_each_json_value_as_the_value_djangos_parameter_gives(recwarn):
    """For every field of every model and each value the field takes: the column `json_populate_record` makes of the
    value's JSON form is the one PostgreSQL makes of the parameter Django sends for it (cast to the column's type)."""
    compared = set()
    for model in apps.get_models():
        if not model._meta.managed or model._meta.proxy:
            continue
        table = connection.ops.quote_name(model._meta.db_table)
        for index, field in enumerate(model._meta.concrete_fields):
            column = connection.ops.quote_name(field.column)
            for value in _json_samples():
                row = model()
                setattr(row, field.attname, value)  # read back as a row gives it (a file field: its FieldFile)
                try:
                    theirs = field.get_db_prep_save(getattr(row, field.attname), connection)
                except (TypeError, ValueError, ValidationError, decimal.InvalidOperation):
                    continue  # not a value of this field
                try:  # the value as insert_rows writes it
                    column_of = _statement(model, "default")[1][index]
                    record = json.dumps(_json_row(row, [column_of], connection), ensure_ascii=False)
                except TypeError:  # a UUID in a JSON field: psycopg cannot dump Django's parameter either
                    with pytest.raises(TypeError), transaction.atomic(), connection.cursor() as cursor:
                        cursor.execute("SELECT %s", [theirs])
                    continue
                sql = (
                    f"SELECT (json_populate_record(NULL::{table}, %s::json)).{column} IS NOT DISTINCT FROM"
                    f" %s::{field.db_type(connection)}"
                )
                try:
                    with transaction.atomic(), connection.cursor() as cursor:
                        cursor.execute(sql, [record, theirs])
                        same = cursor.fetchone()[0]
                except (DatabaseError, OverflowError):
                    # The column refuses Django's parameter (2**40 in a small integer): it refuses the JSON too.
                    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
                        cursor.execute(f"SELECT (json_populate_record(NULL::{table}, %s::json)).{column}", [record])
                    continue
                assert same, (model.__name__, field.name, value, record)
                compared.add((type(field).__name__, type(value).__name__))
    # Every kind of field the rows of a turn hold, with the values they hold.
    kinds = {("CharField", "str"), ("CharField", "_Choice"), ("TextField", "str"), ("BooleanField", "bool")}
    kinds |= {("UUIDField", "UUID"), ("ForeignKey", "UUID"), ("ForeignKey", "int"), ("DateTimeField", "datetime")}
    kinds |= {("JSONField", "dict"), ("JSONField", "list"), ("JSONField", "str"), ("JSONField", "NoneType")}
    kinds |= {("PositiveIntegerField", "int"), ("PositiveSmallIntegerField", "int"), ("IntegerField", "int")}
    assert kinds <= compared, kinds - compared


@pytest.mark.postgresql
@pytest.mark.django_db
def test_a_value_the_database_refuses_is_refused_as_bulk_create_has_it_refused(operator, admin):
    make_agent(admin)
    run = Run.objects.get(id=run_ok(operator, {"message": "hello", "sessionId": "s"})["runId"])
    for bad in ({"type": "x" * 200}, {"type": "nul \x00 byte"}, {"data": {"nul": "\x00"}}):
        errors = []
        for write in (insert_rows, Event.objects.bulk_create):
            row = Event(run=run, sequence=70, type="assistant.message", data={}, timestamp=timezone.now())
            for name, value in bad.items():
                setattr(row, name, value)
            with pytest.raises(DatabaseError) as refused, transaction.atomic():
                write([row])
            errors.append(type(refused.value))
        assert errors[0] is errors[1], (bad, errors)
    assert not Event.objects.filter(run=run, sequence=70).exists()


def test_a_value_without_a_json_form_is_refused():
    with pytest.raises(TypeError):
        _json_form(b"bytes")


@pytest.mark.django_db
def test_groups_of_rows_are_written_in_one_statement_on_postgresql(operator, admin):
    make_agent(admin)
    run = Run.objects.get(id=run_ok(operator, {"message": "hello", "sessionId": "s"})["runId"])
    first = [
        Event(run=run, sequence=80 + n, type="assistant.message", data={"n": n}, timestamp=timezone.now())
        for n in range(3)
    ]
    second = [Event(run=run, sequence=90, type="assistant.message", data={}, timestamp=timezone.now())]
    task = DBTaskResult(
        args_kwargs={"args": [], "kwargs": {}},
        priority=0,
        task_path="agents.queue.execute_queued",
        queue_name="default",
        run_after=get_date_max(),
        backend_name="default",
        status=TaskResultStatus.READY,
        enqueued_at=timezone.now(),
    )
    with CaptureQueriesContext(connection) as sent:
        insert_rows([task], [], first, second)
    assert len(sent) == (1 if connection.vendor == "postgresql" else 3)
    assert DBTaskResult.objects.filter(pk=task.pk).exists()
    assert list(
        Event.objects.filter(run=run, sequence__gte=80).values_list("sequence", flat=True).order_by("sequence")
    ) == [80, 81, 82, 90]
    with pytest.raises(ValueError):  # a group of two models, refused before anything is written
        insert_rows([Event(run=run, sequence=95, type="assistant.message")], [Event(run=run, sequence=96), run])
    assert not Event.objects.filter(run=run, sequence__in=[95, 96]).exists()
