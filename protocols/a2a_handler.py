"""The A2A request handler of hosted agents (SPEC section 16): the a2a-sdk's `RequestHandler`, whose methods its
JSON-RPC dispatcher calls for the current protocol's names and, through its 0.3 adapter, for `message/send`,
`message/stream`, `tasks/get`, `tasks/cancel`.

Not the SDK's `DefaultRequestHandler` with an `AgentExecutor` and a `TaskStore`: that one keeps each task's state in
its store and an in-process `ActiveTask`, written only by the executor it runs, while an Airlock task moves without
it (an answer in the inbox, a continuation a worker of another process runs, a cancel from the console). Here the
run table is the task store: every call reads the task from it (`protocols.a2a_tasks`), and every change goes
through Airlock's one door for it: `agents.actions.start_run` for a message, the respond contract for answers
(`protocols.a2a_answers`), `agents.actions.do_cancel_run` for a cancel.

Database work runs on the request's thread (`protocols.a2a_app` gives each request a `ThreadSensitiveContext`)."""

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_history_length
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from pydantic import ValidationError

from agents import actions
from agents.models import AWAITING, Agent, AgentVersion, Run, RunStatus
from agents.payloads import EventType
from agents.prepare import RunRejected
from agents.run_lifecycle import StartedRun, execute
from agents.run_requests import RunRequest
from approvals.decisions import Actor, Via
from approvals.kinds import KINDS
from console.json_bodies import unstorable
from console.models import Membership
from protocols import a2a_answers
from protocols.a2a_answers import TaskAnswerRefused
from protocols.a2a_tasks import FINISHED, STATES, last_run, task_head, task_of, waiting_requests

CALLER = "airlock.caller"
# How long `message/send` waits for the continuation its answers queued (a worker runs it) before it answers with
# the task still working; `message/stream` and `tasks/resubscribe` follow a task this long at most.
SETTLE_SECONDS = 30.0
FOLLOW_SECONDS = 300.0
POLL_SECONDS = 0.2
# How long a cancel waits for a running turn to stop (its keeper stops it within a second).
CANCEL_SECONDS = 3.0
# Statuses a task works in (no message is taken, answers included).
WORKING = (RunStatus.QUEUED, RunStatus.RUNNING)
# The runs of a session streamed here whose client went away: finished all the same.
_DETACHED: set["asyncio.Future[None]"] = set()


@dataclass(frozen=True)
class Caller:
    """Who calls (an API token's member) which agent (its current version), at which endpoint."""

    membership: Membership
    token_id: int
    agent: Agent
    version: AgentVersion
    url: str

    @property
    def actor(self) -> Actor:
        return Actor.person(self.membership.user, Via.A2A, f"token:{self.token_id}")


def _caller(context: ServerCallContext) -> Caller:
    caller = context.state.get(CALLER)
    if not isinstance(caller, Caller):  # every request passes protocols.a2a_app first
        raise InvalidRequestError(message="The request reached the A2A handler unauthenticated.")
    return caller


def _db[**P, T](function: Callable[P, T]) -> Callable[P, Any]:
    """`function` on the request's thread."""
    return sync_to_async(function, thread_sensitive=True)


def a2a_refusal(code: str, detail: str, status: int = 400) -> A2AError:
    """Airlock's refusal (`code`, the API's problem code) as the A2A error that says it."""
    data = {"code": code}
    if status == 404:
        return TaskNotFoundError(message=detail, data=data)
    if status in (403, 409):
        return UnsupportedOperationError(message=detail, data=data)
    return InvalidParamsError(message=detail, data=data)


def text_of(message: Message) -> str:
    """The words of the message's text parts; a file part is refused (Airlock takes attachments by its own API)."""
    texts = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind in ("raw", "url"):
            detail = "This agent takes text and DataParts of answers, not files."
            raise ContentTypeNotSupportedError(message=detail, data={"code": "unsupported_part"})
        if kind == "text":
            texts.append(part.text)
    text = "\n".join(texts)
    if unstored := unstorable(text):  # a NUL (protobuf's text is UTF-8): PostgreSQL stores no text with one
        detail = f"The message's text {unstored[0]['message']}."
        raise InvalidParamsError(message=detail, data={"code": "invalid_request"})
    return text


def _start(caller: Caller, message: Message, *, queued: bool) -> StartedRun:
    """Start the turn a new task is: the message's words in its context's session (a new one without a context)."""
    if any(part.HasField("data") for part in message.parts):
        detail = "Answers (DataParts) go on the task that waits for them: send them with its taskId."
        raise InvalidParamsError(message=detail, data={"code": "task_required"})
    session = message.context_id or f"a2a-{uuid.uuid4()}"
    try:
        request = RunRequest(message=text_of(message), session_id=session)
    except ValidationError as error:
        detail = f"Not a context Airlock takes: {error.errors()[0]['msg']}"
        raise InvalidParamsError(message=detail, data={"code": "invalid_context"}) from None
    try:
        return actions.start_run(caller.membership, caller.membership.user, caller.agent.name, request, queued=queued)
    except RunRejected as rejected:
        raise a2a_refusal(rejected.code, rejected.detail, rejected.status) from None


