"""A run request (agents/run_requests.py) checked whole before anything is written (`prepare_run`): its
session, the answers it carries, parameters, culture, documents and connections. A rejected request
(`RunRejected`) changes nothing; `agents.run_lifecycle.record_run` records what `PreparedRun` holds.
"""

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from django.db.models import Exists, F, OuterRef, QuerySet

from agents.binding import BindingError, bind_parameters, render_instructions, resolve_culture
from agents.definitions import MAX_SUBAGENT_DEPTH, DefinitionContent
from agents.engine.subagent_turns import SubAgent
from agents.models import Agent, AgentVersion, Attachment, Run, RunStatus, Session
from agents.request_kinds import RequestKind
from agents.requirements import needs_several, self_approval
from agents.run_requests import PERSON_FIELDS, PersonAnswer, RunClientTool, RunRequest
from approvals.kinds import KINDS, AnswerRefused
from approvals.models import NotAnApprover, PendingRequest, RequestStatus, refuse_unless_answerable, rights_of
from approvals.remembered_rules import rules_in_force
from console.connections import ConnectionSpec
from console.models import Connection, Membership, Tenant
from console.problems import Refused
from console.sql import Prepared

logger = logging.getLogger(__name__)


class RunRejected(Refused):
    """A run request that fails a check; nothing was changed (its status first, as the run routes write it)."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(code, detail, status, **extra)


@dataclass
class PreparedRun:
    """A checked run request: everything `record_run` writes, nothing written yet."""

    tenant: Tenant
    agent: Agent
    version: AgentVersion
    request: RunRequest
    session: Session | None
    bound: dict[str, Any]
    culture: str
    instructions: str
    documents: list[tuple[str, str]]
    previous_run: Run | None
    # The connections the definition names, as granted to the tenant now (a missing one fails the turn).
    connections: dict[str, ConnectionSpec] = field(default_factory=dict)
    # (request, answer payload) pairs answered by this request, and earlier stored answers now used.
    answered: list[tuple[PendingRequest, dict[str, Any]]] = field(default_factory=list)
    stored_answers: list[PendingRequest] = field(default_factory=list)
    abandoned: list[PendingRequest] = field(default_factory=list)
    # Requests closed without an answer (expired, cancelled) whose calls the engine has not yet seen end.
    terminated: list[PendingRequest] = field(default_factory=list)
    # The id the run gets, when its client chose one (a respond's `newRunId`).
    run_id: uuid.UUID | None = None
    # The sub-agents its model may call, as they are now (SPEC section 10).
    subagents: dict[str, SubAgent] = field(default_factory=dict)
    # The client tools offered for the turn besides the definition's (`run_client_tools`), stored on the run.
    client_tools: list[RunClientTool] = field(default_factory=list)
    # The away members (users) whose delegate gives an answer of `answered`, by request pk (`stand_ins`).
    on_behalf_of: dict[Any, Any] = field(default_factory=dict)
    # The run this one replays (`agents.actions.do_replay_run`): `replayOf` in its `run.started`.
    replay_of: Run | None = None
    # The ids of the session's open requests the run neither carries nor abandons (None: not known, for a queued
    # run kept before this was): what stays open through its turn, besides what it opens.
    left_open: list[str] | None = field(default_factory=list)


def _versions(tenant: int, name: str) -> QuerySet[AgentVersion]:
    return AgentVersion.objects.select_related("agent").filter(
        agent__tenant=tenant, agent__name=name, agent__deleted_at__isnull=True
    )


# The kinds a run request's `answers` answers (those whose every answer field a `PersonAnswer` has), and the fields
# each reads.
PERSON_KINDS = {name: kind.fields for name, kind in KINDS.items() if kind.fields <= PERSON_FIELDS}


# The agent's current version, which every run's start reads (issue 56): compiled once.
_CURRENT_VERSION = Prepared(
    lambda tenant, name: _versions(tenant, name).filter(number=F("agent__current_version")), tenant=int, name=str
)


def live_version(tenant: Tenant, name: str, number: int | None) -> AgentVersion:
    """The version a run of the agent `name` uses (its current one unless `number`), with its agent, in
    one query; raises RunRejected (404) when there is no such agent or version."""
    if number:
        version = _versions(tenant.pk, name).filter(number=number).first()
    else:
        version = _CURRENT_VERSION.first(tenant=tenant.pk, name=name)
    if version is None:
        if not Agent.objects.live().filter(tenant=tenant, name=name).exists():
            raise RunRejected(404, "agent_not_found", f"No agent named {name!r} in this tenant.")
        raise RunRejected(404, "version_not_found", f"Agent {name!r} has no version {number}.")
    return version


def prepare_run(
    tenant: Tenant,
    version: AgentVersion,
    request: RunRequest,
    session: Session | None = None,
    uncarried: list[PendingRequest] | None = None,
) -> PreparedRun:
    """Check the whole request (SPEC section 4, "Rules") for a run of `version` (see `live_version`);
    raises RunRejected, writes nothing. The continuation passes what it read already instead of looking it up:
    the `session` (its turn state is asked again when the run starts) and its `uncarried` requests."""
    agent = version.agent
    if version.definition.gateway:
        detail = (
            f"The agent {agent.name!r} is an MCP gateway: MCP clients call its servers' tools at /mcp/{agent.name}"
            " (SPEC section 15)."
        )
        raise RunRejected(409, "gateway_agent", detail)
    if version.definition.external:
        detail = (
            f"The agent {agent.name!r} is external: it runs elsewhere and brings its requests to"
            f" POST /api/agents/{agent.name}/requests (SPEC section 12)."
        )
        raise RunRejected(409, "external_agent", detail)
    if request.has_answers and not request.session_id:
        raise RunRejected(400, "session_required", "Answers need the sessionId of the session that asked.")
    if session is None and request.session_id:
        session = _LIVE_SESSION.first(tenant=tenant.pk, key=request.session_id)
        if session is not None and session.agent_id != agent.pk:
            raise RunRejected(409, "session_agent_mismatch", "This session belongs to another agent.")
        if session is not None:
            refuse_if_busy_or_gone(session)
    previous_run = session.last_run if session is not None else None

    prepared = PreparedRun(
        tenant=tenant,
        agent=agent,
        version=version,
        request=request,
        session=session,
        bound={},
        culture="",
        instructions="",
        documents=[],
        previous_run=previous_run,
        connections=granted_connections(tenant, version),
    )
    _check_answers(prepared, uncarried)
    if not (prepared.answered or prepared.stored_answers or prepared.terminated or request.message):
        raise RunRejected(400, "message_required", "Send a message (it may be empty only when answers are sent).")
    content = version.definition
    values = request.parameters
    if values is None:
        values = previous_run.parameters if previous_run is not None else {}
    try:
        prepared.bound = bind_parameters(content, values)
    except BindingError as error:
        raise RunRejected(400, error.code, error.detail) from None
    prepared.culture = request.culture or (previous_run.culture if previous_run is not None else "")
    prepared.instructions = render_instructions(resolve_culture(content, prepared.culture), prepared.bound)
    prepared.documents = [(d.name, d.content) for d in request.documents] + _attachment_documents(
        tenant, request.attachment_ids
    )
    prepared.subagents = subagents_for(tenant, content, prepared.culture, prepared.session)
    prepared.client_tools = run_client_tools(prepared)
    return prepared


def run_client_tools(prepared: PreparedRun) -> list[RunClientTool]:
    """The client tools the turn offers besides the definition's: the request's `clientTools`; when it gives none
    and carries answers, those of the run that asked (its calls resume in this turn, and the model may call them
    again), less any the definition now declares itself (a continuation on another version). A turn that only closes
    requests (`abandonPending`, expired or cancelled ones) goes on with what it brings. A tool the request gives whose
    name is the definition's tool, client tool or sub-agent is refused: 400 `tool_name_conflict`."""
    content, given = prepared.version.definition, prepared.request.client_tools
    taken = {t.name for t in content.tools} | {t.name for t in content.client_tools} | set(content.sub_agents)
    if given is not None:
        clash = [tool.name for tool in given if tool.name in taken]
        if clash:
            detail = f"The agent {prepared.agent.name!r} has a tool or sub-agent named {clash[0]!r} already."
            raise RunRejected(400, "tool_name_conflict", detail)
        return given
    if not (prepared.answered or prepared.stored_answers) or prepared.previous_run is None:
        return []
    return [tool for tool in RunClientTool.stored(prepared.previous_run.client_tools) if tool.name not in taken]


