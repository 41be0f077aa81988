"""AG-UI 1.0 for hosted agents (SPEC section 16): what a `RunAgentInput` asks of Airlock, and the AG-UI event stream
that answers it.

An input either starts a turn or answers the session's pending requests, never both:
- **answers**: its `resume` entries (each answering the interrupt of one request, `payload` = the respond fields,
  `status: "cancelled"` denying or cancelling as the request's kind allows) and its tool messages for the session's
  open client-tool calls (frontend tools). Every answer is checked first, all of them before any is given, so a bad
  one changes nothing; then each goes through the respond contract (`approvals.actions.answer_request`), one request
  at a time, as the inbox's would: a request answered meanwhile elsewhere is reported (`already_resolved`), never
  answered twice. The stream then follows the continuation the answers (or the inbox) started.
- **a turn**: the last message, a user message, is the run's message in the session `threadId` (`context` entries
  ride as documents; `tools`, the frontend tools, as the run's client tools, less those the definition declares
  itself; `forwardedProps.airlock` may carry a run request's `parameters`, `culture`, `abandonPending`,
  `definitionVersion`, `lane`, `attachmentIds`), started through `agents.actions.start_run` and streamed live. A
  frontend tool's call ends the run `success` with its id in `pendingToolCallIds`; the continuation its result starts
  offers the run's frontend tools again (`agents.prepare.run_client_tools`).
"""

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import BaseEvent, RunAgentInput, RunErrorEvent, TextPart, Tool, ToolMessage, UserMessage
from ag_ui.encoder import EventEncoder
from asgiref.sync import sync_to_async
from django.utils import timezone
from pydantic import ValidationError

from agents.api.stream_routes import follow_run, stream_run
from agents.models import Agent, Run, Session
from agents.prepare import live_version
from agents.run_lifecycle import StartedRun
from agents.run_requests import RunRequest
from approvals.actions import answer_request
from approvals.actions.answers import acting, refuse_by_requirement, response_refusal
from approvals.decisions import Actor
from approvals.kinds import KINDS
from approvals.models import TERMINAL, PendingRequest, RequestStatus
from approvals.responses import TAKEN, Response, ResponseRefused
from console.models import Membership
from console.problems import Refused
from protocols.agui_events import TOOL_CALL_KINDS, AguiTranslator, agui_run_started, resume_outcomes

logger = logging.getLogger(__name__)

ENCODER = EventEncoder()

# The run request fields `forwardedProps.airlock` may set; the message, the session and the answers are the input's.
FORWARDED = frozenset(
    {"parameters", "culture", "documents", "attachmentIds", "abandonPending", "definitionVersion", "lane"}
)
# Respond fields a resume payload may not set: the request is the interrupt's, and an AG-UI thread stays one session
# (an answer at an earlier checkpoint would fork it), its runs' ids are Airlock's.
NOT_IN_PAYLOAD = frozenset({"requestId", "checkpointId", "newRunId"})


class AguiRefused(Refused):
    """An AG-UI input Airlock refuses; nothing was changed."""


@dataclass
class InputAnswers:
    """The answers an input carries, checked: each open request with the respond contract's answer to it, and the
    requests answered meanwhile elsewhere (reported, not answered again)."""

    given: list[tuple[PendingRequest, Response]] = field(default_factory=list)
    already: list[PendingRequest] = field(default_factory=list)
    answered_calls: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.given or self.already)

    @property
    def asked_runs(self) -> set[uuid.UUID]:
        return {pending.run_id for pending, _ in self.given} | {pending.run_id for pending in self.already}


def thread_session(agent: Agent, thread_id: str) -> Session | None:
    """The live session `threadId` names, None before its first run; 409 when it is another agent's."""
    session = Session.objects.live().select_related("agent").filter(tenant=agent.tenant, key=thread_id).first()
    if session is not None and session.agent_id != agent.pk:
        detail = f"The thread {thread_id!r} is a session of the agent {session.agent.name!r}."
        raise AguiRefused("session_agent_mismatch", detail, 409)
    return session


def user_text(message: UserMessage) -> str:
    """A user message's text: its string content, or its text parts joined (400 when it has no text)."""
    if isinstance(message.content, str):
        return message.content
    texts = [part.text for part in message.content if isinstance(part, TextPart)]
    if not texts:
        raise AguiRefused("unsupported_content", "The user message has no text part; Airlock agents read text.")
    return "\n".join(texts)


def trailing_user_text(payload: RunAgentInput) -> str | None:
    last = payload.messages[-1] if payload.messages else None
    return user_text(last) if isinstance(last, UserMessage) else None


