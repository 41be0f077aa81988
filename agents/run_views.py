"""Console pages for run history: the list with filters and a run's detail with its timeline."""

import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, F, Min, OuterRef, Q, QuerySet, Subquery, Window
from django.db.models.functions import RowNumber
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from agents import actions, queue
from agents.checkpoints import ForkOrigin, fork_origin
from agents.events import EventType
from agents.getters import get_run_for
from agents.lanes import LANE_PATTERN
from agents.models import AWAITING, Agent, Checkpoint, Event, Run, RunStatus, Session
from agents.policies import INTERCEPTION_POINTS, Point
from agents.prepare import RunRejected
from agents.queries import runs_matching
from approvals.models import TERMINAL, PendingRequest, RequestStatus
from console.filters import SUBMIT_ON_CHANGE, ListFilters
from console.humanize import duration
from console.models import Tenant
from console.tenancy import ConsoleRequest, role_required

FAILED_WINDOW = timedelta(hours=24)

RUNS_PER_PAGE = 50

# The runs a session's row unfolds on the list, newest first (the rest: the session's own list).
RUNS_PER_SESSION = 10

# What the run page and its actions read of a run.
RUN_RELATED = ("agent", "version", "session", "created_by", "previous_run")


class RunFilters(ListFilters):
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


def _verdicts() -> QuerySet[Event]:
    """The `policy.verdict` events of the outer run (a verdict other than allow)."""
    return Event.objects.filter(run=OuterRef("pk"), type=EventType.POLICY_VERDICT)


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
        has_verdicts=Exists(_verdicts()),
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
    filters = RunFilters(request.GET, Agent.objects.names_in(tenant))
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
        return queue.lane_limit(self.lane)


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