def subagents_for(
    tenant: Tenant, content: DefinitionContent, culture: str, session: Session | None = None, depth: int = 1
) -> dict[str, SubAgent]:
    """The sub-agents `content` names, each on its agent's current version with its connections, rules in force
    in `session` and default parameter values, and theirs down to MAX_SUBAGENT_DEPTH. One whose parameters need a
    value it has no default for, which was deleted or made external since, is not offered."""
    if not content.sub_agents or depth > MAX_SUBAGENT_DEPTH:
        return {}
    versions = AgentVersion.objects.select_related("agent").filter(
        agent__tenant=tenant,
        agent__name__in=content.sub_agents,
        agent__deleted_at__isnull=True,
        number=F("agent__current_version"),
    )
    found: dict[str, SubAgent] = {}
    for version in versions:
        sub = version.definition
        if sub.runs_elsewhere:  # made external (or a gateway) after the parent named it: it runs elsewhere
            logger.warning("Sub-agent %s is not offered: it runs elsewhere (%s)", sub.name, sub.runtime)
            continue
        try:
            bound = bind_parameters(sub, {})
        except BindingError:
            logger.warning("Sub-agent %s is not offered: its parameters need values", sub.name)
            continue
        consulted = rules_in_force(version.agent, session) if sub.consults_rules else []
        found[sub.name] = SubAgent(
            name=sub.name,
            display_name=sub.display_name or sub.name,
            description=sub.description,
            content=sub,
            version=version.number,
            connections=granted_connections(tenant, version),
            instructions=render_instructions(resolve_culture(sub, culture), bound),
            rules=list(consulted),
            subagents=subagents_for(tenant, sub, culture, session, depth + 1),
        )
    return {name: found[name] for name in content.sub_agents if name in found}