def read_answers(membership: Membership, actor: Actor, session: Session | None, payload: RunAgentInput) -> InputAnswers:
    """The answers the input carries (its resume entries, its tool messages for open client-tool calls), each checked
    as the respond contract would check it, none given yet; raises AguiRefused or ResponseRefused for the first one
    refused."""
    answers = InputAnswers()
    if session is None:
        if payload.resume:
            detail = f"No interrupt {payload.resume[0].interrupt_id} in this thread (it has no run yet)."
            raise AguiRefused("unknown_interrupt", detail)
        return answers
    requests = PendingRequest.objects.select_related("run__version", "session__agent", "agent", "tenant")
    in_session = requests.filter(tenant=membership.tenant, session=session)
    seen: set[str] = set()
    for entry in payload.resume or []:
        if entry.interrupt_id in seen:
            raise AguiRefused("duplicate_interrupt", f"The interrupt {entry.interrupt_id} is answered twice.")
        seen.add(entry.interrupt_id)
        pending = _interrupt(in_session, entry.interrupt_id)
        if _answered(pending):
            answers.already.append(pending)
            continue
        response = _resume_response(pending, entry.status, entry.payload)
        _check(membership, actor, pending, response)
        answers.given.append((pending, response))
    client_calls = {
        p.call_id: p
        for p in in_session.filter(kind__in=TOOL_CALL_KINDS, status=RequestStatus.PENDING, answer__isnull=True)
    }
    for message in payload.messages:
        if not isinstance(message, ToolMessage) or message.tool_call_id not in client_calls:
            continue  # the conversation's history: a result given before, or no call of this session
        pending = client_calls.pop(message.tool_call_id)
        response = _tool_response(pending, message)
        _check(membership, actor, pending, response)
        answers.given.append((pending, response))
        answers.answered_calls.add(message.tool_call_id)
    return answers


def _interrupt(requests: Any, interrupt_id: str) -> PendingRequest:
    try:
        request_id = uuid.UUID(interrupt_id)
    except ValueError:
        request_id = None
    pending = requests.filter(id=request_id).first() if request_id is not None else None
    if pending is None:
        raise AguiRefused("unknown_interrupt", f"No interrupt {interrupt_id} in this thread.")
    if pending.kind in TOOL_CALL_KINDS:
        detail = (
            f"{interrupt_id} is a frontend tool call: send its result as a tool message (toolCallId {pending.call_id})."
        )
        raise AguiRefused("unknown_interrupt", detail)
    now = timezone.now()
    expired = pending.expires_at is not None and pending.expires_at <= now and pending.answer is None
    if pending.status in TERMINAL or expired:
        status = RequestStatus.EXPIRED if expired else pending.status
        raise AguiRefused("interrupt_closed", f"The interrupt {interrupt_id} was closed: {status}.", 409)
    return pending


def _answered(pending: PendingRequest) -> bool:
    return pending.answer is not None or pending.status == RequestStatus.ANSWERED


def _resume_response(pending: PendingRequest, status: str, payload: Any) -> Response:
    """A resume entry as the respond contract's answer: `payload` an object of respond fields, any other value the
    `json` answer (read as the kind's type); `cancelled` the kind's way to say no (`reason`/`text` kept from an
    object payload)."""
    fields: dict[str, Any]
    if status == "cancelled":
        cancel = KINDS[pending.kind].cancel_answer
        if cancel is None:
            raise AguiRefused("not_cancellable", f"A {pending.kind} cannot be cancelled; answer it.")
        fields = dict(cancel)
        given = payload if isinstance(payload, dict) else {}
        for key in ("reason", "text"):
            if key in fields and isinstance(given.get(key), str) and given[key].strip():
                fields[key] = given[key]
    elif isinstance(payload, dict):
        fields = dict(payload)
        refused = sorted(NOT_IN_PAYLOAD & set(fields))
        if refused:
            raise AguiRefused("invalid_resume_payload", f"A resume payload may not set {', '.join(refused)}.")
    elif payload is None:
        raise AguiRefused("invalid_resume_payload", f"The resume entry for {pending.id} has no payload.")
    else:
        fields = {"json": payload}
    try:
        return Response.model_validate({**fields, "requestId": str(pending.id)})
    except ValidationError as invalid:
        errors = [
            {"field": ".".join(str(p) for p in error["loc"]) or "payload", "message": error["msg"]}
            for error in invalid.errors()
        ]
        raise AguiRefused("invalid_resume_payload", "The resume payload has invalid fields.", errors=errors) from None


