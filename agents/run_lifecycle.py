"""Starting and executing a run checked by `agents.prepare.prepare_run`.

`record_run` records the run, the answers it carries and any remembered rules in one transaction;
`execute` runs the engine turn; `agents.outcomes.finish_run` stores the outcome.
"""

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Model
from django.utils import timezone

from agents import checkpoints
from agents.engine import Answers, TurnBlocked, TurnContext, TurnError, TurnOutcome, run_turn
from agents.events import EventLog, EventType, last_event_of_session
from agents.lanes import DEFAULT_LANE
from agents.models import AWAITING, Agent, AgentVersion, Run, RunStatus, Session
from agents.payloads import Abort, DocumentAttached, RequestTerminated, RunCancelled, RunStarted, UserMessage
from agents.policies import PolicyScope
from agents.prepare import PreparedRun, RunRejected, refuse_if_busy_or_gone
from agents.requirements import needs_several
from agents.turns import hold_here, holding
from approvals.decisions import Actor, Decision, Via, announced_together, carry, carry_closed, decide
from approvals.kinds import close, closed, hand_over, to_engine
from approvals.models import PendingRequest, RequestStatus, Rule
from approvals.remembered_rules import rules_in_force
from console import telemetry
from console.inserts import insert_rows

logger = logging.getLogger(__name__)


@dataclass
class StartedRun:
    run: Run
    prepared: PreparedRun
    log: EventLog
    answers: Answers
    # The rules the turn may consult; None for a queued run's until the thread that runs its turn reads them.
    rules: list[Rule] | None
    conversation: dict[str, Any] | None = None
    # The interception records of the turn's policies, as they happen (stored with the outcome).
    records: list[dict[str, Any]] = field(default_factory=list)
    # How many of the log's events were recorded before the turn (what starting the run wrote: kept should the
    # turn's outcome not be storable).
    before_turn: int = field(init=False)

    def __post_init__(self) -> None:
        self.before_turn = len(self.log.stored)


# Puts a run not saved yet on its lane's queue (`agents.queue.enqueue`): keeps what its turn needs on it and sets its
# task, so the run is written once; gives the rows to write with it (its task, when claimed in this process).
Enqueue = Callable[[Run, PreparedRun], Sequence[Model]]


def record_run(prepared: PreparedRun, user: Any, *, enqueue: Enqueue | None = None) -> StartedRun:
    """Record the run, the answers it carries and any rules they remember, in one transaction; with
    `enqueue` the run is queued, and `enqueue` puts it on its lane's queue in the same transaction
    (`agents.queue.start_queued`).

    Raises RunRejected (and writes nothing) when a request it answers was answered meanwhile."""
    request, tenant = prepared.request, prepared.tenant
    queued = enqueue is not None
    with announced_together(), transaction.atomic():
        session = prepared.session
        after: Any = None  # the session's last event, which the run's first one follows (SPEC section 10)
        if session is not None:
            # One turn at a time per session: a second one would run against the same history.
            sessions = Session.objects.select_for_update(of=("self",)).annotate(last_event=last_event_of_session())
            session = sessions.get(pk=session.pk)
            after = session.last_event
            refuse_if_busy_or_gone(session)
        elif request.session_id:
            try:  # no savepoint: the refusal leaves the transaction, which rolls back whole
                session = Session.objects.create(tenant=tenant, key=request.session_id, agent=prepared.agent)
            except IntegrityError:
                detail = "Another turn started this session at the same moment."
                raise RunRejected(409, "session_busy", detail) from None
        run = new_run(
            tenant,
            prepared.agent,
            prepared.version,
            session,
            user,
            status=RunStatus.QUEUED if queued else RunStatus.RUNNING,
            run_id=prepared.run_id,
            previous_run=prepared.previous_run,
            message=request.message,
            culture=prepared.culture,
            parameters=prepared.bound,
            documents=[list(document) for document in prepared.documents],
            client_tools=[tool.model_dump(mode="json") for tool in prepared.client_tools],
            lane=request.lane or DEFAULT_LANE,
            **({} if queued else hold_here()),
        )
        insert_rows(enqueue(run, prepared) if enqueue is not None else [], [run])
        log = EventLog(run, look_back=False)
        log.parent = after
        log.record(_started(run, prepared))
        now = timezone.now()
        answers = Answers()
        closing = [*prepared.abandoned, *(pending for pending, _ in prepared.answered)]
        if len(closing) > 1:
            # Each closing writes its receipt under the tenant's chain lock: take the requests' locks first, in one
            # order, so no answer given meanwhile holds one of them while waiting for the chain (a deadlock).
            locked = PendingRequest.objects.select_for_update().filter(pk__in=[p.pk for p in closing]).order_by("pk")
            list(locked.values_list("pk", flat=True))
        abandoned = Decision(Actor.closing(RequestStatus.ABANDONED), closing=RequestStatus.ABANDONED)
        for pending in prepared.abandoned:
            if not decide(pending, abandoned, now):
                detail = f"The request {pending.id} was answered or closed meanwhile."
                raise RunRejected(409, "already_answered", detail)
            # Closed in the conversation too: the model must see that the call never ran, and the engine
            # refuses a new message while the last response still has calls without results.
            close(pending, answers, ABANDONED_REASON)
            record_terminated(log, pending)
        for pending in prepared.terminated:
            _carry_terminated(pending, run, answers)
        # Answers given in this request, then answers stored before (from the inbox): a request answered
        # or closed since prepare_run found it rejects the whole run, so a call is never answered twice.
        answerer = Actor.person(author(user), Via.RUN)
        for pending, payload in prepared.answered:
            away = prepared.on_behalf_of.get(pending.pk)
            actor = answerer.acting_for(away) if away is not None else answerer
            if not decide(pending, Decision(actor, payload, carried_in=run), now):
                detail = f"The request {pending.id} was answered or closed meanwhile."
                raise RunRejected(409, "already_answered", detail)
        if not carry(prepared.stored_answers, run, now):
            detail = "A request whose stored answer this run carries was carried or closed meanwhile."
            raise RunRejected(409, "already_answered", detail)
        carried = [*prepared.answered, *((pending, None) for pending in prepared.stored_answers)]
        for pending, _ in carried:
            hand_over(pending, answers, log)
        rules = None if queued else active_rules(prepared.agent, prepared.version, session)
        if request.message and prepared.version.definition.hooks is None:
            # Under policies the engine records it once `input` gave its verdict (SPEC section 8).
            log.record(UserMessage(content=request.message))
        for name, text in prepared.documents:
            log.record(DocumentAttached(name=name, size=len(text.encode())))
        if queued:
            log.flush()  # what starting it wrote; the worker's turn goes on from there
    conversation = session.conversation if session is not None else None
    return StartedRun(run=run, prepared=prepared, log=log, answers=answers, rules=rules, conversation=conversation)


