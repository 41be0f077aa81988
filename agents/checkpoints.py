"""Checkpoints and forks (SPEC section 9): the state of a session after each of its runs ended, and a new
session that starts from an earlier one.

A checkpoint is recorded once per ended run (`record`, called where `agents.run_lifecycle` stores the outcome). A
conversation's messages only grow from one turn to the next, so a checkpoint keeps just the messages
appended since the checkpoint before it, and names the full copy its chain starts from (`root`). It is a
full copy itself when the history before it changed (the previous checkpoint's digest no longer matches the
start of the conversation) and every `FULL_COPY_EVERY` checkpoints, so rebuilding a conversation
(`conversation_at`) reads a bounded chain, in one query.

A fork (`branch`) is a new session whose conversation is a checkpoint's, with copies of the requests that were
open at that checkpoint: an answer given at an earlier checkpoint goes on from there (`fork`), and so does an
operator's next message after "Fork from here" on an earlier turn; the original session is never touched.
"""

import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import JSONField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import JSONObject

from agents.models import Checkpoint, Run, Session
from agents.requirements import next_step_at
from approvals.decisions import Decision, decide
from approvals.models import PendingRequest, RequestStatus
from console.inserts import insert_rows
from console.sql import Prepared

# The longest chain of deltas behind a checkpoint, its full copy included.
FULL_COPY_EVERY = 32