def granted_connections(tenant: Tenant, version: AgentVersion) -> dict[str, ConnectionSpec]:
    """The connections `version` names that `tenant` may use now (a grant may be withdrawn after a save)."""
    return Connection.objects.specs_for(tenant, version.definition.connection_names)


def refuse_ungranted_connections(prepared: PreparedRun) -> None:
    """A client's run request is refused (400) when a connection was withdrawn since its agent was saved.
    The console's own continuation is not: it starts, and fails `unknown_connection` where people see it."""
    problems = prepared.version.definition.connection_problems(prepared.connections)
    if problems is not None:
        raise RunRejected(400, problems[0], "; ".join(f"{path}: {text}" for path, text in problems[1].items()))


def refuse_unless_approver_of(membership: Membership, requests: Iterable[PendingRequest]) -> None:
    """`approvals.models.refuse_unless_answerable` as a run route refuses (403 `not_an_approver`)."""
    try:
        refuse_unless_answerable(membership, requests)
    except NotAnApprover as refused:
        raise RunRejected(refused.status, refused.code, refused.run_detail) from None


def stand_ins(membership: Membership, answered: Iterable[tuple[PendingRequest, dict[str, Any]]]) -> dict[Any, Any]:
    """For whom the member answers each request of a turn's input that they answer as an away member's delegate
    (SPEC section 14: both names in the answer), by request pk; as the inbox finds it (`approvals.actions.answers.
    acting`)."""
    routed = [pending for pending, _ in answered if pending.approvers]
    rights = rights_of(membership) if routed else None
    found = {pending.pk: rights.on_behalf_of(pending.groups, pending.separated_from)[1] for pending in routed if rights}
    return {pk: away for pk, away in found.items() if away is not None}


def refuse_self_approvals(membership: Membership, prepared: PreparedRun) -> None:
    """A turn's input approving a request its member asked for (or, answering as their stand-in, the away member
    did), where the request's requirement separates duties (SPEC section 14): 403 `not_an_approver`,
    `reason: "self_approval"`; as the inbox refuses it (`approvals.actions.answers.acting`)."""
    for pending, payload in prepared.answered:
        if not (pending.require and payload.get("approved") is True):
            continue
        away = prepared.on_behalf_of.get(pending.pk)
        if self_approval(pending.require, pending.requested_by_id, membership.user_id, getattr(away, "pk", None)):
            detail = f"You asked for the request {pending.id} (you started its run): someone else must approve it."
            raise RunRejected(403, "not_an_approver", detail, reason="self_approval")


