"""A gateway's calls nobody was asked about (SPEC section 15): a tool in approval mode `never` under no policies runs
at once, as in a hosted turn, with no request and no receipt; its run is recorded after the client has its result,
many calls in one write (`gateway.writes.Recorder`)."""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from agents.events import EventLog
from agents.models import AgentVersion, Event, Run, RunStatus, Session
from agents.payloads import RunCompleted, ToolExecutionComplete, ToolExecutionStart
from agents.run_lifecycle import new_run, run_started
from approvals.actions.external import session_of
from console.models import Membership


@dataclass(frozen=True)
class PassedCall:
    """A gateway's call of a tool in approval mode `never` under no policies (SPEC section 15), after it ran: who
    called (`membership`) through which gateway version, in which Airlock session (`session_key`), the tool's name as
    the gateway offers it, the call id, the arguments, and what became of it (success, the result, the error)."""

    membership: Membership
    version: AgentVersion
    session_key: str
    call: tuple[str, str, dict[str, Any]]
    outcome: tuple[bool, Any, str | None]
    at: datetime


def record_passed_calls(calls: list[PassedCall]) -> list[int]:
    """Record gateway calls nobody was asked about, together: as a hosted turn's such calls, no request and no
    receipt, each a run of its session with its events (`run.started`, `tool.execution_start`/`complete`,
    `run.completed`). One transaction and a session read once, whatever the number of calls. The sessions written
    to, whose streams the caller wakes (`agents.live.wake_session`) from its event loop."""
    try:
        return _record_passed(calls)
    except IntegrityError:  # a session made meanwhile by another process for the same MCP session: found now
        return _record_passed(calls)


def _record_passed(calls: list[PassedCall]) -> list[int]:
    runs: list[Run] = []
    events: list[Event] = []
    sessions: dict[tuple[Any, str], tuple[Session, uuid.UUID | None]] = {}
    with transaction.atomic():
        for passed in calls:
            version, (tool_name, call_id, arguments) = passed.version, passed.call
            success, result, error = passed.outcome
            key = (version.agent_id, passed.session_key)
            if key not in sessions:
                session = session_of(version, passed.session_key, passed.at)
                # The session's chain goes on after its last run's last event (indexed), not a search of all its
                # events (`session_last_event`), which grew with a long MCP session.
                last = None
                if session.last_run_id is not None:
                    events_of_last = Event.objects.filter(run_id=session.last_run_id).order_by("-sequence")
                    last = events_of_last.values_list("id", flat=True).first()
                sessions[key] = (session, last)
            session, parent = sessions[key]
            run = new_run(
                passed.membership.tenant,
                version.agent,
                version,
                session,
                passed.membership.user,
                status=RunStatus.COMPLETED,
                previous_run_id=session.last_run_id,
                created_at=passed.at,
                finished_at=passed.at,
            )
            # The session's chain: after its last stored event, read once; then after the run recorded before.
            log = EventLog(run, look_back=False)
            log.parent = parent
            log.record(run_started(run, version.agent.name, version.number, session.key))
            log.record(ToolExecutionStart(toolCallId=call_id, toolName=tool_name, arguments=arguments))
            failure = None if success else (error or "failed")
            log.record(ToolExecutionComplete.of(call_id, value=result, error=failure))
            log.record(RunCompleted(output=None))
            runs.append(run)
            events += log.stored
            session.last_run_id, session.updated_at = run.pk, passed.at
            sessions[key] = (session, log.stored[-1].id)
        Run.objects.bulk_create(runs)
        Event.objects.bulk_create(events)
        for session, _ in sessions.values():
            Session.objects.filter(pk=session.pk).update(last_run_id=session.last_run_id, updated_at=session.updated_at)
    return [session.pk for session, _ in sessions.values()]