def _run_here(caller: Caller, message: Message) -> Run:
    return actions.run_to_end(_start(caller, message, queued=False)).run


def _queue(caller: Caller, message: Message) -> Run:
    return _start(caller, message, queued=True).run


def _head(caller: Caller, task_id: str) -> Run:
    head = task_head(caller.agent, task_id)
    if head is None:
        detail = f"The agent {caller.agent.name} has no task {task_id}."
        raise TaskNotFoundError(message=detail, data={"code": "task_not_found"})
    return head


def _answer(caller: Caller, message: Message) -> Run:
    """Give the answers the message carries to the requests its task waits on (all checked first: a refused one
    gives none); the task's first run."""
    head = _head(caller, message.task_id)
    if message.context_id and head.session and message.context_id != head.session.key:
        detail = f"The task {head.id} is of the context {head.session.key}, not {message.context_id}."
        raise InvalidParamsError(message=detail, data={"code": "context_mismatch"})
    last = last_run(head)
    if last.status in FINISHED:
        detail = f"The task has ended ({last.status}); a new message in its context starts the next task."
        raise UnsupportedOperationError(message=detail, data={"code": "task_ended"})
    if last.status not in AWAITING:
        detail = "The task is working and waits on nothing; follow it (tasks/get) or cancel it."
        raise UnsupportedOperationError(message=detail, data={"code": "task_working"})
    try:
        raw = a2a_answers.answers_in(message) or _worded(last, text_of(message))
        checked = a2a_answers.check(caller.membership, caller.actor, last, a2a_answers.read(raw))
        a2a_answers.give(caller.membership, caller.actor, checked)
    except TaskAnswerRefused as refused:
        raise InvalidParamsError(message=refused.detail, data=refused.data()) from None
    return head


def _worded(last: Run, text: str) -> list[Any]:
    """A message of words only answers the one request waiting when that request takes words (a question, a
    plan's revision); else the answers must come as DataParts."""
    waiting = waiting_requests(last)
    if text and len(waiting) == 1 and "text" in KINDS[waiting[0].kind].fields:
        return [{"requestId": str(waiting[0].id), "text": text}]
    ids = ", ".join(str(pending.id) for pending in waiting)
    detail = f"The task waits on {len(waiting)} request(s) ({ids}): answer with a DataPart of respond fields."
    raise InvalidParamsError(message=detail, data={"code": "answer_required"})


def _cancel(caller: Caller, task_id: str) -> tuple[Run, str | None]:
    head = _head(caller, task_id)
    last = last_run(head)
    if last.status in FINISHED:
        raise TaskNotCancelableError(message=f"The task has ended ({last.status}).")
    try:
        return head, actions.do_cancel_run(caller.membership, caller.membership.user, last)
    except RunRejected as rejected:
        raise a2a_refusal(rejected.code, rejected.detail, rejected.status) from None


def _tasks(caller: Caller, params: ListTasksRequest) -> ListTasksResponse:
    """The agent's tasks (the runs that carried a message, in a session), newest first, paged by offset."""
    heads = Run.objects.select_related("session", "agent", "version").filter(
        agent=caller.agent, session__isnull=False, message__gt=""
    )
    if params.context_id:
        heads = heads.filter(session__key=params.context_id)
    size = params.page_size or 50
    if not 1 <= size <= 100:
        raise InvalidParamsError(message="pageSize must be between 1 and 100.")
    offset = int(params.page_token) if params.page_token.isdigit() else 0
    found = [task_of(head, history=params.history_length > 0) for head in heads.order_by("-created_at", "-id")]
    if params.status:
        found = [task for task in found if task.status.state == params.status]
    page = found[offset : offset + size]
    following = str(offset + size) if offset + size < len(found) else ""
    return ListTasksResponse(tasks=page, next_page_token=following, page_size=size, total_size=len(found))


def _ended(state: TaskState) -> bool:
    return state not in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)