def with_turn_state(sessions: QuerySet[Session]) -> QuerySet[Session]:
    """`sessions` with what `refuse_if_busy_or_gone` asks, read in the same query (not under a lock: `record_run`
    asks again after taking the session's, in a query of its own, which sees a turn committed meanwhile)."""
    running = Run.objects.filter(session=OuterRef("pk"), status__in=(RunStatus.RUNNING, RunStatus.QUEUED))
    return sessions.annotate(agent_deleted_at=F("agent__deleted_at"), turn_running=Exists(running))


# A run's session by its key, live (one at most: `session_key_unique_live`), as every start reads it (issue 56).
_LIVE_SESSION = Prepared(
    lambda tenant, key: with_turn_state(Session.objects.live().select_related("last_run")).filter(
        tenant=tenant, key=key
    ),
    tenant=int,
    key=str,
)


def refuse_if_deleted(session: Session) -> None:
    """Refuse a turn of a session deleted meanwhile (read under its lock: the deletion sets it under that lock)."""
    if session.deleted_at is not None:
        detail = "The session was deleted meanwhile; send the turn again to start a new session."
        raise RunRejected(409, "session_busy", detail)


def refuse_if_busy_or_gone(session: Session) -> None:
    """Refuse a second turn of the session, and a turn of an agent or session deleted meanwhile. `record_run`
    asks again under the session's lock, which the deletions take too: a deletion waits for this turn to be
    recorded (and then cancels it), or this turn waits for the deletion (and then stops here)."""
    refuse_if_deleted(session)
    read: Any = session
    if hasattr(read, "turn_running"):  # read with the session (`with_turn_state`)
        deleted_at, is_busy = read.agent_deleted_at, read.turn_running
    else:
        busy = Exists(Run.objects.filter(session=session, status__in=(RunStatus.RUNNING, RunStatus.QUEUED)))
        deleted_at, is_busy = Agent.objects.filter(pk=session.agent_id).values_list("deleted_at", busy).get()
    if deleted_at is not None:
        raise RunRejected(404, "agent_not_found", "The agent of this session was deleted.")
    if is_busy:
        raise RunRejected(409, "session_busy", "A turn of this session is still running; send the next one after it.")


