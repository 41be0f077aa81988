"""Queries the console pages and the API share, so that a filter is written once: `runs_matching` (the runs page
and `GET /api/runs`) and `picked`, the filters of the inbox and the rules too."""

from datetime import date
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from agents.models import Event, Run
from agents.payloads import EventType


def picked[Rows: QuerySet[Any]](rows: Rows, **lookups: Any) -> Rows:
    """`rows` filtered by each lookup given a value; an empty one (None, "") picks any."""
    return rows.filter(**{lookup: value for lookup, value in lookups.items() if value})


def with_verdicts() -> QuerySet[Event]:
    """The `policy.verdict` events of the outer run (a verdict other than allow)."""
    return Event.objects.filter(run=OuterRef("pk"), type=EventType.POLICY_VERDICT)


def runs_matching(
    runs: QuerySet[Run],
    *,
    agent: str | None = None,
    status: str | None = None,
    session: str | None = None,
    lane: str | None = None,
    verdicts: bool | None = None,
    created_from: date | None = None,
    created_to: date | None = None,
) -> QuerySet[Run]:
    """`runs` narrowed to those the filters pick; an empty filter picks any. `verdicts`: only the runs where a
    policy gave a verdict other than allow (False: only the others); `created_from`/`created_to`: days, both
    included."""
    runs = picked(
        runs,
        agent__name=agent,
        status=status,
        session__key=session,
        lane=lane,
        created_at__date__gte=created_from,
        created_at__date__lte=created_to,
    )
    if verdicts is not None:
        runs = runs.filter(Exists(with_verdicts())) if verdicts else runs.exclude(Exists(with_verdicts()))
    return runs
