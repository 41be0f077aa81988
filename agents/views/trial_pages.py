"""The trial-run page: try an agent turn by turn, answering what it asks for inline.

The page posts each turn to the run API (`Accept: text/event-stream`) from static/console/trial.js,
shows the reply as it streams, then swaps in the server-rendered turn. What a turn asks is answered with the
inbox card's widget (templates/approvals/answer_form.html, posted to the inbox's answer view): each answer is
stored at once, and the continuation the last one starts streams in through the session's stream.

An earlier turn that asked something can be answered differently: its widgets post that turn's checkpoint,
which forks the session (SPEC section 9), and the page goes on in the fork. Any earlier turn can be forked
without an answer too ("Fork from here"): the next message in the fork continues from that turn.
"""

import json
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.db.models import F
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from agents.checkpoints import checkpoints_of, fork_origin
from agents.definitions import DefinitionContent
from agents.engine import server_tool_schema
from agents.getters import get_run_for
from agents.models import AWAITING, Agent, AgentVersion, Checkpoint, Event, Run, Session
from agents.payloads import EventType
from agents.server_tools import REGISTRY
from agents.views.agent_pages import mcp_endpoint
from approvals.kinds import KINDS
from approvals.models import PendingRequest, RequestStatus, mark_answerable
from console.models import Membership
from console.tenancy import ConsoleRequest, role_required


@dataclass
class TrialTurn:
    run: Run
    # The answers this turn carried, the requests it opened, and those still waiting for an answer.
    answered: list[PendingRequest] = field(default_factory=list)
    asked: list[PendingRequest] = field(default_factory=list)
    open_requests: list[PendingRequest] = field(default_factory=list)
    # The policies' verdicts other than allow in this turn (`policy.verdict`'s data): in shadow mode they are the
    # only sign on the page of what a policy would have done.
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    # The versions its answer (or a fork's) may continue on, offered when the agent was edited since it ran.
    continue_on: list[AgentVersion] = field(default_factory=list)
    # An earlier turn that asked: its checkpoint and the requests open there, which a fork answers again.
    checkpoint: Checkpoint | None = None
    fork_requests: list[PendingRequest] = field(default_factory=list)
    # Any earlier ended turn: "Fork from here" starts a new session from its checkpoint
    # (`agents.views.run_pages.run_fork`).
    forkable: bool = False

    @property
    def status_label(self) -> str:
        """The run's status, except for a turn that waited on requests no longer open: "Answered" (or "Closed",
        none answered), not "Awaiting approval" for good, as the runs list says "→ answered"."""
        if self.run.status not in AWAITING or not self.asked or self.open_requests:
            return self.run.get_status_display()
        return "Answered" if any(r.answer is not None for r in self.asked) else "Closed"


def _for_form(pending: PendingRequest) -> PendingRequest:
    pending.arguments_json = json.dumps(pending.arguments, indent=2, ensure_ascii=False)  # type: ignore[attr-defined]
    return pending


def _hint(definition: DefinitionContent) -> str:
    """A first message worth trying with this agent: one of its own tools (the scripted model calls it)."""
    tools = [t.name for t in definition.tools]
    if "send_email" in tools:
        return 'call send_email {"to": "ops@example.com", "subject": "Hi", "body": "Hello"}'
    free = [name for name in tools if not server_tool_schema(name).get("required")]  # callable without arguments
    return f"call {free[0]}" if free else "hello"


# Arguments that make an example call of these server tools valid (the scripted model sends them as written).
SAMPLE_ARGUMENTS: dict[str, dict[str, object]] = {
    "send_email": {"to": "ops@example.com", "subject": "Hi", "body": "Hello"},
    "ask_user": {"question": "Which colour?", "choices": ["red", "blue"]},
    "propose_plan": {"steps": ["Draft the agenda", "Invite the team", "Book a room"]},
}
# The key of a session the trial page starts (the dashboard's first steps look for one: an agent was tried).
TRIAL_SESSIONS = "trial-"
# The tools of the built-in MCP connections, by connection (console.connections).
MCP_EXAMPLES = {"meetings": 'call book_meeting {"topic": "Roadmap"}'}


@dataclass(frozen=True)
class ExampleGroup:
    label: str
    messages: list[str]


def _examples(definition: DefinitionContent) -> list[ExampleGroup]:
    """Messages for the scripted model that make this agent pause in each way it can, grouped by the kind of
    request the pause opens (in the order of `approvals.kinds.KINDS`), then those that ask nobody."""
    by_kind: dict[str, list[str]] = defaultdict(list)
    for tool in definition.tools:
        if tool.name in SAMPLE_ARGUMENTS:
            message = f"call {tool.name} {json.dumps(SAMPLE_ARGUMENTS[tool.name])}"
        elif not server_tool_schema(tool.name).get("required"):
            message = f"call {tool.name}"
        else:
            continue
        asks = REGISTRY[tool.name].asks
        by_kind[asks or ("" if tool.approval == "never" else "approval")].append(message)
    for client_tool in definition.client_tools:
        by_kind["client_tool"].append(f"call {client_tool.name}")
    for server in definition.mcp_servers:
        if server.connection in MCP_EXAMPLES:
            by_kind["input" if server.approval == "never" else "approval"].append(MCP_EXAMPLES[server.connection])
    by_kind[""] += ["echo instructions", "help"]
    groups = [ExampleGroup(kind.label, by_kind[name]) for name, kind in KINDS.items() if by_kind.get(name)]
    return [*groups, ExampleGroup("No pause", by_kind[""])]