@role_required("operator")
@require_POST
def run_cancel(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_run_for(request, run_id, *RUN_RELATED)
    was = run.get_status_display().lower()
    try:
        outcome = actions.cancel_run(request.membership, request.user, run)
    except RunRejected as rejected:
        messages.error(request, rejected.detail)
        return redirect("run", run_id=run.id)
    if outcome is None:
        messages.error(request, f"The run has finished ({was}) and waits on nothing; nothing to cancel.")
    elif outcome == "cancelling":
        messages.info(request, "Cancelling: the turn stops within a few seconds.")
    elif was == RunStatus.QUEUED:
        messages.success(request, "Cancelled the queued run.")
    else:
        messages.success(request, "Cancelled the run: its open requests are closed.")
    return redirect("run", run_id=run.id)


@role_required("admin")
@require_POST
def run_replay(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    """Replay the run (SPEC section 10) on the version picked (its own by default), queued; to the new run."""
    original = get_run_for(request, run_id, "tenant", "agent", "version__agent")
    picked = request.POST.get("version", "").strip()
    if picked and not (picked.isascii() and picked.isdigit() and len(picked) <= 9):
        messages.error(request, "Pick one of the agent's versions.")
        return redirect("run", run_id=original.id)
    try:
        replay = actions.replay_run(request.user, original, int(picked) if picked else None, queued=True)
    except RunRejected as rejected:
        messages.error(request, rejected.detail)
        return redirect("run", run_id=original.id)
    messages.success(request, f"Replaying the run's message on version {replay.version}.")
    if replay.omitted_documents:
        names = ", ".join(str(d["name"]) for d in replay.omitted_documents)
        messages.info(request, f"This run is older than kept documents; replayed without: {names}.")
    return redirect("run", run_id=replay.run.id)


@role_required("operator")
@require_POST
def run_fork(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    """Fork the run's session from this turn (SPEC section 9, without an answer): a new session whose
    conversation is the one the turn's checkpoint holds, with copies of the requests open there; the page goes
    on in it on the trial page, where the next message continues from that point. The original is untouched."""
    run = get_run_for(request, run_id, "agent")
    try:
        fork = actions.fork_session(run)
    except actions.ForkRefused as refused:
        messages.error(request, refused.detail)
        return redirect("run", run_id=run.id)
    messages.success(request, f"Forked at turn {fork.checkpoint.number}: the next message continues from there.")
    return redirect(f"{reverse('trial')}?{urlencode({'agent': run.agent.name, 'session': fork.session.key})}")


def replay_of(run: Run, events: list[Event]) -> Run | None:
    """The run this one replays (`replayOf` in its `run.started`), when it is one, of the same tenant."""
    started = next((event for event in events if event.type == EventType.RUN_STARTED), None)
    original_id = (started.data or {}).get("replayOf") if started is not None else None
    if not original_id:
        return None
    return Run.objects.filter(tenant=run.tenant_id, pk=original_id).select_related("version").first()


def pretty(value: Any) -> str:
    """A JSON value for reading: strings as they are, anything else indented JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


VERDICT_VERBS = {"deny": "denied", "transform": "transformed", "escalate": "escalated", "warn": "warned about"}
SHADOW_VERBS = {"deny": "would have denied", "transform": "would have transformed", "escalate": "would have escalated"}


def _point(name: str) -> Point:
    """The interception point `name`; one this version does not know (an old event's) is about nothing."""
    return INTERCEPTION_POINTS.get(name) or Point(name, "", "recorded")


@dataclass
class PolicyVerdict:
    """A `policy.verdict` event as a sentence, with the later event it led to (the first that fits, of the same
    call when the verdict names one): the denial, the approval request, the call that ran, the message recorded."""

    data: dict[str, Any]
    follower: Event | None = None

    @property
    def decision(self) -> str:
        return str(self.data.get("decision"))

    @property
    def enforced(self) -> bool:
        return bool(self.data.get("enforced", True))

    @property
    def sentence(self) -> SafeString:
        """The verdict in words, as in: Policy mail-guard denied send_email at pre_tool_call (the page adds
        the message)."""
        data, follower = self.data, self.follower
        binding = data.get("binding")
        who = format_html("Policy <strong>{}</strong>", binding) if binding else format_html("A policy")
        verbs = VERDICT_VERBS if self.enforced else {**VERDICT_VERBS, **SHADOW_VERBS}
        point = str(data.get("point"))
        tool = data.get("toolName") or (_request_view(follower).get("toolName") if follower is not None else None)
        target = _point(point).about
        if "{tool}" in target:
            before, _, after = target.partition("{tool}")
            named = format_html("<code>{}</code>", tool) if tool else "a tool call"
            target = format_html("{}{}{}", before, named, after)
        return format_html("{} {} {} at <code>{}</code>", who, verbs.get(self.decision, self.decision), target, point)

    @property
    def after(self) -> tuple[str, str] | None:
        """For a transform: what went on (label, readable value), from the event that carries it. The
        content before is not stored anywhere (a redaction's before is the secret): no diff is shown."""
        point = str(self.data.get("point"))
        follower = self.follower
        carried_by = _point(point).carried_by
        if self.decision != "transform" or follower is None or follower.type not in carried_by:
            return None
        key, label = carried_by[follower.type]
        data = _request_view(follower)
        if key not in data:
            return None
        if not self.enforced:
            label += " (unchanged: shadow mode)"
        if key == "result" and isinstance(data[key], dict):
            return label, str(data[key].get("detailedContent") or data[key].get("content"))
        return label, pretty(data[key])

    def find_follower(self, later: list["TimelineEntry"], claimed: set[int]) -> None:
        """The first later event, not already another verdict's, that shows what this verdict did."""
        point, decision, enforced = self.data.get("point"), self.decision, self.enforced
        for entry in later:
            event = entry.event
            if event.sequence in claimed or not isinstance(event.data, dict):
                continue
            if self._follows(event, point, decision if enforced else "allow"):
                claimed.add(event.sequence)
                self.follower = event
                return

    def _follows(self, event: Event, point: Any, decision: str) -> bool:
        data, kind = _request_view(event), event.type
        call_id = self.data.get("toolCallId")
        if call_id is not None and data.get("toolCallId") not in (None, call_id):
            return False  # a verdict at a tool point names its call: another call's event is not its follower
        at = _point(str(point))
        if decision == "escalate" and at.liftable:
            # The request it opened: of its call (checked above), or the held answer's (`hook`) at `output`.
            return kind == EventType.PERMISSION_REQUESTED and (at.tool_call or data.get("kind") == "hook")
        if at.deny == "denies_call" and decision == "deny":
            result = data.get("result") if kind == EventType.PERMISSION_COMPLETED else None
            if not isinstance(result, dict):
                return False
            said = self.data.get("message") or self.data.get("reason")
            return result.get("kind") == "denied-by-permission-request-hook" and result.get("message") == said
        return kind in at.carried_by


def _request_view(event: Event) -> dict[str, Any]:
    """An event's data with a `permission.requested`'s request (its call, tool, arguments, policy) at the top,
    as the other events carry them."""
    data = event.data if isinstance(event.data, dict) else {}
    asked = data.get("permissionRequest")
    return {**data, **asked} if isinstance(asked, dict) else data


@dataclass
class TimelineEntry:
    """A stored event and its structured values already written as readable JSON, by data key."""

    event: Event
    pretty: dict[str, str] = field(default_factory=dict)
    verdict: PolicyVerdict | None = None
    # A sub-agent's event: the sub-agent's name (the page nests it under the call that runs it).
    subagent: str | None = None
    # The tool an event about a call is of (the SDK's completions name only the call).
    tool: str | None = None
    # A request's policy escalation (`{binding, reason, message}` of the request it announces), if it is one.
    policy: dict[str, Any] | None = None
    # The time since the event before (the first: since the run was created), as "+1.2 s".
    since: str = ""

    @classmethod
    def of(cls, event: Event) -> "TimelineEntry":
        data = _request_view(event) if isinstance(event.data, dict) else {"value": event.data}
        shown = {key: pretty(value) for key, value in data.items() if value is not None}
        shown["everything"] = pretty(event.data)
        return cls(event, shown)

    @property
    def data(self) -> Any:
        return _request_view(self.event) if isinstance(self.event.data, dict) else self.event.data

    @property
    def category(self) -> str:
        """The CSS family of the event: its type up to the first dot (`tool`, `permission`, ...)."""
        return self.event.type.split(".", 1)[0].replace("_", "-")


def call_names(events: list[Event]) -> dict[tuple[str, str], str]:
    """The tools of the calls the events ask about or start, by (`agentId`, call id)."""
    names: dict[tuple[str, str], str] = {}
    for event in events:
        data = _request_view(event) if isinstance(event.data, dict) else {}
        if data.get("toolCallId") and data.get("toolName"):  # a start, a request, an answer naming its call
            names[(event.agent_id, str(data["toolCallId"]))] = str(data["toolName"])
    return names


def subagent_names(events: list[Event]) -> dict[str, str]:
    """The sub-agents the events start, by the `agentId` their events carry: the id of the call that started one
    (under a sub-agent, after its own id and a slash)."""
    names: dict[str, str] = {}
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == EventType.SUBAGENT_STARTED:
            call = str(data.get("toolCallId"))
            names[f"{event.agent_id}/{call}" if event.agent_id else call] = str(data.get("agentName"))
    return names


def timeline(
    events: list[Event],
    since: datetime,
    names: dict[str, str] | None = None,
    calls: dict[tuple[str, str], str] | None = None,
    policies: dict[str, dict[str, Any]] | None = None,
) -> list[TimelineEntry]:
    """A run's stored events for the page, each with the time since the one before (the first: since `since`);
    each policy verdict is paired with the event it led to. `names` and `calls`: the sub-agents and the calls of
    the session's other runs shown (a continuation goes on with what the run before started or asked); `policies`:
    the escalations of the session's requests, by request id."""
    entries = [TimelineEntry.of(event) for event in events]
    calls = {**(calls or {}), **call_names(events)}
    requests: dict[str, str] = {}  # a request's id -> its call's tool, for the completions that name only it
    for entry in entries:
        data = entry.data if isinstance(entry.data, dict) else {}
        call = data.get("toolCallId")
        entry.tool = calls.get((entry.event.agent_id, str(call))) if call else None
        if entry.event.type == EventType.PERMISSION_REQUESTED:
            entry.policy = (policies or {}).get(str(data.get("requestId")))
        if data.get("requestId") and entry.tool:
            requests[str(data["requestId"])] = entry.tool
        elif data.get("requestId"):
            entry.tool = requests.get(str(data["requestId"]))
    for entry in entries:
        entry.since = f"+{duration(since, entry.event.timestamp)}"
        since = max(since, entry.event.timestamp)
    names = {**(names or {}), **subagent_names(events)}
    for entry in entries:
        if entry.event.agent_id:
            # An id from before sub-agents were named by their call began with the sub-agent's name.
            entry.subagent = names.get(entry.event.agent_id) or entry.event.agent_id.rsplit("-", 1)[0]
    claimed: set[int] = set()
    for index, entry in enumerate(entries):
        if entry.event.type == EventType.POLICY_VERDICT and isinstance(entry.event.data, dict):
            entry.verdict = PolicyVerdict(entry.event.data)
            entry.verdict.find_follower(entries[index + 1 :], claimed)
    return entries


@dataclass
class Gap:
    """The time between two turns of a session: a wait for people when the earlier turn asked (`who` answered,
    or what closed its requests), else the time before the next message."""

    took: str
    waited: bool
    who: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    # The session's last turn still waits: `took` runs until now.
    still: bool = False


@dataclass
class SessionTurn:
    """One turn of a session on the run page's timeline: its run (with the checkpoint its end recorded, none
    while it waits in the queue or runs, or without a session), its number, the requests it opened, the forks
    made at its checkpoint, its events (None: too far from the run viewed, read on its own page) and the gap
    before it."""

    run: Run
    number: int = 1
    viewed: bool = False
    asked: list[PendingRequest] = field(default_factory=list)
    # Sessions forked at this turn's checkpoint, each with `latest_run_id` (None: no run of its own yet).
    branches: list[Session] = field(default_factory=list)
    # An ended turn before the live session's latest: "Fork from here" makes a new session from its checkpoint.
    forkable: bool = False
    entries: list[TimelineEntry] | None = None
    # The time since the turn before; for the last turn while it still waits, the time since it asked.
    gap: Gap | None = None
    waiting: Gap | None = None

    @property
    def checkpoint(self) -> Checkpoint | None:
        return getattr(self.run, "checkpoint", None)  # a reverse one-to-one without a row raises

    @property
    def summary(self) -> str:
        return RunRow(self.run).summary

    @property
    def duration(self) -> str:
        return RunRow(self.run).duration

    @property
    def anchor(self) -> str:
        """The prefix of its events' ids; the run viewed keeps `event-<sequence>`, as before sessions showed."""
        return "event-" if self.viewed else f"turn-{self.number}-event-"


# What the timeline reads of a run and of its checkpoint (not the conversation it stores).
TURN_FIELDS = (
    *("id", "status", "created_at", "finished_at", "message", "session_id", "error", "version__number"),
    *(f"checkpoint__{name}" for name in ("id", "number", "run_id", "status", "created_at")),
)

# A turn's events are on the run page within this many turns of the run viewed; the others, on their own page.
TURNS_AROUND = 12


def _event_count(*types: str) -> Subquery:
    counted = Event.objects.filter(run=OuterRef("pk"), type__in=types).order_by().values("run")
    return Subquery(counted.annotate(n=Count("pk")).values("n"))


def session_turns(session: Session | None, viewed: Run) -> list[SessionTurn]:
    """The turns of the session of `viewed` (`viewed` alone without one), oldest first, with their model calls
    and tool calls counted, the gaps between them, and the events of those near `viewed`; five queries whatever
    their number: the runs with their checkpoints and counts, the requests they opened, the forks made at
    any of their checkpoints, and the events."""
    runs = Run.objects.filter(session=session) if session is not None else Run.objects.filter(pk=viewed.pk)
    runs = runs.select_related("version", "checkpoint").only(*TURN_FIELDS).order_by("created_at", "pk")
    counted = runs.annotate(
        model_calls=_event_count(EventType.ASSISTANT_USAGE),
        # Every call has one start, in the turn it ran or was settled in (a client's: when its result came).
        tool_calls=_event_count(EventType.TOOL_EXECUTION_START),
    )
    turns = {run.id: SessionTurn(run) for run in counted}
    ordered = list(turns.values())
    for index, turn in enumerate(ordered):
        turn.number = turn.checkpoint.number if turn.checkpoint is not None else index + 1
        turn.viewed = turn.run.pk == viewed.pk
    if session is not None:
        _read_requests_and_forks(session, turns)
        latest = max((turn.checkpoint.number for turn in ordered if turn.checkpoint is not None), default=0)
        for turn in ordered:
            ended = turn.checkpoint is not None and turn.checkpoint.number < latest
            turn.forkable = ended and session.deleted_at is None
    at = next(index for index, turn in enumerate(ordered) if turn.viewed)
    near = {turn.run.pk: turn for turn in ordered[max(at - TURNS_AROUND, 0) : at + TURNS_AROUND + 1]}
    events: dict[uuid.UUID, list[Event]] = {run_id: [] for run_id in near}
    for event in Event.objects.filter(run__in=list(near)).order_by("run", "sequence"):
        events[event.run_id].append(event)
    shown = [event for run_events in events.values() for event in run_events]
    names, calls = subagent_names(shown), call_names(shown)
    policies = {str(p.id): p.policy for turn in ordered for p in turn.asked if p.policy}
    for run_id, turn in near.items():
        turn.entries = timeline(events[run_id], turn.run.created_at, names=names, calls=calls, policies=policies)
    for before, turn in itertools.pairwise(ordered):
        turn.gap = _gap(before, turn.run.created_at)
    last = ordered[-1]
    if last.run.status in AWAITING and any(pending.status == RequestStatus.PENDING for pending in last.asked):
        last.waiting = _gap(last, timezone.now(), still=True)
    return ordered


def _read_requests_and_forks(session: Session, turns: dict[uuid.UUID, SessionTurn]) -> None:
    # A fork's copies of the requests open where it started belong to the original's runs: none of its own.
    asked = session.requests.filter(run__session=session).select_related("answered_by")
    shown = ("id", "run_id", "kind", "tool_name", "message", "status", "answered_by__username", "approvers", "policy")
    for pending in asked.only(*shown).order_by("opened_at", "id"):
        turns[pending.run_id].asked.append(pending)
    latest = Run.objects.filter(session=OuterRef("pk")).order_by("-created_at", "-pk").values("id")[:1]
    forks = Session.objects.filter(tenant=session.tenant_id, forked_from_session=session).annotate(
        latest_run_id=Subquery(latest)
    )
    at_checkpoint: dict[uuid.UUID | None, list[Session]] = {}
    for fork in forks.only("id", "key", "deleted_at", "forked_from_checkpoint_id").order_by("created_at", "pk"):
        at_checkpoint.setdefault(fork.forked_from_checkpoint_id, []).append(fork)
    for turn in turns.values():
        if turn.checkpoint is not None:
            turn.branches = at_checkpoint.get(turn.checkpoint.id, [])


def _gap(before: SessionTurn, until: datetime, still: bool = False) -> Gap:
    """The time after the turn `before` until `until`: when it asked, who answered and what closed unanswered."""
    took = duration(before.run.finished_at or before.run.created_at, until) or "0 ms"
    if before.run.status not in AWAITING:
        return Gap(took, waited=False)
    who = list(dict.fromkeys(p.answered_by.username for p in before.asked if p.answered_by is not None))
    closed = list(dict.fromkeys(p.get_status_display().lower() for p in before.asked if p.status in TERMINAL))
    return Gap(took, waited=True, who=who, closed=closed, still=still)


@role_required("reader")
@require_GET
def run_detail(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_run_for(request, run_id, *RUN_RELATED, among=with_afterwards(Run.objects.all()))
    turns = session_turns(run.session, run)
    [viewed] = [turn for turn in turns if turn.viewed]
    events = [entry.event for entry in viewed.entries or []]
    context = {
        "run": run,
        "row": RunRow(run),
        "parameters": [(name, pretty(value)) for name, value in run.parameters.items()],
        # A fork's first run follows this one too, in another session: the timeline shows it as a branch.
        "next_runs": Run.objects.filter(tenant=run.tenant_id, previous_run=run, session=run.session_id).order_by(
            "created_at"
        ),
        "turns": turns,
        "forked_from": fork_origin(run.session) if run.session else None,
        "replay_of": replay_of(run, events),
        # The Replay button's version picker, for admins.
        "versions": list(run.agent.versions.order_by("-number").values_list("number", flat=True))
        if request.membership.allows("admin")
        else [],
        # A fork's copies of this run's requests are the fork's.
        "requests": PendingRequest.objects.filter(run=run, session=run.session_id).select_related("answered_by"),
        "waiting": run.status in AWAITING
        and run.requests.filter(status=RequestStatus.PENDING, answered_in=None, session=run.session_id).exists(),
        # While the session's latest turn has not ended, the page follows the session stream (run_live.js).
        "follow": run.session is not None
        and run.session.deleted_at is None
        and turns[-1].run.status in (RunStatus.QUEUED, RunStatus.RUNNING, *AWAITING),
        # A run without a session (a replay) follows its own stream until it ends.
        "follow_run": run.session is None and run.status in (RunStatus.QUEUED, RunStatus.RUNNING),
    }
    return render(request, "agents/run_detail.html", context)
