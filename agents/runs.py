"""Starting and finishing runs: every check of a run request, the answers it carries, the event log.

A run request is checked whole before anything is written (`prepare_run`); a rejected request
changes nothing. `start_run` then records the run, the answers and any remembered rules in one
transaction; `execute` runs the engine turn and `finish_run` stores the outcome.
"""

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain
from typing import Annotated, Any, Literal

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, QuerySet
from django.utils import timezone
from pydantic import Field, StrictBool, field_validator

from agents.binding import BindingError, bind_parameters, render_instructions, resolve_culture
from agents.definitions import CULTURE, WireModel
from agents.engine import Answers, TurnError, TurnOutcome, run_turn
from agents.events import EventLog, EventType
from agents.lanes import DEFAULT_LANE, LANE_PATTERN
from agents.models import Agent, AgentVersion, Attachment, Run, RunStatus, Session
from agents.turns import hold_here, holding
from approvals.kinds import KINDS, AnswerRefused, awaiting_status, deliver
from approvals.models import PendingRequest, RequestKind, RequestStatus, Rule
from approvals.push import notify_requests_closed, notify_requests_opened
from console.connections import ConnectionSpec
from console.models import Connection, Tenant

logger = logging.getLogger(__name__)


class RunRejected(Exception):
    """A run request that fails a check; nothing was changed."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


# An answer's requestId is any string: one that is not a UUID names no request of the session, which is
# `unknown_request` (SPEC section 4) rather than a malformed body.
RequestId = Annotated[str, Field(max_length=200)]


class ApprovalAnswer(WireModel):
    request_id: RequestId
    approved: StrictBool
    reason: str | None = Field(default=None, max_length=2000)
    remember: StrictBool = False
    remember_arguments_only: StrictBool = False
    override_arguments: dict[str, Any] | None = None


class ToolResultAnswer(WireModel):
    call_id: str = Field(min_length=1, max_length=200)
    result: Any = None
    error_message: str | None = Field(default=None, max_length=5000)


class InputAnswer(WireModel):
    request_id: RequestId
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


class Document(WireModel):
    name: str = Field(min_length=1, max_length=255)
    content: str = Field(max_length=1_000_000)


class RunRequest(WireModel):
    message: str | None = Field(default=None, max_length=200_000)
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    parameters: dict[str, Any] | None = None
    culture: str | None = Field(default=None, max_length=35)
    documents: list[Document] = Field(default_factory=list)
    attachment_ids: list[uuid.UUID] = Field(default_factory=list)
    approvals: list[ApprovalAnswer] = Field(default_factory=list)
    tool_results: list[ToolResultAnswer] = Field(default_factory=list)
    input_responses: list[InputAnswer] = Field(default_factory=list)
    abandon_pending: bool = False
    definition_version: int | None = Field(default=None, ge=1)
    lane: str | None = Field(default=None, pattern=LANE_PATTERN)

    @field_validator("culture")
    @classmethod
    def _culture(cls, value: str | None) -> str | None:
        if value is not None and not CULTURE.match(value):
            raise ValueError("not a culture name (like 'tr' or 'tr-TR')")
        return value

    @property
    def has_answers(self) -> bool:
        return bool(self.approvals or self.tool_results or self.input_responses)


@dataclass
class PreparedRun:
    """A checked run request: everything `start_run` writes, nothing written yet."""

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


def live_version(tenant: Tenant, name: str, number: int | None) -> AgentVersion:
    """The version a run of the agent `name` uses (its current one unless `number`), with its agent, in
    one query; raises RunRejected (404) when there is no such agent or version."""
    versions = AgentVersion.objects.select_related("agent").filter(
        agent__tenant=tenant, agent__name=name, agent__deleted_at__isnull=True
    )
    chosen = versions.filter(number=number) if number else versions.filter(number=F("agent__current_version"))
    version = next(iter(chosen[:1]), None)
    if version is None:
        if not Agent.objects.live().filter(tenant=tenant, name=name).exists():
            raise RunRejected(404, "agent_not_found", f"No agent named {name!r} in this tenant.")
        raise RunRejected(404, "version_not_found", f"Agent {name!r} has no version {number}.")
    return version


def prepare_run(tenant: Tenant, version: AgentVersion, request: RunRequest) -> PreparedRun:
    """Check the whole request (SPEC section 4, "Rules") for a run of `version` (see `live_version`);
    raises RunRejected, writes nothing."""
    agent = version.agent
    if request.has_answers and not request.session_id:
        raise RunRejected(400, "session_required", "Answers need the sessionId of the session that asked.")
    session = None
    if request.session_id:
        session = Session.objects.filter(tenant=tenant, key=request.session_id).first()
        if session is not None and session.agent_id != agent.pk:
            raise RunRejected(409, "session_agent_mismatch", "This session belongs to another agent.")
        if session is not None:
            _refuse_if_busy_or_gone(session)
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
    _check_answers(prepared)
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
    return prepared


def granted_connections(tenant: Tenant, version: AgentVersion) -> dict[str, ConnectionSpec]:
    """The connections `version` names that `tenant` may use now (a grant may be withdrawn after a save)."""
    return Connection.objects.specs_for(tenant, version.definition.connection_names)


def refuse_ungranted_connections(prepared: PreparedRun) -> None:
    """A client's run request is refused (400) when a connection was withdrawn since its agent was saved.
    The console's own continuation is not: it starts, and fails `unknown_connection` where people see it."""
    problems = prepared.version.definition.connection_problems(prepared.connections)
    if problems is not None:
        raise RunRejected(400, problems[0], "; ".join(f"{path}: {text}" for path, text in problems[1].items()))