def _digests(messages: Iterable[dict[str, Any]], at: int) -> tuple[str | None, str]:
    """The digest of the first `at` messages (None when there are fewer) and of them all."""
    digest = hashlib.sha256()
    prefix = digest.hexdigest() if at == 0 else None
    for index, message in enumerate(messages, start=1):
        digest.update(json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
        digest.update(b"\n")
        if index == at:
            prefix = digest.hexdigest()
    return prefix, digest.hexdigest()


def with_latest_checkpoint(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` with their session's latest checkpoint as `latest_checkpoint` (what `record` reads of it: its number,
    root, length and digest; None when there is none), read with the run as its turn begins. It is still the latest
    when the turn ends: only a turn's end records one, and the session has one turn at a time (a run reclaimed
    meanwhile stores no outcome)."""
    latest = Checkpoint.objects.filter(session=OuterRef("session")).order_by("-number")
    read = latest.values(
        read=JSONObject(
            id="id", number="number", root_id="root_id", root_number="root__number", length="length", digest="digest"
        )
    )[:1]
    return runs.annotate(latest_checkpoint=Subquery(read, output_field=JSONField()))


# The session's latest checkpoint, what `record_checkpoint` reads of it, as every turn's end reads it (issue 56).
_LATEST = Prepared(
    lambda session: (
        Checkpoint.objects.filter(session=session)
        .order_by("-number")
        .select_related("root")
        .only("id", "number", "root_id", "length", "digest", "root__number")
    ),
    session=int,
)


def _latest(run: Run, session: Session) -> Checkpoint | None:
    """The session's latest checkpoint, as `with_latest_checkpoint` read it with the run, else read now."""
    if not hasattr(run, "latest_checkpoint"):
        return _LATEST.first(session=session.pk)
    read = run.latest_checkpoint
    if read is None:
        return None
    latest = Checkpoint(id=uuid.UUID(read["id"]), number=read["number"], length=read["length"], digest=read["digest"])
    if read["root_id"] is not None:
        latest.root = Checkpoint(id=uuid.UUID(read["root_id"]), number=read["root_number"])
    return latest


def record_checkpoint(
    run: Run, *, first: bool = False, open_requests: list[PendingRequest] | None = None
) -> Checkpoint | None:
    """Record the state of `run`'s session now that the run has ended: its conversation, its open requests,
    the version and the run's status. None for a sessionless run. `first`: the run is the session's first turn
    (no checkpoint before it to read); `open_requests`: the session's open requests, when the caller knows them.

    Called in the transaction that stores the run's outcome, after the session's row is written: that row's
    lock numbers the session's checkpoints one after the other (one turn at a time per session besides)."""
    session = run.session
    if session is None:
        return None
    conversation = session.conversation
    messages: list[dict[str, Any]] = list(conversation.get("messages", [])) if conversation else []
    previous = None if first else _latest(run, session)
    prefix, digest = _digests(messages, previous.length if previous is not None else 0)
    root: Checkpoint | None = None
    if previous is not None and prefix == previous.digest:
        root = previous.root or previous
        if previous.number + 1 - root.number >= FULL_COPY_EVERY:
            root = None
    if open_requests is not None:
        open_ids = [r.id for r in sorted(open_requests, key=lambda pending: (pending.opened_at, pending.id))]
    else:
        waiting = session.requests.filter(status=RequestStatus.PENDING, answered_in=None)
        open_ids = list(waiting.order_by("opened_at", "id").values_list("id", flat=True))
    checkpoint = Checkpoint(
        tenant_id=session.tenant_id,
        session=session,
        number=previous.number + 1 if previous is not None else 1,
        run=run,
        status=run.status,
        version_id=run.version_id,
        open_requests=[str(i) for i in open_ids],
        root=root,
        messages=messages[previous.length :] if root is not None and previous is not None else messages,
        state={k: v for k, v in conversation.items() if k != "messages"} if conversation is not None else None,
        length=len(messages),
        digest=digest,
    )
    insert_rows([checkpoint])
    return checkpoint


def conversation_at(checkpoint: Checkpoint) -> dict[str, Any] | None:
    """The session's conversation as it was at `checkpoint` (None: it had none yet)."""
    if checkpoint.state is None:
        return None
    if checkpoint.root_id is None:
        messages = list(checkpoint.messages)
    else:
        chain = Checkpoint.objects.filter(
            Q(pk=checkpoint.root_id) | Q(root_id=checkpoint.root_id, number__lte=checkpoint.number)
        )
        parts = list(chain.order_by("number").values_list("number", "messages"))
        numbers = [number for number, _ in parts]
        if numbers != list(range(numbers[0], checkpoint.number + 1)):
            raise ValueError(f"The checkpoints behind {checkpoint.pk} are not all there: {numbers}")
        messages = [message for _, delta in parts for message in delta]
    if len(messages) != checkpoint.length:
        raise ValueError(f"Checkpoint {checkpoint.pk} rebuilds {len(messages)} messages, not {checkpoint.length}")
    return {"messages": messages, **checkpoint.state}


def checkpoints_of(session: Session) -> QuerySet[Checkpoint]:
    """The session's checkpoints, newest first, without their stored conversation."""
    return session.checkpoints.select_related("version").defer("messages", "state").order_by("-number")


def wire(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "checkpointId": str(checkpoint.id),
        "runId": str(checkpoint.run_id) if checkpoint.run_id else None,
        "status": checkpoint.status,
        "createdAt": checkpoint.created_at.isoformat(),
        "definitionVersion": checkpoint.version.number,
        # The requests an answer may be given to at this checkpoint.
        "openRequestIds": checkpoint.open_requests,
    }


def forked_from(session: Session) -> dict[str, Any] | None:
    """`{sessionId, checkpointId}` of the checkpoint a fork started from; None for a session that is no fork."""
    if session.forked_from_session_id is None and session.forked_from_checkpoint_id is None:
        return None
    origin = session.forked_from_session
    return {
        "sessionId": origin.key if origin is not None else None,
        "checkpointId": str(session.forked_from_checkpoint_id) if session.forked_from_checkpoint_id else None,
    }


def request_copies(checkpoint: Checkpoint, now: datetime) -> dict[uuid.UUID, PendingRequest]:
    """Unsaved copies of the requests open at `checkpoint`, by the id of each original (see `fork`): the same
    question asked again, by the run that asked it, with a deadline counted from `now`."""
    deadline = checkpoint.version.definition.request_deadline_seconds
    originals = PendingRequest.objects.select_related("agent", "run__version").filter(
        session=checkpoint.session_id, id__in=checkpoint.open_requests
    )
    return {
        original.id: PendingRequest(
            tenant_id=original.tenant_id,
            agent=original.agent,
            run=original.run,
            kind=original.kind,
            tool_name=original.tool_name,
            call_id=original.call_id,
            arguments=original.arguments,
            message=original.message,
            requested_schema=original.requested_schema,
            engine_state=original.engine_state,
            policy=original.policy,
            approvers=original.approvers,  # routed as the original was (SPEC sections 11 and 14)
            require=original.require,
            escalation=original.escalation,  # its steps count from the copy's opening
            escalation_at=next_step_at(original.escalation, now + timedelta(microseconds=index), 0),
            requested_by_id=original.requested_by_id,
            # A microsecond apart, in the originals' order: the requests of a session are listed by when they opened,
            # and copies opened at one instant would come in whatever order the database keeps them.
            opened_at=now + timedelta(microseconds=index),
            expires_at=now + timedelta(seconds=deadline) if deadline else None,
        )
        for index, original in enumerate(originals.order_by("opened_at", "id"))
    }


@dataclass
class Forked:
    session: Session
    answered: PendingRequest
    # The copies still waiting for an answer: new cards in every inbox.
    waiting: list[PendingRequest]


def branch(checkpoint: Checkpoint, copies: list[PendingRequest]) -> Session | None:
    """A new session (its key a new UUID) that starts from `checkpoint`: its conversation, its run as the
    last one (the next run's previous run, version, lane and parameters), and `copies` (of `request_copies`:
    the requests open there, none when it waited on nothing) as its requests. Nothing of the original changes,
    and nothing of the new session exists until all of it does. None when the session or its agent was deleted.

    Both ways to fork make their session here: an answer given at an earlier checkpoint (`fork`) and "Fork from
    here" on an earlier turn (`agents.actions.fork_session`). The original session's row is locked meanwhile, as
    the deletions lock it: a deletion running now either comes first (no fork) or sees the fork's requests and
    closes them too."""
    origin = checkpoint.session
    assert checkpoint.run is not None, "a fork needs the run its checkpoint ended"
    with transaction.atomic():
        locked = Session.objects.select_for_update(of=("self",)).filter(pk=origin.pk)
        if locked.values_list("deleted_at", "agent__deleted_at").first() != (None, None):
            return None
        session = Session.objects.create(
            tenant_id=origin.tenant_id,
            key=str(uuid.uuid4()),
            agent=origin.agent,
            conversation=conversation_at(checkpoint),
            last_run=checkpoint.run,
            forked_from_session=origin,
            forked_from_checkpoint=checkpoint,
        )
        for copy in copies:
            copy.session = session
        PendingRequest.objects.bulk_create(copies)
    return session


def fork(
    checkpoint: Checkpoint,
    copies: list[PendingRequest],
    answered: PendingRequest,
    decision: Decision,
    now: datetime,
) -> Forked | None:
    """The session `branch` makes from `checkpoint` with `copies`, `answered` (one of them) decided by `decision`
    (nobody saw the copy open: nothing is announced). None when the session or its agent was deleted."""
    with transaction.atomic():
        session = branch(checkpoint, copies)
        if session is None:
            return None
        decide(answered, decision, now, announce=False)
    return Forked(session, answered, [c for c in copies if c is not answered])


@dataclass
class ForkOrigin:
    """Where a fork started, as the pages show it: the session, the turn (checkpoint number) and its run."""

    session_key: str
    turn: int
    run_id: uuid.UUID | None


def fork_origin(session: Session) -> ForkOrigin | None:
    """Where `session` was forked from; None for a session that is no fork (or whose origin is gone)."""
    if session.forked_from_checkpoint_id is None:
        return None
    checkpoint = (
        Checkpoint.objects.filter(tenant=session.tenant_id, pk=session.forked_from_checkpoint_id)
        .select_related("session")
        .only("number", "run_id", "session__key")
        .first()
    )
    return ForkOrigin(checkpoint.session.key, checkpoint.number, checkpoint.run_id) if checkpoint else None
