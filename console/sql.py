"""The SQL of the hot paths, where Django's way of sending a statement costs more than the statement.

- `update_together`: several writes in one round trip (issue 32): on PostgreSQL a statement's WITH clauses may write
  too, so UPDATEs Django builds can be sent as one statement.
- `Prepared`: a SELECT Django builds, compiled once a thread and sent again with other values (issue 56): the
  statements every request or turn sends (the token, the agent's version, the rules in force, ...: the map in
  docs/architecture.md), where building and compiling the query cost about twice what running it does.
- `Constant`: a SELECT Django builds that takes no values, compiled once a database and sent as it is (issue 56):
  the running turns per lane, counted on every claim and every hand-over.
- `PreparedUpdate`: an UPDATE whose condition is compiled once a thread, as `Prepared`'s is (issue 56): the rows a
  turn's outcome writes (its session, its held run, its running task).
"""

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import NoneType
from typing import Any, cast

from django.db import connection, connections
from django.db.models import (
    BooleanField,
    CharField,
    DateTimeField,
    Field,
    ForeignKey,
    Model,
    QuerySet,
    TextField,
    UUIDField,
)
from django.db.models.expressions import RawSQL
from django.db.models.query import ValuesIterable, get_related_populators
from django.db.models.sql import UpdateQuery
from django.db.models.sql.compiler import SQLCompiler