def _refuse_if_busy_or_gone(session: Session) -> None:
    """Refuse a second turn of the session, and a turn of an agent deleted meanwhile. `start_run` asks again
    under the session's lock, which the deletion takes too: the deletion waits for this turn to be recorded
    (and then cancels it), or this turn waits for the deletion (and then stops here)."""
    busy = Exists(Run.objects.filter(session=session, status__in=(RunStatus.RUNNING, RunStatus.QUEUED)))
    deleted_at, is_busy = Agent.objects.filter(pk=session.agent_id).values_list("deleted_at", busy).get()
    if deleted_at is not None:
        raise RunRejected(404, "agent_not_found", "The agent of this session was deleted.")
    if is_busy:
        raise RunRejected(409, "session_busy", "A turn of this session is still running; send the next one after it.")


def _check_answers(prepared: PreparedRun) -> None:
    request, session = prepared.request, prepared.session
    open_requests: dict[uuid.UUID, PendingRequest] = {}
    if session is not None:
        open_requests = {r.id: r for r in session.requests.filter(status=RequestStatus.PENDING, answered_in=None)}
    by_call = {r.call_id: r for r in open_requests.values()}
    approval_modes = {t.name: t.approval for t in prepared.version.definition.tools}

    def target(request_id: str | None, kind: str, call_id: str | None = None) -> PendingRequest:
        lookup: dict[str, Any]
        if call_id is not None:
            found, lookup, named = by_call.get(call_id), {"call_id": call_id}, call_id
        else:
            as_uuid = _as_uuid(request_id)
            found, lookup, named = open_requests.get(as_uuid) if as_uuid else None, {"id": as_uuid}, str(request_id)
        if found is None:
            if session is not None and session.requests.filter(**lookup).exclude(status=RequestStatus.PENDING).exists():
                raise RunRejected(409, "already_answered", f"The request {named} was answered before.")
            raise RunRejected(400, "unknown_request", f"No pending request {named!r} in this session.")
        if found.kind != kind or found.answer is not None:
            if found.answer is not None:
                raise RunRejected(409, "already_answered", f"The request {found.id} was answered before.")
            raise RunRejected(400, "unknown_request", f"The request {found.id} is a {found.kind} request, not {kind}.")
        return found

    seen: set[uuid.UUID] = set()

    def answer(found: PendingRequest, payload: dict[str, Any]) -> None:
        if found.id in seen:
            raise RunRejected(400, "duplicate_answer", f"The request {found.id} is answered twice in this request.")
        seen.add(found.id)
        prepared.answered.append((found, payload))

    # Each answer is found, checked and taken in turn: the first that fails names the error.
    given = chain(
        ((target(a.request_id, RequestKind.APPROVAL), a) for a in request.approvals),
        ((target(None, RequestKind.CLIENT_TOOL, call_id=r.call_id), r) for r in request.tool_results),
        ((target(r.request_id, RequestKind.INPUT), r) for r in request.input_responses),
    )
    for found, wire in given:
        try:
            answer(found, KINDS[found.kind].answer(found, wire.model_dump(mode="json", by_alias=True), approval_modes))
        except AnswerRefused as refused:
            code = "invalid_input_content" if refused.code == "invalid_content" else refused.code
            raise RunRejected(400, code, refused.detail) from None

    if session is not None:
        prepared.terminated = list(
            session.requests.filter(status__in=(RequestStatus.EXPIRED, RequestStatus.CANCELLED), answered_in=None)
        )
    stored = [r for r in open_requests.values() if r.answer is not None]
    prepared.stored_answers = stored
    unanswered = [r for r in open_requests.values() if r.id not in seen and r.answer is None]
    if unanswered and request.abandon_pending:
        prepared.abandoned = unanswered
    elif unanswered and (request.message or prepared.answered):
        if request.message:
            raise RunRejected(
                409, "pending_requests", "The session has unanswered requests; answer them or set abandonPending."
            )
        missing = ", ".join(str(r.id) for r in unanswered)
        raise RunRejected(
            400, "unanswered_requests", f"Answer every pending request of the session together; missing: {missing}"
        )


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