class AirlockRequestHandler(RequestHandler):
    """Hosted agents' tasks, for the SDK's JSON-RPC dispatcher (current protocol and 0.3)."""

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        caller = _caller(context)
        validate_history_length(params.configuration)
        message, immediately = params.message, params.configuration.return_immediately
        if message.task_id:
            head = await _db(_answer)(caller, message)
            if not immediately:
                await self._settled(head, SETTLE_SECONDS)
        else:
            head = await _db(_queue if immediately else _run_here)(caller, message)
        task = await _db(task_of)(head)
        return apply_history_length(task, params.configuration)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        caller = _caller(context)
        validate_history_length(params.configuration)
        message = params.message
        if message.task_id:
            head = await _db(_answer)(caller, message)
            async for event in self._follow(head):
                yield event
            return
        started = await _db(partial(_start, queued=False))(caller, message)
        async for event in self._stream(started):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        caller = _caller(context)
        validate_history_length(params)
        head = await _db(_head)(caller, params.id)
        return apply_history_length(await _db(task_of)(head), params)

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await _db(_tasks)(_caller(context), params)  # type: ignore[no-any-return]

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        head, done = await _db(_cancel)(_caller(context), params.id)
        if done is None:
            raise TaskNotCancelableError(message="The task waits on nothing any more: there is nothing to cancel.")
        if done == "cancelling":
            await self._settled(head, CANCEL_SECONDS)
        return await _db(task_of)(head)  # type: ignore[no-any-return]

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        head = await _db(_head)(_caller(context), params.id)
        last = await _db(last_run)(head)
        if last.status in FINISHED:
            raise UnsupportedOperationError(message=f"The task has ended ({last.status}): there is nothing to follow.")
        async for event in self._follow(head):
            yield event

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError

    async def _settled(self, head: Run, seconds: float) -> None:
        """Wait until the task stops working (its continuation ran, or it was cancelled), or `seconds` pass."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            last = await _db(last_run)(head)
            if last.status not in WORKING:
                return
            await asyncio.sleep(POLL_SECONDS)

    async def _follow(self, head: Run) -> AsyncGenerator[Event, None]:
        """The task as it stands, then each change of its state (read every POLL_SECONDS), until it ends or waits
        again: an answer's continuation runs on a worker, not here."""
        task = await _db(task_of)(head)
        yield task
        state, outputs = task.status.state, {artifact.artifact_id for artifact in task.artifacts}
        deadline = time.monotonic() + FOLLOW_SECONDS
        while not _ended(state) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
            task = await _db(task_of)(head, history=False)
            for artifact in task.artifacts:
                if artifact.artifact_id not in outputs:
                    outputs.add(artifact.artifact_id)
                    yield TaskArtifactUpdateEvent(
                        task_id=task.id, context_id=task.context_id, artifact=artifact, last_chunk=True
                    )
            if task.status.state != state:
                state = task.status.state
                yield TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)

    async def _stream(self, started: StartedRun) -> AsyncGenerator[Event, None]:
        """A new task's turn, run here as the client reads: the task, the reply's words as they come (one artifact,
        appended to within a reply), and its end."""
        run = started.run
        task_id, context_id = str(run.id), started.prepared.request.session_id or ""
        first = await _db(task_of)(run)
        yield first
        arrivals: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def listener(envelope: dict[str, Any]) -> None:
            await arrivals.put(envelope)

        started.log.listener = listener
        turn = asyncio.ensure_future(execute(started))
        try:
            working = TaskStatus(state=TaskState.TASK_STATE_WORKING)
            yield TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=working)
            # The reply being said: each model response's words replace the one before (`append` false), so the
            # artifact ends as the run's output, its last reply.
            saying = None
            while not (turn.done() and arrivals.empty()):
                getter = asyncio.ensure_future(arrivals.get())
                done, _ = await asyncio.wait({getter, turn}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    continue
                envelope = getter.result()
                if envelope["type"] != EventType.ASSISTANT_MESSAGE_DELTA or not envelope["data"].get("deltaContent"):
                    continue
                data = envelope["data"]
                words = Artifact(artifact_id=task_id, name="output", parts=[Part(text=data["deltaContent"])])
                append = saying == data.get("messageId")
                yield TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, artifact=words, append=append)
                saying = data.get("messageId")
            await _db(actions.finish)(started, turn.result())
        except (asyncio.CancelledError, GeneratorExit):
            # The client went away; the turn still finishes and is stored (as agents.api.stream_routes does).
            started.log.listener = None
            detached = asyncio.ensure_future(_finish_detached(turn, started))
            _DETACHED.add(detached)
            detached.add_done_callback(_DETACHED.discard)
            raise
        ended = await _db(task_of)(run, history=False)
        yield TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=ended.status)


async def _finish_detached(turn: "asyncio.Future[Any]", started: StartedRun) -> None:
    # Outlives its request, so on a pool thread of its own, its connection closed after.
    await database_sync_to_async(actions.finish, thread_sensitive=False)(started, await turn)


__all__ = ["CALLER", "STATES", "AirlockRequestHandler", "Caller", "a2a_refusal"]
