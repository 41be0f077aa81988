"""An Airlock run as an A2A task (SPEC section 16): the task is the run that carried a client's message, with the
runs that went on from it in its session (continuations and next turns that bring answers, no message of their
own); its context is the session. Its state is its last run's; a pause (`awaiting_*`) is `input-required`, with
the requests still waiting, in the inbox's wire form (`GET /api/requests/{id}`), as a DataPart. Read from the
database on every call: an answer given in the inbox, a queued continuation run by a worker, a cancel from the
console move the task on with nothing of the A2A side told."""

import uuid
from typing import Any

from a2a.types.a2a_pb2 import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from agents.models import AWAITING, Agent, Event, Run, RunStatus
from agents.payloads import EventType
from approvals.external_wire import SHOWN, request_wire
from approvals.models import PendingRequest, RequestStatus

STATES: dict[str, TaskState] = {
    RunStatus.QUEUED: TaskState.TASK_STATE_SUBMITTED,
    RunStatus.RUNNING: TaskState.TASK_STATE_WORKING,
    RunStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
    RunStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
    # A policy refused the run (SPEC section 8): the agent declined the task.
    RunStatus.BLOCKED: TaskState.TASK_STATE_REJECTED,
    **dict.fromkeys(AWAITING, TaskState.TASK_STATE_INPUT_REQUIRED),
}
# A task in one of these takes no message any more (a new one in its context starts the next task).
FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.BLOCKED)
# The most runs one task spans (a task whose answers went round this often is read up to here).
MOST_RUNS = 200
HISTORY_TYPES = (EventType.USER_MESSAGE, EventType.ASSISTANT_MESSAGE)


def task_head(agent: Agent, task_id: str) -> Run | None:
    """The run a task id names, of `agent` (and so of its tenant) and in a session; None for anything else."""
    try:
        run_id = uuid.UUID(task_id)
    except ValueError:
        return None
    runs = Run.objects.select_related("session", "agent", "version")
    return runs.filter(id=run_id, agent=agent, session__isnull=False).first()


def task_runs(head: Run) -> list[Run]:
    """`head` and the runs of its session after it that carry no message (they went on with its answers), up to the
    next run with a message of its own: that one is the next task."""
    later = (
        Run.objects.select_related("session", "agent", "version")
        .filter(session=head.session_id, created_at__gte=head.created_at)
        .exclude(id=head.id)
        .order_by("created_at", "id")
    )
    chain = [head]
    for run in later[:MOST_RUNS]:
        if run.message:
            break
        chain.append(run)
    return chain


def waiting_requests(run: Run) -> list[PendingRequest]:
    """The requests of `run` that still wait for an answer (open, none given yet), oldest first."""
    found = PendingRequest.objects.select_related(*SHOWN).filter(
        run=run, session=run.session_id, status=RequestStatus.PENDING, answer__isnull=True
    )
    return list(found.order_by("opened_at", "id"))


def data_part(value: Any) -> Part:
    part = Part()
    ParseDict(value, part.data)
    return part


def plain(value: Value) -> Any:
    """A protobuf `Value` as the JSON it was sent as; numbers come back as floats, whole ones are ints again."""
    return _whole(MessageToDict(value))


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value


def agent_message(run: Run, context_id: str, task_id: str, *parts: Part) -> Message:
    return Message(
        message_id=f"{run.id}:status",
        context_id=context_id,
        task_id=task_id,
        role=Role.ROLE_AGENT,
        parts=list(parts),
    )


def status_of(run: Run, task_id: str) -> TaskStatus:
    """The task's status as its last run `run` stands: the words of its end, or the requests it waits on."""
    context_id = run.session.key if run.session else ""
    status = TaskStatus(state=STATES.get(run.status, TaskState.TASK_STATE_UNSPECIFIED))
    status.timestamp.FromDatetime(run.finished_at or run.created_at)
    parts: list[Part] = []
    if run.status in AWAITING:
        waiting = [request_wire(pending) for pending in waiting_requests(run)]
        asked = ", ".join(f"{wire['kind']} {wire['toolName'] or ''}".strip() for wire in waiting)
        answer = 'answer with a DataPart of respond fields ({"requestId": …, "approved": true} or a list)'
        parts = [
            Part(text=f"Waiting on {len(waiting)} request(s): {asked}; {answer}."),
            data_part({"pendingRequests": waiting}),
        ]
    elif run.status == RunStatus.COMPLETED and run.output:
        parts = [Part(text=run.output)]
    elif run.status in (RunStatus.FAILED, RunStatus.BLOCKED) and run.error:
        parts = [
            Part(text=str(run.error.get("message") or run.error.get("detail") or run.error)),
            data_part({"error": run.error}),
        ]
    elif run.status == RunStatus.CANCELLED:
        parts = [Part(text="The run was cancelled.")]
    if parts:
        status.message.CopyFrom(agent_message(run, context_id, task_id, *parts))
    return status


def history_of(runs: list[Run], task_id: str) -> list[Message]:
    """The task's conversation from its session's events: each user message and each reply with words."""
    context_id = runs[0].session.key if runs[0].session else ""
    events = Event.objects.filter(run__in=[run.id for run in runs], type__in=HISTORY_TYPES, agent_id="")
    history = []
    for event in events.order_by("timestamp", "run", "sequence"):
        content = event.data.get("content") or ""
        if not content:
            continue
        role = Role.ROLE_USER if event.type == EventType.USER_MESSAGE else Role.ROLE_AGENT
        history.append(
            Message(
                message_id=str(event.id),
                context_id=context_id,
                task_id=task_id,
                role=role,
                parts=[Part(text=content)],
            )
        )
    return history


def task_of(head: Run, *, history: bool = True) -> Task:
    """The task `head` started, as it stands now."""
    runs = task_runs(head)
    last = runs[-1]
    task_id = str(head.id)
    task = Task(id=task_id, context_id=head.session.key if head.session else "", status=status_of(last, task_id))
    task.artifacts.extend(
        Artifact(artifact_id=str(run.id), name="output", parts=[Part(text=run.output)]) for run in runs if run.output
    )
    if history:
        task.history.extend(history_of(runs, task_id))
    metadata = Struct()
    metadata.update({"airlock": {"runId": str(last.id), "status": last.status, "agent": head.agent.name}})
    task.metadata.CopyFrom(metadata)
    return task


def last_run(head: Run) -> Run:
    return task_runs(head)[-1]
