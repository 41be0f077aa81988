"""`insert_rows`: `bulk_create` without the queryset's machinery around each value (issue 56), for the rows every turn
writes (its events, its checkpoint, its requests, its run and its task).

On PostgreSQL the rows travel as one parameter, a JSON array of objects keyed by column, which the database turns into
the table's rows (`json_populate_recordset`): each value adapted by its field as Django adapts it, then written in
its JSON form (a UUID, a datetime as text; a JSON field's value as it is). A parameter of its own for every value
cost the driver a step or three for each (finding its dumper, dumping it) and a parse of the statement on every
execute once it holds more than 50 parameters (psycopg caches only shorter ones); one JSON text is one `json.dumps`.
A turn's twelve events took 892 Python calls and 0.83 ms of CPU this way against 220 and 0.28 ms (measured on
PostgreSQL). The statement's text is the same for any number of rows, so the server prepares it once a connection.
Elsewhere (SQLite) each value is a parameter, INSERT_BATCH rows a statement.

`tests/console/test_inserts.py` holds both to what `bulk_create` writes, and the JSON form of every field of every
model to what PostgreSQL makes of the parameter Django sends."""

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from types import NoneType
from typing import Any, NamedTuple, cast

from django.db import connections, router
from django.db.models import Field, ForeignKey, IntegerField, JSONField, Model
from django.db.models.fields import AutoFieldMixin
from psycopg.types.json import Json, Jsonb

from console.sql import sent_as_is

# Rows in one INSERT at most where each value is a parameter: 100 rows of 25 columns stay far below SQLite's limit of
# parameters in a statement.
INSERT_BATCH = 100

# The values of a JSON field the JSON array holds as they are (and, within them, whatever `json` writes).
_JSON: frozenset[type] = frozenset({dict, list, str, int, float, bool, NoneType})
# Of the values a field sends as they are, those the JSON array holds as they are too.
_JSON_AS_SENT: frozenset[type] = frozenset({str, bool, NoneType})


class _Column(NamedTuple):
    field: Field
    name: str  # its column's
    as_is: frozenset[type]  # the types of value it sends as they are (`sent_as_is`); on PostgreSQL in the JSON array
    as_text: frozenset[type]  # on PostgreSQL, those the JSON array holds as their text: a UUID, an aware datetime


def insert_rows(*groups: Sequence[Model]) -> None:
    """`bulk_create` of each group of rows, in order: rows of one model a group, whose every value is set, the
    primary key included (none left to the database, nor to a field's `pre_save` such as `auto_now`). On PostgreSQL
    the groups are one statement, each before the last a WITH clause (so a run and its task are one round trip).
    Like `bulk_create`, it sends no signal."""
    groups = tuple(rows for rows in groups if rows)
    if not groups:
        return
    for rows in groups:
        model = type(rows[0])
        if any(type(row) is not model or row.pk is None for row in rows):
            raise ValueError("insert_rows takes groups of rows of one model, each with its primary key")
    db = router.db_for_write(type(groups[0][0]))
    connection = connections[db]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            statements, params = [], []
            for rows in groups:
                sql, columns = _statement(type(rows[0]), db)
                statements.append(sql)
                params.append(json.dumps([_json_row(row, columns, connection) for row in rows], ensure_ascii=False))
            clauses = ", ".join(f"i{index} AS ({sql})" for index, sql in enumerate(statements[:-1]))
            cursor.execute(f"WITH {clauses} {statements[-1]}" if clauses else statements[-1], params)
        else:
            for rows in groups:
                sql, columns = _statement(type(rows[0]), db)
                placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
                for start in range(0, len(rows), INSERT_BATCH):
                    batch = rows[start : start + INSERT_BATCH]
                    values = [value for row in batch for value in _adapted(row, columns, connection)]
                    cursor.execute(sql + ", ".join([placeholders] * len(batch)), values)
    for rows in groups:
        for obj in rows:
            obj._state.adding, obj._state.db = False, db


def _adapted(row: Model, columns: list[_Column], connection: Any) -> list[Any]:
    """The row's values as each field's `get_db_prep_save` gives them, without a field's steps for a value it sends
    as it is (`console.sql._prepared`'s test, here without a call for every value)."""
    values = []
    for field, _, as_is, _ in columns:
        value = getattr(row, field.attname)
        kind = type(value)
        if kind in as_is and (kind is not dt.datetime or value.utcoffset() is not None):
            values.append(value)
        else:
            values.append(field.get_db_prep_save(value, connection))
    return values