def _check_answers(prepared: PreparedRun, uncarried: list[PendingRequest] | None = None) -> None:
    request, session = prepared.request, prepared.session
    # The session's requests no run has carried yet, in one query: open ones, and those closed without an
    # answer (expired, cancelled) whose calls the turn must close; with who answered each stored answer,
    # whom the events handing them to the engine name (unless the caller read them: `uncarried`).
    if uncarried is None:
        uncarried = []
        if session is not None:
            statuses = (RequestStatus.PENDING, RequestStatus.EXPIRED, RequestStatus.CANCELLED)
            waiting = session.requests.filter(status__in=statuses, answered_in=None)
            uncarried = list(waiting.select_related("answered_by"))
    open_requests = {r.id: r for r in uncarried if r.status == RequestStatus.PENDING}
    by_call = {r.call_id: r for r in open_requests.values()}
    approval_modes = {t.name: t.approval for t in prepared.version.definition.tools}

    def target(request_id: str | None, kind: str | set[str], call_id: str | None = None) -> PendingRequest:
        lookup: dict[str, Any]
        if call_id is not None:
            found, lookup, named = by_call.get(call_id), {"call_id": call_id}, call_id
        else:
            as_uuid = _as_uuid(request_id)
            found, lookup, named = open_requests.get(as_uuid) if as_uuid else None, {"id": as_uuid}, str(request_id)
        if found is None:
            closed = session.requests.filter(**lookup).exclude(status=RequestStatus.PENDING) if session else None
            status = closed.values_list("status", flat=True).first() if closed is not None else None
            if status == RequestStatus.ANSWERED:
                raise RunRejected(409, "already_answered", f"The request {named} was answered before.")
            if status is not None:
                detail = f"The request {named} was closed ({status}): it takes no answer."
                raise RunRejected(409, "request_closed", detail)
            raise RunRejected(400, "unknown_request", f"No pending request {named!r} in this session.")
        if found.kind not in ({kind} if isinstance(kind, str) else kind) or found.answer is not None:
            if found.answer is not None:
                raise RunRejected(409, "already_answered", f"The request {found.id} was answered before.")
            wanted = kind if isinstance(kind, str) else " or ".join(sorted(kind))
            raise RunRejected(
                400, "unknown_request", f"The request {found.id} is a {found.kind} request, not {wanted}."
            )
        return found

    seen: set[uuid.UUID] = set()

    def answer(found: PendingRequest, payload: dict[str, Any]) -> None:
        if found.id in seen:
            raise RunRejected(400, "duplicate_answer", f"The request {found.id} is answered twice in this request.")
        seen.add(found.id)
        if needs_several(found.require) and payload.get("approved") is not False:
            # One person's approval in a turn's input would decide what needs several (SPEC section 14).
            detail = (
                f"The request {found.id} needs several approvals: give yours with POST /api/requests/{found.id}"
                "/responses; the session goes on once they decide it."
            )
            raise RunRejected(409, "approvals_required", detail)
        prepared.answered.append((found, payload))

    # Each answer is found, checked and taken in turn: the first that fails names the error.
    given = chain(
        ((target(a.request_id, RequestKind.APPROVAL), a) for a in request.approvals),
        ((target(None, RequestKind.CLIENT_TOOL, call_id=r.call_id), r) for r in request.tool_results),
        ((target(r.request_id, RequestKind.INPUT), r) for r in request.input_responses),
        ((target(a.request_id, set(PERSON_KINDS)), a) for a in request.answers),
    )
    for found, wire in given:
        fields = wire.model_dump(mode="json", by_alias=True)
        if isinstance(wire, PersonAnswer):
            fields = _person_fields(found, wire)
        try:
            answer(found, KINDS[found.kind].answer(found, fields, approval_modes))
        except AnswerRefused as refused:
            code = "invalid_input_content" if refused.code == "invalid_content" else refused.code
            raise RunRejected(400, code, refused.detail) from None

    prepared.terminated = [r for r in uncarried if r.status != RequestStatus.PENDING]
    stored = [r for r in open_requests.values() if r.answer is not None]
    prepared.stored_answers = stored
    unanswered = [r for r in open_requests.values() if r.id not in seen and r.answer is None]
    if unanswered and request.abandon_pending:
        prepared.abandoned = unanswered
        return
    prepared.left_open = [str(r.id) for r in unanswered]
    if unanswered and (request.message or prepared.answered):
        if request.message:
            raise RunRejected(
                409, "pending_requests", "The session has unanswered requests; answer them or set abandonPending."
            )
        missing = ", ".join(str(r.id) for r in unanswered)
        raise RunRejected(
            400, "unanswered_requests", f"Answer every pending request of the session together; missing: {missing}"
        )


def _person_fields(found: PendingRequest, wire: PersonAnswer) -> dict[str, Any]:
    """An `answers` entry as its kind's answer fields (camelCase), `json` read as the kind's type; refused
    (400 `response_type_mismatch`) when a field does not fit the kind or is missing."""
    kind = KINDS[found.kind]
    given = {name: getattr(wire, name) for name in ("text", "approved") if getattr(wire, name) is not None}
    if wire.json_value is not None:
        read = kind.read_json(wire.json_value)
        if read is None or given:
            raise RunRejected(400, "response_type_mismatch", f"{found.id}: {kind.takes}")
        given = read
    if not set(given) <= PERSON_KINDS[RequestKind(found.kind)] or (kind.required and kind.required not in given):
        raise RunRejected(400, "response_type_mismatch", f"{found.id}: {kind.takes}")
    return given


def _as_uuid(value: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        return None


def _attachment_documents(tenant: Tenant, ids: list[uuid.UUID]) -> list[tuple[str, str]]:
    if not ids:
        return []
    found = {a.id: a for a in Attachment.objects.filter(tenant=tenant, id__in=ids)}
    foreign = [str(i) for i in ids if i not in found]
    if foreign:
        raise RunRejected(400, "foreign_attachment", f"No attachment {', '.join(foreign)} in this tenant.")
    documents = []
    for attachment_id in ids:
        attachment = found[attachment_id]
        with attachment.file.open("rb") as stream:
            raw = stream.read()
        try:
            documents.append((attachment.name, raw.decode("utf-8")))
        except UnicodeDecodeError:
            documents.append((attachment.name, f"[binary {attachment.content_type}, {attachment.size} bytes]"))
    return documents