def _tool_response(pending: PendingRequest, message: ToolMessage) -> Response:
    """A tool message as the client tool's result: its content (JSON when it parses) or, with `error`, a failure."""
    content: Any = message.content
    if isinstance(content, list):
        content = "\n".join(getattr(part, "text", "") for part in content)
    if message.error:
        fields: dict[str, Any] = {"outcome": "failed", "errorMessage": message.error[:5000]}
    else:
        try:
            result = json.loads(content)
        except ValueError:
            result = content
        fields = {"result": result}
    return Response.model_validate({**fields, "requestId": str(pending.id)})


def _check(membership: Membership, actor: Actor, pending: PendingRequest, response: Response) -> None:
    """What `answer_request` would refuse, asked before any answer is given: the member's right, a requirement's
    refusals, an answer its kind refuses (as AguiRefused, with the respond contract's status as the code)."""
    answering = acting(membership, actor, pending)
    refuse_by_requirement(answering, pending, response)
    refused = response_refusal(pending, response)
    if refused is not None:
        raise AguiRefused(refused.status, refused.message, request_id=refused.request_id)


@dataclass(frozen=True)
class Given:
    """What the answers did: each one's outcome (the respond contract's wire), and the Airlock run to follow."""

    outcomes: list[dict[str, Any]]
    follow: Run | None


def give_answers(
    membership: Membership, actor: Actor, session: Session, answers: InputAnswers, message: str | None
) -> Given:
    """Give each checked answer through the respond contract; the run that goes on with the session: the
    continuation they started, or the one an answer given elsewhere (the inbox) started, if any."""
    if message is not None:
        asked = Run.objects.filter(session=session, message__isnull=False).order_by("-created_at", "-id").first()
        if asked is None or asked.message != message:
            detail = (
                "An input that answers (resume entries, tool results) cannot also start a turn: send the message next."
            )
            raise AguiRefused("message_with_answers", detail)
    outcomes = [
        {"interruptId": str(p.id), "status": "already_resolved", "message": "The request was answered meanwhile."}
        for p in answers.already
    ]
    continuation = None
    for pending, response in answers.given:
        try:
            outcome = answer_request(membership, actor, response)
        except ResponseRefused as refused:  # a right lost since the check: reported, the others stand
            outcomes.append({"interruptId": str(pending.id), "status": refused.code, "message": refused.detail})
            continue
        outcomes.append({"interruptId": str(pending.id), "status": outcome.status, "message": outcome.message})
        if outcome.status in TAKEN and outcome.continuation_run_id:
            continuation = outcome.continuation_run_id
    runs = Run.objects.select_related("agent", "version", "session")
    if continuation is not None:
        return Given(outcomes, runs.get(id=continuation))
    latest = runs.filter(session=session).order_by("-created_at", "-id").first()
    moved_on = latest is not None and latest.id not in answers.asked_runs
    return Given(outcomes, latest if moved_on else None)


def run_request(agent: Agent, payload: RunAgentInput, message: str) -> RunRequest:
    """The run request of a turn of `agent`: the message, the thread's session, `context` as documents, the frontend
    tools the definition does not declare as its client tools and what `forwardedProps.airlock` sets (raises
    RunRejected, 404, for a `definitionVersion` the agent does not have)."""
    forwarded = payload.forwarded_props.get("airlock") if isinstance(payload.forwarded_props, dict) else None
    if forwarded is not None and not isinstance(forwarded, dict):
        raise AguiRefused("invalid_forwarded_props", "`forwardedProps.airlock` must be an object.")
    forwarded = forwarded or {}
    unknown = sorted(set(forwarded) - FORWARDED)
    if unknown:
        detail = f"`forwardedProps.airlock` may set {', '.join(sorted(FORWARDED))}; not {', '.join(unknown)}."
        raise AguiRefused("invalid_forwarded_props", detail)
    documents = list(forwarded.get("documents") or [])
    documents += [{"name": (c.description or "context")[:255], "content": c.value} for c in payload.context or []]
    body = {**forwarded, "documents": documents, "message": message, "sessionId": payload.thread_id}
    number = forwarded.get("definitionVersion")
    tools = _frontend_tools(agent, payload.tools or [], number if type(number) is int else None)
    try:
        return RunRequest.model_validate({**body, "clientTools": [tool for _, tool in tools]})
    except ValidationError as invalid:
        errors = [{"field": _field(error["loc"], tools), "message": error["msg"]} for error in invalid.errors()]
        raise AguiRefused("invalid_request", "The input makes an invalid run request.", errors=errors) from None


