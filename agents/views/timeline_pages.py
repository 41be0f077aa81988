"""A run's timeline: its events for reading, each policy verdict as a sentence paired with the event it led
to, and the turns of its session with the gaps between them."""

import itertools
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from agents.events import EventType
from agents.models import AWAITING, Checkpoint, Event, Run, Session
from agents.policies import INTERCEPTION_POINTS, Point
from agents.views.run_list_pages import RunRow
from approvals.models import TERMINAL, PendingRequest, RequestStatus
from console.humanize import duration


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
class VerdictSentence:
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
    verdict: VerdictSentence | None = None
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
            entry.verdict = VerdictSentence(entry.event.data)
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