@dataclass(frozen=True)
class Bound:
    """An UPDATE with its values (`PreparedUpdate.bind`): `UPDATE … SET … WHERE (…)`, sent as it is."""

    sql: str
    params: list[Any]

    def run(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(self.sql, self.params)
            return int(cursor.rowcount)


# An update: rows and the values `rows.update(**values)` sets, or one bound already.
Update = tuple[QuerySet[Any], dict[str, Any]] | Bound


def update_together(main: Update, *others: Update) -> int:
    """Each of the `others` updates, then `main` when every other one wrote a row; how many rows `main` wrote (the
    caller's transaction decides what a count it did not expect undoes). On PostgreSQL one statement: the others are
    its WITH clauses, and the main update's condition reads what they wrote, so they write (and lock their rows)
    before it touches one of its own: the rows are locked in the order given, whatever order the database would run
    WITH clauses in. Elsewhere one update after the other."""
    if connection.vendor != "postgresql" or not others:
        for other in others:
            if not _run(other):
                return 0
        return _run(main)
    written = [_statement(other) for other in others]
    sql, params = _statement(main, *(f"EXISTS (SELECT 1 FROM w{i})" for i in range(len(others))))
    clauses = ", ".join(f"w{index} AS ({other} RETURNING 1)" for index, (other, _) in enumerate(written))
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {clauses} {sql}", [*(p for _, more in written for p in more), *params])
        return int(cursor.rowcount)


def _run(update: Update) -> int:
    if isinstance(update, Bound):
        return update.run()
    rows, values = update
    return rows.update(**values)


def _statement(update: Update, *conditions: str) -> tuple[str, Sequence[Any]]:
    """The SQL and parameters of `update`, its rows also meeting `conditions` (SQL taking no parameters)."""
    if isinstance(update, Bound):
        return update.sql + "".join(f" AND {condition}" for condition in conditions), update.params
    rows, values = update
    rows = rows.filter(*(RawSQL(c, (), output_field=BooleanField()) for c in conditions))
    query = rows.query.chain(UpdateQuery)  # `rows.update(**values)`, compiled and not sent
    assert isinstance(query, UpdateQuery)
    query.add_update_values(values)
    query.annotations = {}
    return query.get_compiler(rows.db).as_sql()


_AS_IS: dict[tuple[Field, str], frozenset[type]] = {}


def sent_as_is(field: Field, connection: Any) -> frozenset[type]:
    """`_as_is(field, connection)`, kept for each field and database."""
    key = (field, connection.alias)
    as_is = _AS_IS.get(key)
    if as_is is None:
        as_is = _AS_IS[key] = _as_is(field, connection)
    return as_is


def _as_is(field: Field, connection: Any) -> frozenset[type]:
    """The types of value `field.get_db_prep_save` gives back as they are on `connection`, read off the methods the
    field adapts a value with (those of Django's text, boolean, UUID and date-time fields, a key to one of them; a
    field of another kind, or one that overrides one of them, has every value adapted by its own methods):
    - a string, a boolean, None;
    - a UUID where the database has a type of its own for it (PostgreSQL; elsewhere its hex), a datetime where the
      driver takes one as it is (PostgreSQL), an aware one only (Django gives a naive one the default time zone, with
      a warning).
    An integer is not: on PostgreSQL Django wraps it in psycopg's type for its column."""
    kind = type(field)
    if isinstance(field, ForeignKey) and kind.get_db_prep_save is ForeignKey.get_db_prep_save:
        return _as_is(field.target_field, connection) - {str}  # a key sends "" as NULL to most targets
    if kind.get_db_prep_save is not Field.get_db_prep_save:
        return frozenset()
    prep, db_prep, to_python = kind.get_prep_value, kind.get_db_prep_value, kind.to_python
    if db_prep is Field.get_db_prep_value:
        for text in (CharField, TextField):
            if prep is text.get_prep_value and to_python is text.to_python:
                return frozenset({str, NoneType})
        if prep is BooleanField.get_prep_value and to_python is BooleanField.to_python:
            return frozenset({bool, NoneType})
    if db_prep is UUIDField.get_db_prep_value:
        return frozenset({uuid.UUID, NoneType} if connection.features.has_native_uuid_field else {NoneType})
    # PostgreSQL's adapter sends a datetime as it is.
    datetimes = db_prep is DateTimeField.get_db_prep_value and connection.vendor == "postgresql"
    if datetimes and prep is DateTimeField.get_prep_value and to_python is DateTimeField.to_python:
        return frozenset({datetime, NoneType})
    return frozenset()


def _prepared(field: Field, value: Any, connection: Any) -> Any:
    """`field.get_db_prep_save(value, connection)`, without its steps for a value it sends as it is."""
    kind = type(value)
    if kind in sent_as_is(field, connection) and (kind is not datetime or value.utcoffset() is not None):
        return value
    return field.get_db_prep_save(value, connection)


# How a value reaches the SQL's parameters: as it is, or (on SQLite) a UUID as its hex and a datetime as text.
Form = Callable[[Any], Any]


def _form(param: Any, mark: Any, db: str) -> Form | None:
    """How `mark` became `param`, if it did."""
    forms: list[Form] = [lambda value: value]
    if isinstance(mark, uuid.UUID):
        forms.append(lambda value: value.hex)
    if isinstance(mark, datetime):
        forms.append(connections[db].ops.adapt_datetimefield_value)
    return next((form for form in forms if param == form(mark)), None)


def _marks(kinds: dict[str, type]) -> dict[str, Any]:
    """A value for each name that no query holds otherwise, of its type (a positive int within 32 bits, in the range
    of every integer column but the small ones: Django finds no row for a value out of its column's range, or every
    row, and leaves it out of the SQL)."""
    marks: dict[str, Any] = {}
    for index, (name, kind) in enumerate(kinds.items()):
        marks[name] = {
            str: f"\x1fprepared:{name}",
            int: 2_000_000_000 + index,
            uuid.UUID: uuid.UUID(int=0x7E7A_0000_0000_0000_0000_0000_0000_0000 + index),
            datetime: datetime(1901, 1, 1, 0, 0, index, tzinfo=UTC),
        }[kind]
    return marks


Places = dict[str, list[tuple[int, Form]]]


def _places(marks: dict[str, Any], params: Sequence[Any], db: str) -> Places:
    """Where (and in which form) each mark is among a compiled statement's parameters; ValueError for a mark that is
    in none (a lookup rewrote it)."""
    places: Places = {name: [] for name in marks}
    for name, mark in marks.items():
        for place, param in enumerate(params):
            if (form := _form(param, mark, db)) is not None:
                places[name].append((place, form))
    lost = [name for name, found in places.items() if not found]
    if lost:
        raise ValueError(f"the values {lost} do not reach the SQL unchanged: Prepared cannot place them")
    return places


def _placed(params: Sequence[Any], places: Places, values: dict[str, Any]) -> list[Any]:
    """A compiled statement's parameters with the values in the marks' places."""
    placed = list(params)
    for name, found in places.items():
        for place, form in found:
            placed[place] = form(values[name])
    return placed


@dataclass(frozen=True)
class _Compiled:
    """One thread's compiled statement: its SQL, its parameters with the places (and forms) of the named values, and
    what turns a row into the model with its related objects (as Django's ModelIterable does), or for a `values()`
    query the names of its columns (as Django's ValuesIterable does)."""

    model: type[Any]  # a Model subclass: its DoesNotExist, its from_db
    db: str
    sql: str
    params: tuple[Any, ...]
    places: Places
    compiler: SQLCompiler
    converters: dict[int, Any]
    fields: tuple[int, int]  # the main model's columns: row[start:end]
    names: list[str]
    populators: list[Any]
    fetch_mode: Any
    value_names: list[str]


class Prepared[M: Model]:
    """The rows of `build(**values)`, its SQL compiled once a thread (a thread keeps its own database connection,
    which the rows' converters use) and sent again with other values. Each value is of the type given for its name
    (str, int, UUID, aware datetime; never None, which would change the SQL) and must reach the SQL as a parameter of
    its own (`filter(name=value)`), not one a lookup rewrites (`contains`). The rows come in the queryset's own
    order, without the primary key's that `QuerySet.first()` adds to an unordered one. A `values()` query gives
    its rows as dicts (`dicts`)."""

    def __init__(self, build: Callable[..., QuerySet[M]], **kinds: type) -> None:
        self.build, self.kinds = build, kinds
        self._local = threading.local()

    def _compile(self, limited: bool) -> _Compiled:
        marks = _marks(self.kinds)
        queryset = self.build(**marks)
        queryset = queryset[:1] if limited else queryset
        compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        places = _places(marks, params, queryset.db)
        fetch_mode = queryset._fetch_mode  # type: ignore[attr-defined]
        if issubclass(queryset._iterable_class, ValuesIterable):  # type: ignore[attr-defined]
            query = queryset.query  # its names as Django's ValuesIterable reads them
            value_names = list(query.selected or [*query.extra_select, *query.values_select, *query.annotation_select])
            start, end, populators = 0, 0, []
        else:
            assert not compiler.has_extra_select
            selected = compiler.klass_info["select_fields"]
            start, end, value_names = selected[0], selected[-1] + 1, []
            populators = get_related_populators(compiler.klass_info, compiler.select, queryset.db, fetch_mode)
        return _Compiled(
            model=queryset.model,
            db=queryset.db,
            sql=sql,
            params=tuple(params),
            places=places,
            compiler=compiler,
            converters=compiler.get_converters([column[0] for column in compiler.select[: compiler.col_count]]),
            fields=(start, end),
            names=[column[0].target.attname for column in compiler.select[start:end]],
            populators=populators,
            fetch_mode=fetch_mode,
            value_names=value_names,
        )

    def _fetch(self, limited: bool, values: dict[str, Any]) -> tuple[_Compiled, list[Any]]:
        """The statement and its rows, converted."""
        compiled: dict[bool, _Compiled] = self._local.__dict__.setdefault("compiled", {})
        if limited not in compiled:
            compiled[limited] = self._compile(limited)
        statement = compiled[limited]
        params = _placed(statement.params, statement.places, values)
        with connections[statement.db].cursor() as cursor:
            cursor.execute(statement.sql, params)
            rows = cursor.fetchall()
        if statement.converters:
            rows = list(statement.compiler.apply_converters(rows, statement.converters))
        return statement, rows

    def _rows(self, limited: bool, values: dict[str, Any]) -> list[M]:
        statement, rows = self._fetch(limited, values)
        compiler, (start, end) = statement.compiler, statement.fields
        found = []
        for row in rows:
            instance = statement.model.from_db(
                statement.db, statement.names, row[start:end], fetch_mode=statement.fetch_mode
            )
            for populator in statement.populators:
                populator.populate(row, instance)
            for name, column in compiler.annotation_col_map.items():
                setattr(instance, name, row[column])
            found.append(instance)
        return found

    def first(self, **values: Any) -> M | None:
        """The first row, or None."""
        return next(iter(self._rows(True, values)), None)

    def get(self, **values: Any) -> M:
        """The first row; raises the model's DoesNotExist when there is none (a statement naming one row)."""
        found = self.first(**values)
        if found is None:
            raise self._local.compiled[True].model.DoesNotExist
        return found

    def all(self, **values: Any) -> list[M]:
        return self._rows(False, values)

    def dicts(self, **values: Any) -> list[dict[str, Any]]:
        """The rows of a `values()` query, each a dict of its names."""
        statement, rows = self._fetch(False, values)
        names = statement.value_names
        assert names, "dicts() is for a values() query"
        return [dict(zip(names, row, strict=True)) for row in rows]


class Constant:
    """The rows of `build()`, a `values_list()` query that takes no values of its own: its SQL compiled once for each
    database and sent again as it is."""

    def __init__(self, build: Callable[[], QuerySet[Any]]) -> None:
        self.build = build
        self._compiled: dict[str, tuple[str, tuple[Any, ...]]] = {}

    def rows(self, using: str = "default") -> list[tuple[Any, ...]]:
        if using not in self._compiled:
            query = self.build().using(using).query
            self._compiled[using] = query.get_compiler(using=using).as_sql()
        sql, params = self._compiled[using]
        with connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()


class PreparedUpdate[M: Model]:
    """`build(**values).update(**changes)` (issue 56): its condition compiled once a thread, as `Prepared` compiles a
    SELECT's (each value of its type, never None, a parameter of its own), and its changes set as Django's UPDATE
    sets them: each value adapted by its field, a model instance as its key, None as a NULL parameter. For a
    condition on the model's own table (no join) and plain values (no expression such as F())."""

    def __init__(self, build: Callable[..., QuerySet[M]], **kinds: type) -> None:
        self.build, self.kinds = build, kinds
        self._local = threading.local()

    def _condition(self) -> tuple[type[Model], str, str, tuple[Any, ...], Places]:
        compiled = getattr(self._local, "condition", None)
        if compiled is None:
            marks = _marks(self.kinds)
            queryset = self.build(**marks)
            query = queryset.query
            if query.count_active_tables() > 1:  # a join (an unused one, as `fk=None` leaves, is no join)
                raise ValueError("PreparedUpdate takes a condition on its model's own table")
            where, params = query.get_compiler(using=queryset.db).compile(query.where)
            places = _places(marks, params, queryset.db)
            compiled = self._local.condition = (queryset.model, queryset.db, where, tuple(params), places)
        return compiled

    def bind(self, changes: dict[str, Any], **values: Any) -> Bound:
        """The UPDATE of `changes` to the rows of `values`, not sent."""
        model, db, where, params, places = self._condition()
        connection = connections[db]
        quote = connection.ops.quote_name
        sets, set_params = [], []
        for name, value in changes.items():
            field = model._meta.get_field(name)
            if not isinstance(field, Field):  # a reverse relation: nothing of this table to set
                raise ValueError(f"PreparedUpdate sets this table's columns, not {name}")
            if hasattr(value, "resolve_expression") or getattr(field, "get_placeholder_sql", None) is not None:
                raise ValueError(f"PreparedUpdate sets plain values of plain fields, not {name}={value!r}")
            if field.remote_field is not None and hasattr(value, "prepare_database_save"):
                value = value.prepare_database_save(field)
            sets.append(f"{quote(cast(str, field.column))} = %s")
            set_params.append(_prepared(field, value, connection))
        table = quote(model._meta.db_table)
        sql = f"UPDATE {table} SET {', '.join(sets)} WHERE ({where})"
        return Bound(sql, [*set_params, *_placed(params, places, values)])
