"""Several writes in one round trip to the database, for the hot paths of a turn (issue 32): on PostgreSQL a
statement's WITH clauses may write too, so UPDATEs Django builds can be sent as one statement."""

from typing import Any

from django.db import connection
from django.db.models import QuerySet
from django.db.models.sql import UpdateQuery


def update_sql(rows: QuerySet[Any], values: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """The SQL and parameters of `rows.update(**values)`, not sent."""
    query = rows.query.chain(UpdateQuery)
    assert isinstance(query, UpdateQuery)
    query.add_update_values(values)
    query.annotations = {}
    return query.get_compiler(rows.db).as_sql()


def update_together(rows: QuerySet[Any], values: dict[str, Any], *others: tuple[QuerySet[Any], dict[str, Any]]) -> int:
    """`rows.update(**values)` and each of the `others` updates, in one statement on PostgreSQL (the others as its
    WITH clauses: all run, none sees another's write, so they must write different rows), one after the other
    elsewhere; how many rows `rows.update` wrote. The caller's transaction decides what a count it did not expect
    undoes."""
    if connection.vendor != "postgresql" or not others:
        for other, changes in others:
            other.update(**changes)
        return rows.update(**values)
    sql, params = update_sql(rows, values)
    written = [update_sql(other, changes) for other, changes in others]
    clauses = ", ".join(f"w{index} AS ({other})" for index, (other, _) in enumerate(written))
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {clauses} {sql}", [*(p for _, more in written for p in more), *params])
        return int(cursor.rowcount)