def run_started(
    run: Run, agent_name: str, version_number: int, session_key: str | None, replay_of: Any = None
) -> RunStarted:
    """The `run.started` of `run` (its first event), hosted or external: every run's is built here."""
    return RunStarted(
        agent=agent_name,
        definitionVersion=version_number,
        sessionId=session_key,
        culture=run.culture or None,
        parameters=run.parameters,
        previousRunId=str(run.previous_run_id) if run.previous_run_id else None,
        **({"replayOf": str(replay_of.pk)} if replay_of is not None else {}),
    )


def _started(run: Run, prepared: PreparedRun) -> RunStarted:
    name, number, key = prepared.agent.name, prepared.version.number, prepared.request.session_id
    return run_started(run, name, number, key, prepared.replay_of)


def begin_queued(prepared: PreparedRun, run: Run, log: EventLog, carried: list[PendingRequest]) -> Answers:
    """Record the start of a run queued by the answer that completed its session (`agents.queue.queue_continuation`),
    which wrote nothing but the run, its task and the answer: `run.started`, then the answers it carries (`carried`,
    answered) handed to the engine, as `record_run` records them. Before its turn, into its log (stored with the turn's
    outcome: should its worker die first, the next one begins it again)."""
    log.record(_started(run, prepared))
    answers = Answers()
    for pending in carried:
        hand_over(pending, answers, log)
    return answers


def active_rules(agent: Agent, version: AgentVersion, session: Session | None) -> list[Rule]:
    """The rules a turn of `version` in `session` may consult, in one query: in force (not revoked, not expired)
    and remembered "always" or in this session (none to read when no tool asks in mode `always`)."""
    content = version.definition
    if not content.consults_rules:
        return []
    # A rule is one person's say: none stands for a tool whose approvals need several (SPEC section 14).
    rules = rules_in_force(agent, session)
    return [r for r in rules if not needs_several(content.routing_for("approval", r.tool_name).require)]


def calls_with_side_effects(run: Run, log: EventLog) -> set[str]:
    """The call ids of tools with side effects that started in `run` (written events and the log's own)."""
    started = {event.data.get("toolCallId") for event in log.stored if event.side_effects}
    written = run.events.filter(type=EventType.TOOL_EXECUTION_START, side_effects=True)
    return started | set(written.values_list("data__toolCallId", flat=True))