def _json_row(row: Model, columns: list[_Column], connection: Any) -> dict[str, Any]:
    """The row as an object of the JSON array `json_populate_recordset` reads: its values by column, each in the form
    PostgreSQL reads back into what the field's `get_db_prep_save` gives (without the field's steps for a value of a
    type it holds as it is, or as its text)."""
    found = {}
    for field, name, as_is, as_text in columns:
        value = getattr(row, field.attname)
        kind = type(value)
        if kind in as_is:
            found[name] = value
        elif kind in as_text and (kind is not dt.datetime or value.utcoffset() is not None):
            found[name] = str(value)
        else:
            found[name] = _json_form(field.get_db_prep_save(value, connection))
    return found


def _json_form(value: Any) -> Any:
    """A value adapted for psycopg, in the JSON form PostgreSQL reads back into the same value of its column."""
    if isinstance(value, Json | Jsonb):  # a JSON field's value, written with the field's encoder
        return value.obj if value.dumps in (None, json.dumps) else json.loads(value.dumps(value.obj))
    if value is None or isinstance(value, str | int | float):  # psycopg's Int4..., a choice's enum: `json` writes
        return value  # what they hold
    if isinstance(value, uuid.UUID | dt.datetime):  # an adapted datetime is aware
        return str(value)
    raise TypeError(f"insert_rows cannot write a {type(value).__name__} in JSON: {value!r}")


def _json_as_is(field: Field, connection: Any) -> frozenset[type]:
    """The types of value `field` sends as they are on PostgreSQL that the JSON array holds as they are too (a
    string, a boolean, None), with those it sends adapted that JSON holds as they were, read off the field's methods
    (Django's): an integer of an integer field, or of a key to one (psycopg's wrapper of an int for its column); any
    value JSON holds of a JSON field without an encoder of its own (psycopg's wrapper for JSON, None as NULL)."""
    kind = type(field)
    if isinstance(field, ForeignKey) and kind.get_db_prep_save is ForeignKey.get_db_prep_save:
        return _json_as_is(field.target_field, connection) - {str}  # a key sends "" as NULL to most targets
    methods = (kind.get_prep_value, kind.get_db_prep_save, kind.get_db_prep_value)
    if methods in _INTEGER_METHODS:
        return frozenset({int, NoneType})
    if methods == _JSON_METHODS and cast(JSONField, field).encoder is None:
        return _JSON
    return sent_as_is(field, connection) & _JSON_AS_SENT


# The methods (`get_prep_value`, `get_db_prep_save`, `get_db_prep_value`) of Django's integer fields, of its automatic
# keys (whose check of a key's value is MySQL's alone), and of its JSON field.
_INTEGER_METHODS = {
    (IntegerField.get_prep_value, Field.get_db_prep_save, IntegerField.get_db_prep_value),
    (IntegerField.get_prep_value, AutoFieldMixin.get_db_prep_save, AutoFieldMixin.get_db_prep_value),
}
_JSON_METHODS = (Field.get_prep_value, JSONField.get_db_prep_save, JSONField.get_db_prep_value)


_STATEMENTS: dict[tuple[type[Model], str], tuple[str, list[_Column]]] = {}


def _statement(model: type[Model], db: str) -> tuple[str, list[_Column]]:
    """A model's INSERT for a database, and its columns in the order it names them: on PostgreSQL the whole
    statement, elsewhere up to `VALUES ` (the placeholders of its rows follow)."""
    statement = _STATEMENTS.get((model, db))
    if statement is None:
        connection = connections[db]
        quote = connection.ops.quote_name
        columns = []
        for field in model._meta.concrete_fields:
            name, sent = cast(str, field.column), sent_as_is(field, connection)  # a concrete field has its column
            if connection.vendor == "postgresql":
                columns.append(_Column(field, name, _json_as_is(field, connection), sent & {uuid.UUID, dt.datetime}))
            else:
                columns.append(_Column(field, name, sent, frozenset()))
        table = quote(model._meta.db_table)
        names = ", ".join(quote(column.name) for column in columns)
        if connection.vendor == "postgresql":
            sql = f"INSERT INTO {table} ({names}) SELECT {names} FROM json_populate_recordset(NULL::{table}, %s::json)"
        else:
            sql = f"INSERT INTO {table} ({names}) VALUES "
        statement = _STATEMENTS[(model, db)] = (sql, columns)
    return statement