# --- starting, executing, finishing ---------------------------------------------------------------


@dataclass
class StartedRun:
    run: Run
    prepared: PreparedRun
    log: EventLog
    answers: Answers
    rules: list[Rule]
    conversation: dict[str, Any] | None = None


Enqueue = Callable[[Run, PreparedRun, Answers, EventLog], None]


def start_run(prepared: PreparedRun, user: Any, *, enqueue: Enqueue | None = None) -> StartedRun:
    """Record the run, the answers it carries and any rules they remember, in one transaction; with
    `enqueue` the run is queued, and `enqueue` puts it on its lane's queue in the same transaction
    (`agents.queue.start_queued`).

    Raises RunRejected (and writes nothing) when a request it answers was answered meanwhile."""
    request, tenant = prepared.request, prepared.tenant
    queued = enqueue is not None
    with transaction.atomic():
        session = prepared.session
        if session is not None:
            # One turn at a time per session: a second one would run against the same history.
            session = Session.objects.select_for_update().get(pk=session.pk)
            _refuse_if_busy_or_gone(session)
        elif request.session_id:
            try:
                with transaction.atomic():
                    session = Session.objects.create(tenant=tenant, key=request.session_id, agent=prepared.agent)
            except IntegrityError:
                detail = "Another turn started this session at the same moment."
                raise RunRejected(409, "session_busy", detail) from None
        run = Run.objects.create(
            tenant=tenant,
            agent=prepared.agent,
            version=prepared.version,
            session=session,
            previous_run=prepared.previous_run,
            status=RunStatus.QUEUED if queued else RunStatus.RUNNING,
            message=request.message,
            culture=prepared.culture,
            parameters=prepared.bound,
            created_by=_person(user),
            lane=request.lane or DEFAULT_LANE,
            **({} if queued else hold_here()),
        )
        log = EventLog(run)
        log.record(
            EventType.RUN_STARTED,
            {
                "agent": prepared.agent.name,
                "definitionVersion": prepared.version.number,
                "sessionId": request.session_id,
                "culture": prepared.culture or None,
                "parameters": prepared.bound,
                "previousRunId": _id(prepared.previous_run),
            },
        )
        now = timezone.now()
        answers = Answers()
        for pending in prepared.abandoned:
            if not pending.close(RequestStatus.ABANDONED, now):
                detail = f"The request {pending.id} was answered or closed meanwhile."
                raise RunRejected(409, "already_answered", detail)
            # Closed in the conversation too: the model must see that the call never ran, and the engine
            # refuses a new message while the last response still has calls without results.
            KINDS[pending.kind].close(pending, answers, ABANDONED_REASON)
            record_terminated(log, pending)
        for pending in prepared.terminated:
            _deliver_terminated(pending, run, answers, log)
        for pending, payload in prepared.answered:
            _claim(
                pending,
                answered_before=False,
                answer=payload,
                answered_by=_person(user),
                answered_at=now,
                answered_via="run",
                status=RequestStatus.ANSWERED,
                answered_in=run,
                closed_at=now,
            )
        for pending in prepared.stored_answers:
            _claim(
                pending,
                answered_before=True,
                status=RequestStatus.ANSWERED,
                answered_in=run,
                closed_at=pending.closed_at or now,
            )
        for pending in [p for p, _ in prepared.answered] + prepared.stored_answers:
            deliver(pending, answers, log)
        rules = active_rules(prepared.agent, prepared.version)
        if request.message is not None and request.message != "":
            log.record(EventType.USER_MESSAGE, {"content": request.message})
        for name, text in prepared.documents:
            log.record(EventType.DOCUMENT_ATTACHED, {"name": name, "size": len(text.encode())})
        if enqueue is not None:
            enqueue(run, prepared, answers, log)
    closed = [p.id for p in prepared.abandoned] + [p.id for p, _ in prepared.answered]
    notify_requests_closed(run.tenant_id, [str(i) for i in closed])
    conversation = session.conversation if session is not None else None
    return StartedRun(run=run, prepared=prepared, log=log, answers=answers, rules=rules, conversation=conversation)


