"""The dashboard (SPEC section 6), the first page: a newcomer's first steps, the oldest waiting requests, recent
failed and blocked runs, and the last 14 days of requests and decisions as an SVG chart drawn on the server
(templates/console/dashboard.html draws what `chart()` measures; no script, no library).

Every number is read by a bounded number of queries, whatever the tenant's history: the chart reads the
requests opened per day in one query and, in a second, only the decisions that are a day's median or 90th
percentile (window functions, on SQLite and PostgreSQL alike).
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Count, DurationField, Exists, ExpressionWrapper, F, Q, QuerySet, Window
from django.db.models.functions import RowNumber, TruncDate
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.models import Agent, AgentVersion, Run, RunStatus
from agents.views.trial_pages import TRIAL_SESSIONS
from approvals.models import PendingRequest, Rule, Via, mark_answerable
from console.humanize import duration
from console.management.commands.seed_demo import HISTORY_SESSIONS
from console.models import ApiToken, Membership, Tenant
from console.tenancy import ConsoleRequest, role_required

AGENTS_SHOWN = 8
WAITING_SHOWN = 6
TROUBLE_SHOWN = 8
TROUBLE_WINDOW = timedelta(days=7)
CHART_DAYS = 14


@role_required("reader")
@require_GET
def dashboard(request: ConsoleRequest) -> HttpResponse:
    """The first look: what waits longest, what went wrong lately, and the last 14 days as a chart. For htmx,
    the waiting list alone, which the page asks for again on every push."""
    if request.htmx:
        return render(request, "console/dashboard.html#waiting", {"waiting": oldest_waiting(request.membership)})
    tenant, now = request.tenant, timezone.now()
    agents = list(Agent.objects.live().filter(tenant=tenant).order_by("name")[: AGENTS_SHOWN + 1])
    chart_days = days(tenant, timezone.localdate(now))
    done = progress(tenant) if agents else {}
    steps = first_steps(done) if agents else []
    # The first steps are an operator's (a reader can do none of them), until each is done or the member hid them.
    shown = request.membership.allows("operator") and request.membership.first_steps_hidden_at is None
    context = {
        "agents": agents[:AGENTS_SHOWN],
        "more_agents": len(agents) > AGENTS_SHOWN,
        "has_runs": done.get("ran", False),
        "first_steps": steps if shown and not all(step.done for step in steps) else [],
        "steps_done": sum(step.done for step in steps),
        "waiting": oldest_waiting(request.membership),
        "trouble": recent_trouble(tenant, now),
        "days": chart_days,
        "chart": chart(chart_days),
    }
    return render(request, "console/dashboard.html", context)


@role_required("reader")
@require_POST
def hide_first_steps(request: ConsoleRequest) -> HttpResponse:
    """The member hides the first-steps panel for good (their membership keeps it: another tenant's stays)."""
    request.membership.hide_first_steps()
    return redirect("dashboard")


@dataclass(frozen=True)
class Step:
    """One of a newcomer's first steps: what to do, where it is done (`action` names the link), and whether the
    tenant has done it; `next` marks the first one not done, the one the panel offers as its button. `guide` is a
    page of Airlock's source that says more (the console does not serve docs/), `more` other links (label, url)."""

    title: str
    how: str
    url: str
    action: str
    done: bool
    next: bool = False
    guide: str = ""
    more: tuple[tuple[str, str], ...] = ()


def progress(tenant: Tenant) -> dict[str, bool]:
    """What the tenant has done of its first steps, read in one query, with whether any agent ran at all (`ran`).
    The demo's seeded history (`seed_demo`: sessions `demo-history-N`, answered by its operator in the inbox, and
    policies given with the agents it creates or in versions noted `seed_demo:`) counts for nothing: each step is
    done by a member. Tried: a turn in a session of the trial page. Answered: a request answered in the inbox.
    A rule: a remembered rule (revoked or not), or a policy saved in an agent's later version. Connected: an API
    token of a member was used (an external agent's requests come with one, docs/external-agents.md)."""
    runs = Run.objects.filter(tenant=tenant)
    answered = PendingRequest.objects.filter(tenant=tenant, answered_via=Via.INBOX)
    policies = AgentVersion.objects.filter(agent__tenant=tenant, number__gt=1).exclude(content__hooks=None)
    done = Tenant.objects.filter(pk=tenant.pk).values(
        ran=Exists(runs),
        tried=Exists(runs.filter(session__key__startswith=TRIAL_SESSIONS)),
        answered=Exists(answered.exclude(session__key__startswith=HISTORY_SESSIONS)),
        rule=Exists(Rule.objects.filter(tenant=tenant)),
        policy=Exists(policies.exclude(note__startswith="seed_demo:")),
        connected=Exists(ApiToken.objects.filter(membership__tenant=tenant, last_used_at__isnull=False)),
    )
    return {name: bool(value) for name, value in done.get().items()}


def first_steps(done: dict[str, bool]) -> list[Step]:
    """The four first steps, in the order a newcomer takes them, each ticked from `progress()`."""
    steps = [
        Step(
            "Try an agent",
            "Talk to an agent and see what it asks before it acts.",
            reverse("trial"),
            "Try one in a trial run",
            done["tried"],
        ),
        Step(
            "Answer in the inbox",
            "Approve or deny what an agent waits for; the audit keeps who answered and why.",
            reverse("inbox"),
            "Open the inbox",
            done["answered"],
        ),
        Step(
            "Write a rule",
            "Answer “Always” in the inbox, add a rule on the Rules page, or give an agent a policy.",
            reverse("rules"),
            "Open the rules",
            done["rule"] or done["policy"],
        ),
        Step(
            "Connect an external agent",
            "An agent that runs elsewhere asks here before it acts, with an API token.",
            reverse("tokens"),
            "Create a token",
            done["connected"],
            guide="docs/external-agents.md",
            more=(("API reference", reverse("api:openapi-view")),),
        ),
    ]
    upcoming = next((n for n, step in enumerate(steps) if not step.done), None)
    return [replace(step, next=True) if n == upcoming else step for n, step in enumerate(steps)]


def oldest_waiting(membership: Membership) -> list[PendingRequest]:
    """The tenant's oldest open requests (the first cards of the inbox), each marked whether the member
    may answer it."""
    requests = list(
        PendingRequest.objects.open()
        .filter(tenant_id=membership.tenant_id)
        .select_related("agent", "claimed_by")
        .order_by("opened_at", "id")[:WAITING_SHOWN]
    )
    mark_answerable(membership, requests)
    return requests


def recent_trouble(tenant: Tenant, now: datetime) -> list[Run]:
    """The tenant's runs that failed or were blocked by a policy in the last seven days, newest first."""
    runs = Run.objects.filter(
        tenant=tenant, status__in=(RunStatus.FAILED, RunStatus.BLOCKED), created_at__gte=now - TROUBLE_WINDOW
    )
    return list(runs.select_related("agent").order_by("-created_at", "-pk")[:TROUBLE_SHOWN])


@dataclass
class Day:
    """One day of the chart: the requests opened that day, and how long the decisions made that day took."""

    day: date
    opened: int = 0
    decided: int = 0
    median: timedelta | None = None
    p90: timedelta | None = None

    @property
    def median_text(self) -> str:
        return _spoken(self.median)

    @property
    def p90_text(self) -> str:
        return _spoken(self.p90)


def _spoken(span: timedelta | None) -> str:
    """A decision time as the run pages write durations ("2 h 10 min"); empty when there is none."""
    anchor = datetime.min  # duration() measures between two times
    return duration(anchor, anchor + span) if span is not None else ""


def days(tenant: Tenant, today: date) -> list[Day]:
    """The last `CHART_DAYS` days up to `today` (the current time zone's days), oldest first; a day with
    nothing is there with zeros. Two queries."""
    zone = timezone.get_current_timezone()
    first = today - timedelta(days=CHART_DAYS - 1)
    since = timezone.make_aware(datetime.combine(first, datetime.min.time()), zone)
    by_day = {first + timedelta(days=n): Day(first + timedelta(days=n)) for n in range(CHART_DAYS)}
    requests = PendingRequest.objects.filter(tenant=tenant)
    opened = requests.filter(opened_at__gte=since).values(day=TruncDate("opened_at", tzinfo=zone))
    for row in opened.annotate(n=Count("id")).order_by():
        if row["day"] in by_day:
            by_day[row["day"]].opened = row["n"]
    picks: dict[date, dict[str, list[timedelta]]] = {}
    for pick in _percentile_rows(requests.filter(answered_at__gte=since), zone):
        if pick["day"] not in by_day:
            continue
        by_day[pick["day"]].decided = pick["n"]
        at = picks.setdefault(pick["day"], {"median": [], "p90": []})
        if 0 <= pick["median_pick"] <= 2:
            at["median"].append(pick["waited"])
        if 0 <= pick["p90_pick"] <= 9:
            at["p90"].append(pick["waited"])
    for day, at in picks.items():
        by_day[day].median = sum(at["median"], timedelta()) / len(at["median"])
        by_day[day].p90 = at["p90"][0]
    return list(by_day.values())


def _percentile_rows(decided: QuerySet[PendingRequest], zone: Any) -> Iterable[Mapping[str, Any]]:
    """Of each day's decisions (answered_at - opened_at, by the day answered), only the rows that are its
    median (the middle one, or the two middle ones) or its 90th percentile (nearest rank), with the day's
    count: for a day of n decisions ranked 1..n, rank r is a median row when 2r - n is 0, 1 or 2, and the
    90th percentile when r = ceil(0.9 n), i.e. 0 <= 10r - 9n <= 9."""
    waited = ExpressionWrapper(F("answered_at") - F("opened_at"), output_field=DurationField())
    day = TruncDate("answered_at", tzinfo=zone)
    ranked = decided.annotate(
        day=day,
        waited=waited,
        rank=Window(RowNumber(), partition_by=[day], order_by=[waited.asc(), F("id").asc()]),
        n=Window(Count("id"), partition_by=[day]),
    ).annotate(median_pick=2 * F("rank") - F("n"), p90_pick=10 * F("rank") - 9 * F("n"))
    wanted = Q(median_pick__gte=0, median_pick__lte=2) | Q(p90_pick__gte=0, p90_pick__lte=9)
    return ranked.filter(wanted).values("day", "waited", "n", "median_pick", "p90_pick").order_by()


# The chart's drawing area, in the SVG's own units (the viewBox; the browser scales it to the page).
WIDTH, HEIGHT = 720, 270
LEFT, RIGHT, TOP, BOTTOM = 46, 58, 14, 40
PLOT_WIDTH, PLOT_HEIGHT = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
# A duration axis counts in the largest unit that keeps its longest value at least 2 (87 minutes, not 1.45 h).
UNITS = (("hours", 3600), ("minutes", 60), ("seconds", 1))


@dataclass
class Tick:
    y: float
    label: str


@dataclass
class Column:
    day: Day
    x: float
    bar_x: float
    bar_y: float
    bar_height: float
    label: str
    odd: bool  # every other day label, hidden on a narrow screen


@dataclass
class Line:
    """A decision-time line: a path through the days that have a value, a new segment after each gap,
    and its points (a day between two gaps has no segment to show it)."""

    path: str = ""
    points: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class Chart:
    columns: list[Column]
    bar_width: float
    count_ticks: list[Tick]
    time_ticks: list[Tick]
    time_unit: str
    median: Line
    p90: Line
    empty: bool = False  # nothing opened nor decided in the whole period: no chart to draw
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    middle: int = TOP + PLOT_HEIGHT // 2  # where the axis titles are centred


def chart(chart_days: list[Day]) -> Chart:
    """Where each bar, point and tick goes: bars of requests opened (left axis), lines of the median and
    90th-percentile decision time (right axis)."""
    slot = PLOT_WIDTH / len(chart_days)
    bar_width = round(slot * 0.6, 1)
    count_top, count_step = _scale(max(d.opened for d in chart_days))
    longest = max((d.p90 or timedelta()).total_seconds() for d in chart_days)
    unit, per = next(((u, s) for u, s in UNITS if longest >= 2 * s), UNITS[-1])
    time_top, time_step = _scale(longest / per)
    columns = []
    for n, day in enumerate(chart_days):
        x = round(LEFT + slot * (n + 0.5), 1)
        bar_y = _y(day.opened, count_top)
        # The month is named where the chart starts and where a new month begins; other days by number.
        label = f"{day.day.day} {day.day:%b}" if n == 0 or day.day.day == 1 else str(day.day.day)
        columns.append(
            Column(day, x, round(x - bar_width / 2, 1), bar_y, round(TOP + PLOT_HEIGHT - bar_y, 1), label, n % 2 == 1)
        )

    def line(values: list[timedelta | None]) -> Line:
        drawn, joined = Line(), False
        for column, value in zip(columns, values, strict=True):
            if value is None:
                joined = False
                continue
            point = (column.x, _y(value.total_seconds() / per, time_top))
            drawn.points.append(point)
            drawn.path += f"{' L' if joined else ' M'}{point[0]},{point[1]}"
            joined = True
        drawn.path = drawn.path.strip()
        return drawn

    return Chart(
        columns=columns,
        bar_width=bar_width,
        count_ticks=[Tick(_y(v, count_top), _number(v)) for v in _steps(count_top, count_step)],
        time_ticks=[Tick(_y(v, time_top), _number(v)) for v in _steps(time_top, time_step)],
        time_unit=unit,
        median=line([d.median for d in chart_days]),
        p90=line([d.p90 for d in chart_days]),
        empty=not any(d.opened or d.decided for d in chart_days),
    )


def _y(value: float, top: float) -> float:
    return round(TOP + PLOT_HEIGHT * (1 - value / top), 1)


def _scale(largest: float) -> tuple[float, float]:
    """A top value and step for an axis showing 0..`largest` in about four steps of 1, 2 or 5 times a power of ten."""
    if largest <= 0:
        return 4, 1
    rough = largest / 4
    power = 10 ** math.floor(math.log10(rough))
    step = next(s * power for s in (1, 2, 5, 10) if s * power >= rough)
    if step < 1 and largest >= 1:
        step = 1  # whole steps from 1 up: 0, 1, 2 requests, never 0.5
    return step * math.ceil(largest / step), step


def _steps(top: float, step: float) -> list[float]:
    return [step * n for n in range(round(top / step) + 1)]


def _number(value: float) -> str:
    return f"{value:g}"