def _frontend_tools(agent: Agent, tools: list[Tool], number: int | None) -> list[tuple[int, dict[str, Any]]]:
    """The input's frontend tools as the run's client tools, by their index in `tools`: all but those the definition
    of the version to run declares as its client tools (offered as it declares them). A tool with no `parameters`
    takes none."""
    if not tools:
        return []
    declared = {tool.name for tool in live_version(agent.tenant, agent.name, number).definition.client_tools}
    return [
        (n, {"name": t.name, "description": t.description, "parameters": t.parameters or {"type": "object"}})
        for n, t in enumerate(tools)
        if t.name not in declared
    ]


def _field(loc: tuple[int | str, ...], tools: list[tuple[int, dict[str, Any]]]) -> str:
    """Where a refusal of the run request points, in the input's terms: `clientTools.N…` is `tools.<its index>…`."""
    if len(loc) > 1 and loc[0] == "clientTools" and isinstance(loc[1], int):
        loc = ("tools", tools[loc[1]][0], *loc[2:])
    elif loc[:1] == ("clientTools",):
        loc = ("tools", *loc[1:])
    return ".".join(str(part) for part in loc) or "body"


# --- the streams --------------------------------------------------------------------------------------------------


def _frame(frame: str) -> tuple[str | None, Any]:
    """One SSE frame of Airlock's run stream (`agents.api.stream_routes`): its event name and its decoded data."""
    name, data = None, None
    for line in frame.split("\n"):
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
    return name, data


def _encoded(events: Iterable[BaseEvent]) -> str:
    return "".join(ENCODER.encode(event) for event in events)


def _waiting(result: dict[str, Any]) -> list[PendingRequest]:
    ids = [p["requestId"] for p in result.get("pendingRequests") or []]
    found = PendingRequest.objects.select_related("agent", "run__version").in_bulk(ids)
    return [found[uuid.UUID(i)] for i in ids if uuid.UUID(i) in found]


def _open_in(session: Session) -> list[PendingRequest]:
    requests = PendingRequest.objects.select_related("agent", "run__version")
    return list(requests.filter(session=session).open().order_by("opened_at", "id"))


async def _translated(frames: AsyncIterator[str], translator: AguiTranslator) -> AsyncIterator[str]:
    """Airlock's run stream `frames` as AG-UI events, ending with the run's end; RUN_ERROR if the stream breaks.

    `frames` is read to its own end after its `done`: closed while it waits there, a live turn's stream takes the
    client for gone and hands the turn it has finished to a detached finish, which stores it a second time."""
    done = False
    try:
        async for frame in frames:
            name, data = _frame(frame)
            if name == "done":
                waiting = await sync_to_async(_waiting)(data)
                done = True
                yield _encoded(translator.finished(data, waiting))
            elif isinstance(data, dict) and not done:
                yield _encoded(translator.envelope(data))
        if not done:
            yield _encoded(
                [*translator.close_open(), RunErrorEvent(message="The run's stream ended early.", code="stream_ended")]
            )
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except Exception as error:  # a defect: the client gets the protocol's end, the log the traceback
        logger.error("AG-UI stream failed", exc_info=error)
        yield _encoded(
            [
                *translator.close_open(),
                RunErrorEvent(message="Something went wrong on the server.", code="server_error"),
            ]
        )
    finally:
        await frames.aclose()  # type: ignore[attr-defined]


async def turn_stream(started: StartedRun, payload: RunAgentInput) -> AsyncIterator[str]:
    """A turn started here, streamed live as AG-UI events (deltas included); the turn is stored even when the client
    goes away (`agents.api.stream_routes.stream_run`)."""
    translator = AguiTranslator(payload.thread_id, payload.run_id)
    yield _encoded([agui_run_started(payload.thread_id, payload.run_id, str(started.run.id))])
    async for chunk in _translated(stream_run(started), translator):
        yield chunk


async def answered_stream(
    payload: RunAgentInput, session: Session, given: Given, answered_calls: set[str]
) -> AsyncIterator[str]:
    """The answers' outcomes, then the run that goes on with the session followed to its end as AG-UI events (stored
    events: its text comes whole), or, when none goes on yet (a request still waits), the interrupts still open."""
    follow = given.follow
    translator = AguiTranslator(payload.thread_id, payload.run_id, answered_calls)
    started = agui_run_started(payload.thread_id, payload.run_id, str(follow.id) if follow is not None else None)
    yield _encoded([started, resume_outcomes(given.outcomes)])
    if follow is None:
        waiting = await sync_to_async(_open_in)(session)
        status = "awaiting" if waiting else "completed"
        yield _encoded(translator.finished({"status": status}, waiting))
        return
    async for chunk in _translated(follow_run(follow.id, 0), translator):
        yield chunk