def active_rules(agent: Agent, version: AgentVersion) -> list[Rule]:
    """The rules a turn of `version` may consult (none to read when no tool asks in mode `always`)."""
    if not version.definition.consults_rules:
        return []
    return list(Rule.objects.filter(agent=agent, revoked_at__isnull=True))


def calls_with_side_effects(run: Run, log: EventLog) -> set[str]:
    """The call ids of tools with side effects that started in `run` (written events and the log's own)."""
    started = {
        event.data.get("callId")
        for event in log.stored
        if event.type == EventType.TOOL_EXECUTION_START and event.data.get("sideEffects")
    }
    written = run.events.filter(type=EventType.TOOL_EXECUTION_START, data__sideEffects=True)
    return started | set(written.values_list("data__callId", flat=True))


def _person(user: Any) -> Any:
    """The user to record as the author, or None for the system and anonymous callers."""
    return user if user is not None and user.is_authenticated else None


def _id(obj: Any) -> str | None:
    return str(obj.pk) if obj is not None else None


def _claim(pending: PendingRequest, *, answered_before: bool, **changes: Any) -> None:
    """Write `changes` only while the request is as `prepare_run` found it: still open, and unanswered
    unless its answer came earlier (from the inbox). A request answered or closed in the meantime (two
    operators, two turns at once) rejects the whole run, so a call is never answered twice."""
    claimed = PendingRequest.objects.filter(
        pk=pending.pk, status=RequestStatus.PENDING, answered_in=None, answer__isnull=not answered_before
    ).update(**changes)
    if not claimed:
        raise RunRejected(409, "already_answered", f"The request {pending.id} was answered or closed meanwhile.")
    for name, value in changes.items():
        setattr(pending, name, value)


ABANDONED_REASON = "The request was abandoned: the session moved on."
TERMINATED_REASONS = {
    RequestStatus.EXPIRED: "The request expired before anyone answered it.",
    RequestStatus.CANCELLED: "The request was cancelled.",
}


def _deliver_terminated(pending: PendingRequest, run: Run, answers: Answers, log: EventLog) -> None:
    """Tell the engine that a call closed without an answer (expired, cancelled) did not run; the
    decision is recorded apart from a human "no"."""
    claimed = PendingRequest.objects.filter(pk=pending.pk, answered_in=None).update(answered_in=run)
    if not claimed:
        raise RunRejected(409, "already_answered", f"The request {pending.id} was delivered meanwhile.")
    reason = TERMINATED_REASONS[RequestStatus(pending.status)]
    kind = KINDS[pending.kind]
    kind.close(pending, answers, reason)
    record_terminated(log, pending)
    base = {"requestId": str(pending.id), "toolName": pending.tool_name, "callId": pending.call_id}
    log.record(
        kind.completed_event,
        {**base, "answeredBy": None, "result": {"kind": pending.status, "reason": reason}},
    )


