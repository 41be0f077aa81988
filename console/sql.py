"""Several writes in one round trip to the database, for the hot paths of a turn (issue 32): on PostgreSQL a
statement's WITH clauses may write too, so UPDATEs Django builds can be sent as one statement."""

from typing import Any

from django.db import connection
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.sql import UpdateQuery


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
