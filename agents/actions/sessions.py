"""Going on with a session (SPEC section 9): its continuation once every open request has its answer, and a
fork from an earlier turn.

The continuation is queued on the lane of the run that asked, so the answer that starts it returns at once;
the answers were committed before (`approvals.actions.answer_request` stores each with a conditional update), so of
two last answers given at once both see the session complete and one starts the turn (the other finds the
session busy). A fork is a new session made by `agents.checkpoints.branch`; every inbox hears of its copies of
the requests once it is committed.
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.binding import BindingError, bind_parameters, render_instructions, resolve_culture
from agents.checkpoints import branch, request_copies
from agents.models import Checkpoint, Run, RunStatus, Session
from agents.prepare import RunRejected, live_version, prepare_run
from agents.queue import queue_continuation, start_queued
from agents.run_lifecycle import new_run
from agents.run_requests import RunRequest
from agents.signals import requests_opened
from approvals.models import PendingRequest, RequestStatus


def continue_after(
    pending: PendingRequest, answer: dict[str, Any], user: Any, write: Callable[[Run | None], bool], *, last: bool
) -> tuple[bool, Run | None]:
    """Write `user`'s `answer` to `pending` and go on with its session: the one route of a continuation after an
    answer. `write(run)` is the decision's conditional write (carried by `run` when one is given), False when another
    decision came first. `last`: no other request of the session waited when the answer read it, so its continuation
    is built from the run that asked and queued with the answer in one transaction (`queue_continuation`); otherwise,
    or when that cannot be (a version named, a rule remembered, the chosen id taken, the session busy or gone), the
    answer is written alone and the session's answers are read again (`continue_session`). Whether the answer was
    written, and the continuation it started (None while another request waits)."""
    run = _continuation_of(pending, answer, user) if last else None
    if run is not None:
        queued = run  # the one `write` carries, for mypy's sake
        try:
            written = queue_continuation(queued, pending, lambda: write(queued))
            return written, queued if written else None
        except (IntegrityError, RunRejected):
            pass
    if not write(None):
        return False, None
    # Committed (its own conditional update) before the continuation reads the session's answers: of two last
    # answers given at once, each on its own connection, one sees the other's, and the run continues once.
    return True, continue_session(user, pending.session, last=pending if last else None, asked=pending.run)


def continue_session(
    user: Any, session: Session, *, last: PendingRequest | None = None, asked: Run | None = None
) -> Run | None:
    """Start the continuation run once no open request of the session is left without its answer; None while
    one is (or when another answer started it meanwhile). `user` is who gave the last answer (None when the
    system closed the last request). A caller that knows them passes the `last` request, answered (committed)
    when no other request of the session waited to be carried, and the run that `asked` (the session's last,
    with its version); they are read otherwise."""
    # The answers not carried yet, in one query: one missing means a request still waits.
    if last is not None:
        stored: list[Any] = [last.answer]
    else:
        uncarried = session.requests.filter(status=RequestStatus.PENDING, answered_in=None)
        stored = list(uncarried.values_list("answer", flat=True))
    if any(answer is None for answer in stored):
        return None
    # The continuation runs the version that asked unless an answer named another (SPEC section 9), on its
    # lane (its parameters and culture repeat as well), through the queue: the answer returns at once.
    if asked is None or asked.pk != session.last_run_id:
        runs = Run.objects.select_related("version")
        asked = runs.filter(pk=session.last_run_id).first() if session.last_run_id else None
    session.last_run = asked  # the previous run of the continuation, not read again
    given = [answer for answer in stored if isinstance(answer, dict)]
    chosen_version = next((a["definitionVersion"] for a in given if a.get("definitionVersion")), None)
    chosen_id = next((a["newRunId"] for a in given if a.get("newRunId")), None)
    try:
        request = RunRequest(
            session_id=session.key,
            definition_version=chosen_version or (asked.version.number if asked else None),
            lane=asked.lane if asked else None,
        )
        if chosen_version is not None:
            version = live_version(session.tenant, session.agent.name, chosen_version)
        else:
            version = asked.version if asked else live_version(session.tenant, session.agent.name, None)
        version.agent = session.agent
        prepared = prepare_run(session.tenant, version, request, session, [last] if last is not None else None)
        prepared.run_id = uuid.UUID(chosen_id) if chosen_id else None
        try:
            started = start_queued(prepared, user)
        except IntegrityError:  # the chosen id was taken since the answer was checked: a fresh one
            prepared.run_id = None
            started = start_queued(prepared, user)
    except RunRejected:
        # Another answer started the continuation at the same moment (the session is busy), or the
        # answers were consumed by a run request meanwhile: either way the turn is on its way.
        return None
    return started.run


def _continuation_of(pending: PendingRequest, answer: dict[str, Any], user: Any) -> Run | None:
    """The continuation that `answer`, the last one the session waits for, starts: built from the run that asked,
    reading nothing, not saved, for `agents.queue.queue_continuation`, which queues it with the answer in one
    transaction. None when it is started as any run (`continue_session`): an answer that names a version or
    remembers a rule (its rule is made as the run starts), a request that is not of the session's last run, a
    session or agent deleted, parameters the version no longer binds."""
    session, asked = pending.session, pending.run
    named = answer.get("definitionVersion") or answer.get("remember")
    if named or asked.pk != session.last_run_id or session.deleted_at or session.agent.deleted_at:
        return None
    content = asked.version.definition
    try:
        bound = bind_parameters(content, asked.parameters)
    except BindingError:
        return None
    chosen = answer.get("newRunId")
    return new_run(
        pending.tenant,
        session.agent,
        asked.version,
        session,
        user,
        status=RunStatus.QUEUED,
        run_id=uuid.UUID(chosen) if chosen else None,
        previous_run=asked,
        culture=asked.culture,
        parameters=bound,
        documents=[],
        client_tools=asked.client_tools,
        lane=asked.lane,
        queued_input={
            "instructions": render_instructions(resolve_culture(content, asked.culture), bound),
            "documents": [],
            "carried": [str(pending.id)],
            "leftOpen": [],
        },
    )


class ForkRefused(Exception):
    """A fork that cannot be made; nothing was changed."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


@dataclass(frozen=True)
class Fork:
    """The new session, and the checkpoint (the turn) it starts from."""

    session: Session
    checkpoint: Checkpoint


def fork_session(run: Run) -> Fork:
    """Fork the run's session from this turn, without an answer (SPEC section 9): a new session whose
    conversation is the one the turn's checkpoint holds, with copies of the requests open there; the original
    is untouched. Raises ForkRefused for a turn that did not end in a session (`no_checkpoint`), the session's
    latest turn (`latest_turn`: its next message goes on from there) and a session or agent deleted
    (`session_deleted`)."""
    checkpoint = Checkpoint.objects.select_related("session", "run", "version").filter(run=run).first()
    if checkpoint is None:
        raise ForkRefused("no_checkpoint", "This turn has not ended in a session: there is no point to fork it from.")
    if not Checkpoint.objects.filter(session=checkpoint.session_id, number__gt=checkpoint.number).exists():
        detail = "This is the session's latest turn: its next message goes on from here, no fork."
        raise ForkRefused("latest_turn", detail)
    copies = list(request_copies(checkpoint, timezone.now()).values())
    with transaction.atomic():
        session = branch(checkpoint, copies)
        if session is None:
            raise ForkRefused("session_deleted", "The session or its agent was deleted: nothing to fork.")
        transaction.on_commit(partial(requests_opened.send, Session, requests=copies))
    return Fork(session, checkpoint)
