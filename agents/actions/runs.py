"""Starting a run, ending a turn run here, and cancelling a run: the one way each is done, for the run API, the
runs pages and the inbox (SPEC sections 4 and 9).

A run request is checked whole by `agents.prepare.prepare_run` and recorded by `agents.run_lifecycle.record_run` (queued
through `agents.queue.start_queued`); a turn this process runs for its caller (the API's answer, its stream, a
replay) is stored by `finish`. The continuation (`agents.actions.sessions`) and the replay
(`agents.actions.replay`) are started through the same two modules. Queued turns are run and finished by the
queue's workers (`agents.queue`).
"""

from dataclasses import dataclass
from typing import Any

from agents import queue, run_lifecycle
from agents.models import Run
from agents.outcomes import finish_run
from agents.prepare import (
    live_version,
    prepare_run,
    refuse_self_approvals,
    refuse_ungranted_connections,
    refuse_unless_approver_of,
    stand_ins,
)
from agents.run_lifecycle import ExecutionResult, StartedRun, execute, run_result
from agents.run_requests import RunRequest
from approvals.models import PendingRequest, RequestStatus
from console.loops import run_here
from console.models import Membership


@dataclass(frozen=True)
class Ended:
    """A turn run here to its end: the run as stored, and the requests it opened."""

    run: Run
    opened: list[PendingRequest]

    def result(self) -> dict[str, Any]:
        """The API's view of the run (`agents.run_lifecycle.run_result`)."""
        return run_result(self.run, self.opened)


def start_run(membership: Membership, user: Any, name: str, request: RunRequest, *, queued: bool = False) -> StartedRun:
    """Start a run of the agent `name` as `request` asks, for `membership`'s member `user`: with `queued` on its
    lane's queue (a worker runs the turn), else for the caller to run here (`run_to_end`, or
    `agents.run_lifecycle.execute` streaming, then `finish`). Raises RunRejected, nothing written, for every refusal
    of SPEC section 4, and for answers to requests routed to a group the member is not in (403 `not_an_approver`)."""
    version = live_version(membership.tenant, name, request.definition_version)
    prepared = prepare_run(membership.tenant, version, request)
    # What it answers and what it abandons (`abandonPending`) take the right to answer them.
    refuse_unless_approver_of(membership, [*(pending for pending, _ in prepared.answered), *prepared.abandoned])
    prepared.on_behalf_of = stand_ins(membership, prepared.answered)
    refuse_self_approvals(membership, prepared)
    refuse_ungranted_connections(prepared)
    if queued:
        return queue.start_queued(prepared, user)
    return run_lifecycle.record_run(prepared, user)


def run_to_end(started: StartedRun) -> Ended:
    """Run the started turn in this thread (on its own event loop, `console.loops.run_here`) and store it."""
    return finish(started, run_here(execute(started)))


def finish(started: StartedRun, result: ExecutionResult) -> Ended:
    """Store the outcome of a turn this process ran (`agents.outcomes.finish_run`); every inbox hears of the requests
    it opened."""
    return Ended(started.run, finish_run(started, result))


def do_cancel_run(membership: Membership, user: Any, run: Run, *, session_id: int | None = None) -> str | None:
    """Cancel the run for `membership`'s member `user` (SPEC section 9; `agents.queue.cancel`): `cancelled` when
    done here, `cancelling` when its turn stops within a second, None when there is nothing to cancel (it has
    finished, or waits on nothing any more). Raises RunRejected (403 `not_an_approver`) when one of the requests
    it waits on is routed to a group the member is not in: the run's, or with `session_id` that session's only
    (an inbox card of a fork, whose copies the original run asked)."""
    waiting = run.requests.filter(status=RequestStatus.PENDING, answered_in=None)
    if session_id is not None:
        waiting = waiting.filter(session=session_id)
    refuse_unless_approver_of(membership, waiting)
    return queue.cancel(run, user)