def new_run(
    tenant: Any,
    agent: Agent,
    version: AgentVersion,
    session: Session | None,
    user: Any,
    *,
    status: str,
    run_id: Any = None,
    **fields: Any,
) -> Run:
    """Every run, built here and nowhere else (issue 49): an API or console start and a replay (`record_run`), a
    continuation queued with its last answer (`agents.actions.sessions`), an external agent's request
    (`approvals.actions.external`). Its tenant, its agent at `version`, its session and the run before it there,
    who started it (`author`), its status; `fields` what that way of starting knows (message, parameters, lane,
    queued input, records). Not saved: the caller saves it in its own transaction."""
    return Run(
        **({"id": run_id} if run_id else {}),
        tenant=tenant,
        agent=agent,
        version=version,
        session=session,
        status=status,
        created_by=author(user),
        traceparent=telemetry.caller_traceparent(),
        **fields,
    )


def author(user: Any) -> Any:
    """The user to record as the author, or None for the system and anonymous callers."""
    return user if user is not None and user.is_authenticated else None


ABANDONED_REASON = "The request was abandoned: the session moved on."
TERMINATED_REASONS = {
    RequestStatus.EXPIRED: "The request expired before anyone answered it.",
    RequestStatus.CANCELLED: "The request was cancelled.",
}


def _carry_terminated(pending: PendingRequest, run: Run, answers: Answers) -> None:
    """Mark a request closed without an answer (expired, cancelled) carried by `run`, and tell the engine that its
    call did not run; the decision is recorded apart from a human "no"."""
    if not carry_closed(pending, run):
        raise RunRejected(409, "already_answered", f"The request {pending.id} was delivered meanwhile.")
    # Its closing was recorded when it closed (`record_terminated`); the model learns of it now.
    close(pending, answers, TERMINATED_REASONS[RequestStatus(pending.status)])


def carried_ids(prepared: PreparedRun) -> list[str]:
    """The requests a run carries, in the order `record_run` hands them to the engine: those it abandons, the
    closed ones (expired, cancelled), then the answered ones. A queued run keeps these ids, not its answers."""
    carried = [*prepared.abandoned, *prepared.terminated, *(p for p, _ in prepared.answered), *prepared.stored_answers]
    return [str(pending.id) for pending in carried]


def carried_answers(ids: list[str]) -> Answers:
    """The answers of the requests `ids` (`carried_ids`), rebuilt from the database as `record_run` gave them to
    the engine, recording nothing (a queued run's worker); none to read when the run carries none."""
    answers = Answers()
    carried = carried_requests(ids)
    for pending in carried:
        if pending.status == RequestStatus.ABANDONED:
            close(pending, answers, ABANDONED_REASON)
        elif pending.status in TERMINATED_REASONS:
            close(pending, answers, TERMINATED_REASONS[RequestStatus(pending.status)])
    for pending in carried:
        if pending.status == RequestStatus.ANSWERED:
            to_engine(pending, answers)
    return answers


def carried_requests(ids: list[str]) -> list[PendingRequest]:
    """The requests `ids` (`carried_ids`), in that order, with who answered each, in one query (none without ids)."""
    if not ids:
        return []
    found = PendingRequest.objects.select_related("answered_by").in_bulk(ids)
    return [found[pk] for pk in map(uuid.UUID, ids) if pk in found]


def record_terminated(log: EventLog, pending: PendingRequest) -> None:
    """The run log's word that `pending` closed without an answer: the SDK's completion of its kind, then
    `request.terminated` with how (SPEC section 5: the lifecycle lives on the generic request events)."""
    with log.speaking_for(pending.asker_id):
        log.record(closed(pending))
        log.record(
            RequestTerminated(
                requestId=str(pending.id),
                kind=pending.status,  # type: ignore[arg-type]  # a closed request's status
                toolCallId=pending.call_id,
                toolName=pending.tool_name or None,
            )
        )


def cancel_waiting(run: Run, user: Any) -> bool:
    """End a run that waits on requests `cancelled` (SPEC section 9): its open requests close `cancelled`
    (an answer stored but not carried yet too), each with `request.terminated` in the run's log; the next
    turn of the session tells the model the calls did not run. False when the run waits on nothing any
    more (every request answered and carried: the session moved on)."""
    now = timezone.now()
    with announced_together(), transaction.atomic():
        # The run's own session's requests: a fork's copies (same run, another session) wait in the fork.
        waiting = list(
            run.requests.select_for_update().filter(
                status=RequestStatus.PENDING, answered_in=None, session=run.session_id
            )
        )
        if not waiting or not Run.objects.filter(pk=run.pk, status__in=AWAITING).update(
            status=RunStatus.CANCELLED, finished_at=now
        ):
            return False
        log = EventLog.resume(run)
        cancelling = Actor.closing(RequestStatus.CANCELLED, author(user))
        cancelled = Decision(cancelling, closing=RequestStatus.CANCELLED, answered_too=True)
        closed = [pending for pending in waiting if decide(pending, cancelled, now)]
        for pending in closed:
            record_terminated(log, pending)
        record_cancelled(log, getattr(author(user), "username", None))
        log.flush()
    run.status, run.finished_at = RunStatus.CANCELLED, now
    return True


