"""Replaying a run (SPEC section 10): a new sessionless run of the same agent with the run's message, bound
parameter values, culture and documents (`Run.documents`: attachments as the text the model read), on the
run's definition version or another one (to compare versions), linked to the original by `replayOf` (in the
new run's `run.started`).

Runs started before `Run.documents` kept of their documents only names and sizes (`document.attached`):
`omitted_documents` says which ones the replay of such a run goes without.

The replay is checked and run by the same machinery as any run request (`prepare_run`, `record_run`,
`agents.queue.enqueue`); this module only builds the request and marks the run. A replay started here is run by
its caller (`agents.actions.runs.run_to_end`), a queued one by a worker.
"""

from dataclasses import dataclass
from typing import Any

from pydantic import Field, StrictInt

from agents import queue
from agents.definitions import WireModel
from agents.events import EventType
from agents.models import Run
from agents.prepare import PreparedRun, RunRejected, prepare_run, refuse_ungranted_connections
from agents.run_lifecycle import StartedRun, record_run
from agents.run_requests import RunRequest


class ReplayRequest(WireModel):
    """The body of `POST /api/runs/{runId}/replay`: the version to replay on (the run's own by default)."""

    definition_version: StrictInt | None = Field(default=None, ge=1)


@dataclass(frozen=True)
class Replayed:
    """A replay started: its run, and the documents of an original from before `Run.documents` (`{name, size}`),
    which it runs without."""

    started: StartedRun
    omitted_documents: list[dict[str, Any]]

    @property
    def run(self) -> Run:
        return self.started.run

    @property
    def version(self) -> int:
        """The number of the definition version it runs."""
        return self.started.prepared.version.number


def do_replay_run(user: Any, original: Run, definition_version: int | None, *, queued: bool = False) -> Replayed:
    """Replay `original` for `user` on `definition_version` (its own version when None): queued on its lane with
    `queued`, else for the caller to run here. Raises RunRejected, nothing written, as a run request does, and
    409 `not_replayable` for a run without a message of its own (a continuation that carried answers, or a
    message a policy refused)."""
    prepared, omitted = _prepare(original, definition_version)
    return Replayed(_start(original, prepared, user, queued=queued), omitted)


def _prepare(original: Run, definition_version: int | None) -> tuple[PreparedRun, list[dict[str, Any]]]:
    """The replay of `original` checked as a run request, and the documents it goes without."""
    if not original.message:
        detail = "The run has no message of its own to replay (it carried answers, or a policy refused its message)."
        raise RunRejected(409, "not_replayable", detail)
    agent = original.agent
    if agent.deleted_at is not None:
        raise RunRejected(404, "agent_not_found", f"The agent {agent.name!r} was deleted.")
    chosen = (
        original.version if definition_version is None else agent.versions.filter(number=definition_version).first()
    )
    if chosen is None:
        raise RunRejected(404, "version_not_found", f"Agent {agent.name!r} has no version {definition_version}.")
    request = RunRequest(
        message=original.message,
        parameters=original.parameters,
        culture=original.culture or None,
        lane=original.lane,
    )
    prepared = prepare_run(original.tenant, chosen, request)
    refuse_ungranted_connections(prepared)
    prepared.documents = [(name, text) for name, text in original.documents]
    omitted: list[dict[str, Any]] = []
    if not original.documents:
        attached = original.events.filter(type=EventType.DOCUMENT_ATTACHED).order_by("sequence")
        omitted = [{"name": e.data.get("name"), "size": e.data.get("size")} for e in attached]
    return prepared, omitted


def _start(original: Run, prepared: PreparedRun, user: Any, *, queued: bool) -> StartedRun:
    """Start the replay as `agents.run_lifecycle.record_run` records any run (queued on its lane with `queued`), with
    `replayOf` in its `run.started`."""
    prepared.replay_of = original
    return record_run(prepared, user, enqueue=queue.enqueue if queued else None)