def _back(agent: Agent, version: int, session_key: str) -> str:
    """The trial page of a session: where an answer posted without JavaScript comes back to."""
    return f"{reverse('trial')}?{urlencode({'agent': agent.name, 'version': version, 'session': session_key})}"


def _turns(
    membership: Membership, session: Session, runs: list[Run], versions: list[AgentVersion], current: int
) -> list[TrialTurn]:
    """The turns of `runs` (all of `session`'s, or the one just run), in four queries however many there are
    (more when a request is routed to a group): the session's requests, the answers the runs carried, the policies'
    verdicts, the session's checkpoints (without their history). `versions` are the agent's, `current` the number of its
    current one."""
    requests = session.requests.select_related("run__version").order_by("opened_at", "id")
    by_id = {pending.id: _for_form(pending) for pending in requests}
    mark_answerable(membership, by_id.values())
    opened: dict[uuid.UUID, list[PendingRequest]] = defaultdict(list)
    for pending in by_id.values():  # a fork's copies belong to the original's runs: none of the fork's turns
        opened[pending.run_id].append(pending)
    carried: dict[uuid.UUID | None, list[PendingRequest]] = defaultdict(list)
    for pending in PendingRequest.objects.filter(answered_in__in=runs).select_related("answered_by"):
        carried[pending.answered_in_id].append(pending)
    verdicts: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    said = Event.objects.filter(run__in=runs, type=EventType.POLICY_VERDICT).order_by("run_id", "sequence")
    for run_id, data in said.values_list("run_id", "data"):
        verdicts[run_id].append(data)
    checkpoints = list(checkpoints_of(session))
    latest = checkpoints[0].number if checkpoints else 0
    at_run = {checkpoint.run_id: checkpoint for checkpoint in checkpoints}
    turns = []
    for run in runs:
        # An answer stored from the inbox waits for its continuation: nothing left to answer here.
        waiting = [r for r in opened[run.id] if r.status == RequestStatus.PENDING and r.answer is None]
        turn = TrialTurn(run, carried[run.id], opened[run.id], waiting, verdicts=verdicts[run.id])
        checkpoint = at_run.get(run.id)
        turn.forkable = checkpoint is not None and checkpoint.number < latest
        if turn.forkable and checkpoint is not None and checkpoint.open_requests:
            turn.checkpoint = checkpoint
            turn.fork_requests = [by_id[uuid.UUID(i)] for i in checkpoint.open_requests if uuid.UUID(i) in by_id]
        # Either answer goes on, unless it names another, with the version this turn ran (SPEC section 9).
        if (turn.open_requests or turn.fork_requests) and run.version.number != current:
            turn.continue_on = versions
        turns.append(turn)
    return turns


@role_required("operator")
@require_GET
def trial(request: ConsoleRequest) -> HttpResponse:
    tenant = request.tenant
    agents = list(Agent.objects.live().filter(tenant=tenant))
    current = AgentVersion.objects.filter(agent__in=agents, number=F("agent__current_version"))
    # An external agent's or a gateway's runtime: it runs elsewhere, not here (SPEC sections 12 and 15).
    elsewhere = {v.agent_id: v.definition.runtime for v in current if v.definition.runs_elsewhere}
    # Unless one is named, the first hosted agent.
    first = next((a for a in agents if a.pk not in elsewhere), agents[0] if agents else None)
    agent = next((a for a in agents if a.name == request.GET.get("agent")), first)
    context: dict[str, object] = {"agent_choices": [(a, elsewhere.get(a.pk, "")) for a in agents], "agent": agent}
    if agent is not None and agent.pk in elsewhere:
        context |= {"external": True, "runtime": elsewhere[agent.pk], "mcp_endpoint": mcp_endpoint(agent.name)}
    elif agent is not None:
        versions = list(agent.versions.all())
        chosen = request.GET.get("version", "")
        version = next((v for v in versions if str(v.number) == chosen), versions[0])
        session_key = request.GET.get("session") or f"{TRIAL_SESSIONS}{uuid.uuid4().hex[:12]}"
        session = Session.objects.live().filter(tenant=tenant, key=session_key, agent=agent).first()
        turns: list[TrialTurn] = []
        waiting: list[PendingRequest] = []
        if session is not None:
            runs = list(session.runs.select_related("version", "agent").order_by("created_at", "pk"))
            turns = _turns(request.membership, session, runs, versions, agent.current_version)
            # A fork waits on its copies of the requests open where it started (asked by the original's runs)
            # until they are all answered.
            copies = session.requests.open().exclude(run__session=session).select_related("run__version")
            copies = copies.order_by("opened_at", "id")
            waiting = [_for_form(pending) for pending in copies]
            mark_answerable(request.membership, waiting)
        context.update(
            versions=versions,
            version=version,
            definition=version.definition,
            hint=_hint(version.definition),
            examples=_examples(version.definition),
            session_key=session_key,
            turns=turns,
            forked_from=fork_origin(session) if session is not None else None,
            waiting=waiting,
            back=_back(agent, version.number, session_key),
            # A session with a turn or a request follows its stream from the start (a fork's continuation too).
            live=session is not None,
        )
    return render(request, "agents/trial.html", context)


@role_required("operator")
@require_GET
def trial_turn(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_run_for(request, run_id, "agent", "version", "session")
    versions = list(run.agent.versions.all())
    turns = (
        _turns(request.membership, run.session, [run], versions, run.agent.current_version)
        if run.session
        else [TrialTurn(run)]
    )
    back = _back(run.agent, run.version.number, run.session.key) if run.session else None
    return render(request, "agents/trial.html#turn", {"turn": turns[0], "agent": run.agent, "back": back})