def record_terminated(log: EventLog, pending: PendingRequest) -> None:
    """The run log's word that `pending` closed without an answer (SPEC section 5: the lifecycle lives on
    the generic request events, the kind on the event)."""
    data = {"requestId": str(pending.id), "kind": pending.status, "toolName": pending.tool_name}
    log.record(EventType.REQUEST_TERMINATED, {**data, "callId": pending.call_id})


@dataclass
class ExecutionResult:
    outcome: TurnOutcome | None
    error: TurnError | None
    cancelled: bool = False


async def execute(started: StartedRun) -> ExecutionResult:
    """Run the engine turn, as a turn this process holds (agents/turns.py); never raises for a failed
    turn (the result says so)."""
    prepared = started.prepared
    message = prepared.request.message if prepared.request.message else None
    if message is None and not started.answers:
        message = ""
    try:
        async with holding(started.run, started.log):
            outcome = await run_turn(
                prepared.version.definition,
                connections=prepared.connections,
                instructions=prepared.instructions,
                conversation=started.conversation,
                message=message,
                documents=prepared.documents,
                answers=started.answers or None,
                rules=started.rules,
                emit=started.log.emit,
                stream=started.log.listener is not None,
            )
    except TurnError as error:
        return ExecutionResult(None, error)
    except asyncio.CancelledError:
        return ExecutionResult(None, None, cancelled=True)
    except Exception as error:
        # Anything else is a bug, but the run must still end `failed` rather than stay `running` forever.
        logger.exception("Run %s failed unexpectedly", started.run.id)
        return ExecutionResult(None, TurnError("engine_error", f"The turn failed unexpectedly: {error}"))
    return ExecutionResult(outcome, None)


def finish_run(started: StartedRun, result: ExecutionResult) -> list[PendingRequest]:
    """Store the turn's outcome: status, output, pending requests, conversation and the event log."""
    run = started.run
    opened: list[PendingRequest] = []
    try:
        with transaction.atomic():
            _store_outcome(started, result, opened)
    except _Reclaimed:
        logger.warning("Run %s was reclaimed while its turn ran; this outcome is dropped", run.id)
        run.refresh_from_db()
        return []
    notify_requests_opened(opened)
    return opened


class _Reclaimed(Exception):
    pass


def _agent_deleted(session: Session) -> bool:
    """Whether the session's agent is deleted, read under the session's lock (taken here, as the deletion
    takes it: a deletion running now is either seen whole or waits for this turn's outcome)."""
    Session.objects.select_for_update().filter(pk=session.pk).values_list("pk").first()
    return Agent.objects.filter(pk=session.agent_id, deleted_at__isnull=False).exists()


def abandon_requests_of_deleted_agent(
    requests: QuerySet[PendingRequest], now: datetime, current: EventLog | None = None
) -> list[PendingRequest]:
    """Close the still pending ones of `requests` `abandoned`, with an answer stored on them or not: their
    agent is deleted, so no run will ever carry them. Each closing goes into the log of the run that asked,
    after its last event (`current` is the log of a run finishing now, whose events are not all stored)."""
    closed = [
        pending
        for pending in requests.filter(status=RequestStatus.PENDING).select_related("run").order_by("opened_at", "id")
        if pending.close(RequestStatus.ABANDONED, now, answered_too=True)
    ]
    logs = {current.run.pk: current} if current is not None else {}
    for pending in closed:
        if pending.run_id not in logs:
            logs[pending.run_id] = EventLog.resume(pending.run)
        record_terminated(logs[pending.run_id], pending)
    for log in logs.values():
        if log is not current:
            log.flush()
    return closed


