"""Queries the console pages and the API share, so that a filter is written once (the runs page and
`GET /api/runs`)."""

from datetime import date

from django.db.models import Exists, OuterRef, QuerySet

from agents.models import Event, Run
from agents.payloads import EventType


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
    if agent:
        runs = runs.filter(agent__name=agent)
    if status:
        runs = runs.filter(status=status)
    if session:
        runs = runs.filter(session__key=session)
    if lane:
        runs = runs.filter(lane=lane)
    if verdicts is not None:
        runs = runs.filter(Exists(with_verdicts())) if verdicts else runs.exclude(Exists(with_verdicts()))
    if created_from:
        runs = runs.filter(created_at__date__gte=created_from)
    if created_to:
        runs = runs.filter(created_at__date__lte=created_to)
    return runs