def record_cancelled(log: EventLog, by: str | None = None) -> None:
    """`run.cancelled`, after the SDK's `abort` (SPEC section 10; the session stream's `session.idle` after it
    says `aborted`)."""
    log.record(Abort(reason="user_initiated"))
    log.record(RunCancelled(cancelledBy=by))


def _policy_scope(started: StartedRun) -> PolicyScope:
    """Where the turn's policies (its agent's and its sub-agents', built by the engine from their versions'
    `hooks`) record: the run's records and events."""
    run = started.run
    return PolicyScope(str(run.id), started.prepared.request.session_id, str(run.tenant_id), started.records)


@dataclass
class ExecutionResult:
    outcome: TurnOutcome | None
    error: TurnError | None
    cancelled: bool = False


async def execute(started: StartedRun) -> ExecutionResult:
    """Run the engine turn, as a turn this process holds (agents/turns.py); never raises for a failed
    turn (the result says so). Traced, its span is the run's `invoke_agent <agent>` (SPEC section 18)."""
    if not telemetry.tracing():
        return await _execute(started)
    run, prepared = started.run, started.prepared
    key = prepared.request.session_id or ""
    attributes: dict[str, str | int] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": prepared.agent.name,
        "gen_ai.conversation.id": key,
        "airlock.run.id": str(run.id),
        "airlock.tenant": prepared.tenant.slug,
        "airlock.agent.version": prepared.version.number,
    }
    carried = {"gen_ai.agent.name": prepared.agent.name, "gen_ai.conversation.id": key}
    name = f"invoke_agent {prepared.agent.name}"
    with telemetry.run_span(name, run.id, run.traceparent, attributes, carried) as span:
        result = await _execute(started)
        span.set_attribute("airlock.run.outcome", _traced_outcome(started, result))
        if isinstance(result.error, TurnError) and not isinstance(result.error, TurnBlocked):
            telemetry.mark_failed(span, result.error.code)
        elif result.outcome is not None and result.outcome.pending and run.session_id is None:
            telemetry.mark_failed(span, "session_required")  # agents.outcomes: a sessionless run cannot wait
        return result


def _traced_outcome(started: StartedRun, result: ExecutionResult) -> str:
    """How the turn ended, as its span says it: completed, awaiting, failed, blocked or cancelled."""
    if result.cancelled:
        return "cancelled"
    if isinstance(result.error, TurnBlocked):
        return "blocked"
    if result.outcome is None or (result.outcome.pending and started.run.session_id is None):
        return "failed"
    return "awaiting" if result.outcome.pending else "completed"


async def _execute(started: StartedRun) -> ExecutionResult:
    prepared = started.prepared
    message = prepared.request.message if prepared.request.message else None
    if message is None and not started.answers:
        message = ""
    assert started.rules is not None, "a queued run's rules are read before its turn (agents.queue.execute_queued)"
    try:
        async with holding(started.run, started.log):
            turn = TurnContext(
                instructions=prepared.instructions,
                conversation=started.conversation,
                message=message,
                emit=started.log.emit,
                documents=prepared.documents,
                answers=started.answers or None,
                rules=started.rules,
                stream=started.log.listener is not None,
                client_tools=prepared.client_tools,
            )
            outcome = await run_turn(
                prepared.version.definition,
                turn,
                connections=prepared.connections,
                version=prepared.version.number,
                scope=_policy_scope(started),
                subagents=prepared.subagents,
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


def run_result(run: Run, pending: list[PendingRequest] | None = None) -> dict[str, Any]:
    if pending is None:
        # Only its own session's: a fork's copies of the run's requests belong to the fork (SPEC section 9).
        pending = list(run.requests.filter(status=RequestStatus.PENDING, session=run.session_id))
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
        "forkedFrom": checkpoints.forked_from(run.session) if run.session else None,
        "lane": run.lane,
        "usage": {"requests": 0, "inputTokens": 0, "outputTokens": 0, **run.usage},
        "error": run.error,
    }