def _store_outcome(started: StartedRun, result: ExecutionResult, opened: list[PendingRequest]) -> None:
    run, log, prepared = started.run, started.log, started.prepared
    run.lease_expires_at = run.queued_input = None
    run.finished_at = timezone.now()
    outcome = result.outcome
    # A turn that would leave requests open (new ones, or answers handed back) checks that its agent still
    # exists, under the session's lock first, as the deletion takes it (agents/deletion.py).
    gone = run.session is not None and (outcome is None or bool(outcome.pending)) and _agent_deleted(run.session)
    if result.cancelled:
        run.status = RunStatus.CANCELLED
        log.record(EventType.RUN_CANCELLED, {})
    elif outcome is None:
        assert result.error is not None
        run.status = RunStatus.FAILED
        run.error = {"code": result.error.code, "message": result.error.message}
        log.record(EventType.RUN_FAILED, {"error": run.error})
    elif outcome.pending and run.session is None:
        # A sessionless run cannot be answered: its requests would have nowhere to go.
        run.status = RunStatus.FAILED
        run.error = {
            "code": "session_required",
            "message": "The agent asked for approval, input or a client tool; send a sessionId to answer.",
        }
        log.record(EventType.RUN_FAILED, {"error": run.error})
    else:
        run.usage = outcome.usage
        log.record(EventType.ASSISTANT_USAGE, outcome.usage)
        deadline = prepared.version.definition.request_deadline_seconds
        expires_at = run.finished_at + timedelta(seconds=deadline) if deadline else None
        for call in outcome.pending:
            pending = PendingRequest(
                tenant=run.tenant,
                agent=run.agent,
                session=run.session,
                run=run,
                kind=call.kind,
                tool_name=call.tool_name,
                call_id=call.call_id,
                arguments=call.arguments,
                message=call.message,
                requested_schema=call.requested_schema,
                engine_state=call.engine_state,
                expires_at=expires_at,
            )
            opened.append(pending)
            log.record(KINDS[call.kind].requested_event, {k: v for k, v in pending.wire().items() if k != "kind"})
        if opened:
            kinds = {p.kind for p in opened}
            run.status = awaiting_status(kinds)
            log.record(EventType.RUN_AWAITING, {"status": run.status, "pendingRequests": [p.wire() for p in opened]})
        else:
            run.status = RunStatus.COMPLETED
            run.output = outcome.output
            log.record(EventType.RUN_COMPLETED, {"output": outcome.output})
        if run.session is not None:
            run.session.conversation = outcome.conversation
    if outcome is None:
        # The answers this run carried were not consumed: keep them for the next turn of the session,
        # except that a call with side effects that already ran is never run again.
        ran = calls_with_side_effects(run, log)
        for pending in PendingRequest.objects.filter(answered_in=run, status=RequestStatus.ANSWERED, call_id__in=ran):
            pending.answer = {**(pending.answer or {}), "ranInFailedTurn": True}
            pending.save(update_fields=["answer"])
        PendingRequest.objects.filter(answered_in=run, status=RequestStatus.ANSWERED).update(
            status=RequestStatus.PENDING, answered_in=None, closed_at=None
        )
        PendingRequest.objects.filter(answered_in=run).update(answered_in=None)
    if opened:
        PendingRequest.objects.bulk_create(opened)
    if gone:
        # The agent was deleted while this turn ran: what it leaves open closes as the deletion closed the rest.
        assert run.session is not None
        abandon_requests_of_deleted_agent(run.session.requests.all(), run.finished_at, current=log)
        opened.clear()
    # Only the holder of the run's lease finishes it: a run reclaimed meanwhile (its lease ran out)
    # was finished or queued again by the reclaimer, and this outcome rolls back.
    fields = ["status", "output", "usage", "error", "finished_at", "lease_expires_at", "queued_input"]
    held = Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING, worker_id=run.worker_id)
    if not held.update(**{name: getattr(run, name) for name in fields}):
        raise _Reclaimed
    if run.session is not None:
        run.session.last_run = run
        run.session.updated_at = run.finished_at
        fields = ["last_run", "updated_at"] + (["conversation"] if outcome is not None else [])
        run.session.save(update_fields=fields)
    log.flush()


def run_result(run: Run, pending: list[PendingRequest] | None = None) -> dict[str, Any]:
    if pending is None:
        pending = list(run.requests.filter(status=RequestStatus.PENDING))
    return {
        "runId": str(run.id),
        "sessionId": run.session.key if run.session else None,
        "agent": run.agent.name,
        "definitionVersion": run.version.number,
        "status": run.status,
        "output": run.output,
        "pendingRequests": [p.wire() for p in pending],
        "parameters": run.parameters,
        "previousRunId": str(run.previous_run_id) if run.previous_run_id else None,
        "lane": run.lane,
        "usage": {"requests": 0, "inputTokens": 0, "outputTokens": 0, **run.usage},
        "error": run.error,
    }
