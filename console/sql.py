"""The SQL of the hot paths, where Django's way of sending a statement costs more than the statement.

- `update_together`: several writes in one round trip (issue 32): on PostgreSQL a statement's WITH clauses may write
  too, so UPDATEs Django builds can be sent as one statement.
- `Prepared`: a SELECT Django builds, compiled once a thread and sent again with other values (issue 56): the
  statements every API request sends (its token, the agent's live version), where building and compiling the query
  cost twice what running it does.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection, connections
from django.db.models import BooleanField, Model, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.query import get_related_populators
from django.db.models.sql import UpdateQuery
from django.db.models.sql.compiler import SQLCompiler


def update_sql(rows: QuerySet[Any], values: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """The SQL and parameters of `rows.update(**values)`, not sent."""
    query = rows.query.chain(UpdateQuery)
    assert isinstance(query, UpdateQuery)
    query.add_update_values(values)
    query.annotations = {}
    return query.get_compiler(rows.db).as_sql()


def update_together(rows: QuerySet[Any], values: dict[str, Any], *others: tuple[QuerySet[Any], dict[str, Any]]) -> int:
    """Each of the `others` updates, then `rows.update(**values)` when every other one wrote a row; how many rows
    `rows.update` wrote (the caller's transaction decides what a count it did not expect undoes). On PostgreSQL one
    statement: the others are its WITH clauses, and the main update's condition reads what they wrote, so they write
    (and lock their rows) before it touches one of its own: the rows are locked in the order given, whatever order
    the database would run WITH clauses in. Elsewhere one update after the other."""
    if connection.vendor != "postgresql" or not others:
        for other, changes in others:
            if not other.update(**changes):
                return 0
        return rows.update(**values)
    written = [update_sql(other, changes) for other, changes in others]
    after = [RawSQL(f"EXISTS (SELECT 1 FROM w{i})", (), output_field=BooleanField()) for i in range(len(others))]
    sql, params = update_sql(rows.filter(*after), values)
    clauses = ", ".join(f"w{index} AS ({other} RETURNING 1)" for index, (other, _) in enumerate(written))
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {clauses} {sql}", [*(p for _, more in written for p in more), *params])
        return int(cursor.rowcount)


@dataclass(frozen=True)
class _Compiled:
    """One thread's compiled statement: its SQL, its parameters with the places of the named values, and what turns
    a row into the model with its related objects (as Django's ModelIterable does)."""

    db: str
    sql: str
    params: tuple[Any, ...]
    places: dict[str, list[int]]
    compiler: SQLCompiler
    converters: dict[int, Any]
    fields: tuple[int, int]  # the main model's columns: row[start:end]
    names: list[str]
    populators: list[Any]
    fetch_mode: Any


class Prepared[M: Model]:
    """The first row of `build(**values)`, its SQL compiled once a thread (a thread keeps its own database connection,
    which the row's converters use). Each value must reach the SQL as a parameter unchanged: a str or an int
    compared as such (`filter(name=value)`), not one a lookup rewrites (`contains`). `first()` returns what
    `build(**values).first()` would without its ordering: a statement that names at most one row."""

    def __init__(self, build: Callable[..., QuerySet[M]], **kinds: type[str] | type[int]) -> None:
        self.build, self.kinds = build, kinds
        self._local = threading.local()

    def _marks(self) -> dict[str, str | int]:
        """A value for each name that no query holds otherwise, of the type its column wants (an int within 32 bits:
        Django finds no row for one out of its column's range, and leaves it out of the SQL)."""
        marks: dict[str, str | int] = {}
        for index, (name, kind) in enumerate(self.kinds.items()):
            marks[name] = f"\x1fprepared:{name}" if kind is str else -2_000_000_000 - index
        return marks

    def _compile(self) -> _Compiled:
        marks = self._marks()
        queryset = self.build(**marks)[:1]
        compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        places = {name: [i for i, param in enumerate(params) if param == mark] for name, mark in marks.items()}
        lost = [name for name, found in places.items() if not found]
        if lost:
            raise ValueError(f"the values {lost} do not reach the SQL unchanged: Prepared cannot place them")
        assert compiler.klass_info is not None and not compiler.has_extra_select
        selected = compiler.klass_info["select_fields"]
        start, end = selected[0], selected[-1] + 1
        fetch_mode = queryset._fetch_mode  # type: ignore[attr-defined]
        return _Compiled(
            db=queryset.db,
            sql=sql,
            params=tuple(params),
            places=places,
            compiler=compiler,
            converters=compiler.get_converters([column[0] for column in compiler.select[: compiler.col_count]]),
            fields=(start, end),
            names=[column[0].target.attname for column in compiler.select[start:end]],
            populators=get_related_populators(compiler.klass_info, compiler.select, queryset.db, fetch_mode),
            fetch_mode=fetch_mode,
        )

    def first(self, **values: str | int) -> M | None:
        compiled: _Compiled | None = getattr(self._local, "compiled", None)
        if compiled is None:
            compiled = self._local.compiled = self._compile()
        params = list(compiled.params)
        for name, places in compiled.places.items():
            for place in places:
                params[place] = values[name]
        compiler = compiled.compiler
        with connections[compiled.db].cursor() as cursor:
            cursor.execute(compiled.sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        if compiled.converters:
            [row] = compiler.apply_converters([row], compiled.converters)
        start, end = compiled.fields
        model = compiler.klass_info["model"]
        found: M = model.from_db(compiled.db, compiled.names, row[start:end], fetch_mode=compiled.fetch_mode)
        for populator in compiled.populators:
            populator.populate(row, found)
        for name, column in compiler.annotation_col_map.items():
            setattr(found, name, row[column])
        return found
