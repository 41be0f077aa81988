"""The Runs page: the runs with their filters, a row per session, and the Jobs panel of the lanes."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, F, Min, OuterRef, Q, QuerySet, Subquery, Window
from django.db.models.functions import RowNumber
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from agents.checkpoints import ForkOrigin
from agents.lane_limits import lane_limit
from agents.lanes import LANE_PATTERN
from agents.models import AWAITING, Agent, Run, RunStatus
from agents.queries import runs_matching, with_verdicts
from approvals.models import PendingRequest, RequestStatus
from console.filters import SUBMIT_ON_CHANGE, ListFilters
from console.humanize import duration
from console.models import Tenant
from console.tenancy import ConsoleRequest, role_required

FAILED_WINDOW = timedelta(hours=24)

RUNS_PER_PAGE = 50

# The runs a session's row unfolds on the list, newest first (the rest: the session's own list).
RUNS_PER_SESSION = 10


class RunFilterForm(ListFilters):
    """The filters of the run list, read from the query string; an invalid field is ignored."""

    status = forms.ChoiceField(
        required=False,
        choices=[("", "Any status"), *((value, label.lower()) for value, label in RunStatus.choices)],
        widget=forms.Select(attrs=SUBMIT_ON_CHANGE),
    )
    session = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"placeholder": "exact session id", "autocomplete": "off"}),
    )
    lane = forms.RegexField(
        regex=LANE_PATTERN,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "any lane", "autocomplete": "off", "size": 10}),
    )
    verdicts = forms.BooleanField(required=False, widget=forms.CheckboxInput(attrs=SUBMIT_ON_CHANGE))

    @property
    def one_session(self) -> bool:
        """A session was named: the list shows its runs one by one instead of a row per session."""
        self.is_valid()
        return bool(self.cleaned_data.get("session", "").strip())

    @property
    def picking(self) -> bool:
        """Some filter picks runs (a session's row then says how many of its runs were picked)."""
        self.is_valid()
        return any(value not in (None, "", False) for value in self.cleaned_data.values())

    def apply(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        self.is_valid()
        wanted = self.cleaned_data
        runs = runs_matching(
            runs,
            agent=wanted.get("agent"),
            status=wanted.get("status"),
            session=wanted.get("session"),
            lane=wanted.get("lane"),
            verdicts=True if wanted.get("verdicts") else None,
            created_from=wanted.get("date_from"),
            created_to=wanted.get("date_to"),
        )
        if wanted.get("status") in AWAITING:
            runs = runs.filter(Exists(_waiting()))  # still waiting, not answered since
        return runs


def _waiting() -> QuerySet[PendingRequest]:
    """The outer run's requests that still wait for an answer (a fork's copies are the fork's)."""
    return PendingRequest.objects.filter(
        run=OuterRef("pk"), session=OuterRef("session"), status=RequestStatus.PENDING, answered_in=None
    )


def with_afterwards(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` with what happened after each (SPEC section 6, honest states): whether it still waits, who
    answered its first answered request, and the run of its session that continued it."""
    answered = PendingRequest.objects.filter(run=OuterRef("pk"), answered_by__isnull=False).order_by("answered_at")
    continued = Run.objects.filter(previous_run=OuterRef("pk"), session=OuterRef("session")).order_by("created_at")
    return runs.annotate(
        still_waiting=Exists(_waiting()),
        answered_by_name=Subquery(answered.values("answered_by__username")[:1]),
        continued_in=Subquery(continued.values("id")[:1]),
    )


@dataclass
class RunRow:
    run: Run

    @property
    def summary(self) -> str:
        """The first line of the message; empty for a turn that only carried answers."""
        return (self.run.message or "").strip().split("\n", 1)[0]

    @property
    def duration(self) -> str:
        return duration(self.run.created_at, self.run.finished_at)

    @property
    def waited(self) -> bool:
        """It waited on requests that were answered or closed since (`with_afterwards` read it)."""
        return self.run.status in AWAITING and not getattr(self.run, "still_waiting", True)

    @property
    def forked_from(self) -> ForkOrigin | None:
        """Where the run's session was forked from, when `_shown` read it and it is a fork."""
        turn = getattr(self.run, "fork_turn", None)
        if turn is None or getattr(self.run, "fork_tenant", None) != self.run.tenant_id:
            return None
        return ForkOrigin(str(getattr(self.run, "fork_key", "")), turn, getattr(self.run, "fork_run", None))


@dataclass
class SessionRow(RunRow):
    """A session on the runs list, by its latest run (`run`: the state it is in now, whatever the filters):
    its number of turns, how many of its runs the filters picked and the newest of those (at most
    `RUNS_PER_SESSION`), and what its latest run still waits on."""

    turns: int = 1
    picked: int = 1
    runs: list[RunRow] = field(default_factory=list)
    waits_on: list[PendingRequest] = field(default_factory=list)

    @property
    def last_activity(self) -> datetime:
        return self.run.finished_at or self.run.created_at


def _shown(runs: QuerySet[Run]) -> QuerySet[Run]:
    """What a row of the list reads of a run: its agent, version, session and author, what happened after it,
    whether a policy gave a verdict, and where its session was forked from."""
    origin = "session__forked_from_checkpoint__"
    runs = runs.select_related("agent", "version", "session", "created_by").annotate(
        has_verdicts=Exists(with_verdicts()),
        fork_key=F(f"{origin}session__key"),
        fork_turn=F(f"{origin}number"),
        fork_run=F(f"{origin}run_id"),
        fork_tenant=F(f"{origin}tenant_id"),
    )
    return with_afterwards(runs)


def _count(runs: QuerySet[Run]) -> Subquery:
    """How many of `runs` belong to the outer run's session."""
    return Subquery(
        runs.filter(session=OuterRef("session")).order_by().values("session").annotate(n=Count("pk")).values("n")
    )


def session_rows(tenant: Tenant, picked: QuerySet[Run], page_number: str | None) -> tuple[Page, list[RunRow]]:
    """The list's page of rows: a session holding a picked run (by its newest picked run), or a picked run
    without a session; newest first. A fixed number of queries whatever the page holds."""
    newer = picked.filter(session=OuterRef("session")).filter(
        Q(created_at__gt=OuterRef("created_at")) | Q(created_at=OuterRef("created_at"), pk__gt=OuterRef("pk"))
    )
    latest = Run.objects.filter(session=OuterRef("session")).order_by("-created_at", "-pk").values("pk")[:1]
    rows = picked.filter(Q(session=None) | ~Exists(newer)).annotate(
        latest_id=Subquery(latest), turns=_count(Run.objects.all()), picked=_count(picked)
    )
    keys = rows.order_by("-created_at", "-pk").values("pk", "session_id", "latest_id", "turns", "picked")
    page = Paginator(keys, RUNS_PER_PAGE).get_page(page_number)
    shown = {
        run.pk: run
        for run in _shown(Run.objects.filter(tenant=tenant, pk__in=[r["latest_id"] or r["pk"] for r in page]))
    }
    sessions = {
        r["session_id"]: SessionRow(shown[r["latest_id"]], r["turns"], r["picked"]) for r in page if r["session_id"]
    }
    unfolded = [session_id for session_id, row in sessions.items() if row.turns > 1]
    if unfolded:
        order = [F("created_at").desc(), F("pk").desc()]
        newest = _shown(picked.filter(session__in=unfolded)).annotate(
            rank=Window(RowNumber(), partition_by=[F("session")], order_by=order)
        )
        for run in newest.filter(rank__lte=RUNS_PER_SESSION).order_by("-created_at", "-pk"):
            assert run.session_id is not None  # `unfolded` holds sessions only
            sessions[run.session_id].runs.append(RunRow(run))
    waiting = [row.run.pk for row in sessions.values() if getattr(row.run, "still_waiting", False)]
    if waiting:
        still = PendingRequest.objects.filter(
            run__in=waiting, session=F("run__session"), status=RequestStatus.PENDING, answered_in=None
        )
        for pending in still.select_related("claimed_by").order_by("opened_at", "pk"):
            sessions[pending.session_id].waits_on.append(pending)
    return page, [sessions[r["session_id"]] if r["session_id"] else RunRow(shown[r["pk"]]) for r in page]


@role_required("reader")
@require_GET
@vary_on_headers("HX-Request")
def run_list(request: ConsoleRequest) -> HttpResponse:
    """The runs, a row per session (SPEC section 6); with a session named, that session's runs one by one."""
    tenant = request.tenant
    filters = RunFilterForm(request.GET, Agent.objects.names_in(tenant))
    picked = filters.apply(Run.objects.filter(tenant=tenant))
    if filters.one_session:
        page = Paginator(_shown(picked).order_by("-created_at", "-pk"), RUNS_PER_PAGE).get_page(request.GET.get("page"))
        rows = [RunRow(run) for run in page]
    else:
        page, rows = session_rows(tenant, picked, request.GET.get("page"))
    context = {"filters": filters, "page": page, "rows": rows, **jobs_context(tenant)}
    partial = request.htmx and not request.htmx.history_restore_request
    return render(request, "agents/run_list.html#runs-table" if partial else "agents/run_list.html", context)


@dataclass
class LaneJobs:
    """The Jobs view of one lane: what waits, what runs (against the lane's limit), what failed lately."""

    lane: str
    queued: int = 0
    running: int = 0
    failed: int = 0
    waiting_since: datetime | None = None

    @property
    def limit(self) -> int:
        return lane_limit(self.lane)


def jobs_context(tenant: Any) -> dict[str, Any]:
    """Queued and running runs by lane, and the runs failed in the last 24 hours (one query); the
    panel refreshes itself while anything waits or runs."""
    since = timezone.now() - FAILED_WINDOW
    active = Run.objects.filter(tenant=tenant, status__in=(RunStatus.QUEUED, RunStatus.RUNNING))
    failed = Run.objects.filter(tenant=tenant, status=RunStatus.FAILED, created_at__gte=since)
    rows = (active | failed).values("lane", "status").annotate(n=Count("id"), oldest=Min("created_at"))
    lanes: dict[str, LaneJobs] = {}
    for row in rows:
        lane = lanes.setdefault(row["lane"], LaneJobs(row["lane"]))
        setattr(lane, row["status"], row["n"])
        if row["status"] == RunStatus.QUEUED:
            lane.waiting_since = row["oldest"]
    jobs = sorted(lanes.values(), key=lambda lane: lane.lane)
    return {"jobs": jobs, "jobs_active": any(lane.queued or lane.running for lane in jobs)}


@role_required("reader")
@require_GET
def jobs_panel(request: ConsoleRequest) -> HttpResponse:
    """The Jobs panel alone: the Runs page refreshes it while runs wait or run."""
    context = jobs_context(request.tenant)
    return render(request, "agents/run_list.html#jobs", context)
