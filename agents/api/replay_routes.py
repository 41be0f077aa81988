"""The replay route of the JSON API (SPEC section 10): a run's message again, on its version or another."""

import uuid
from typing import Any

from django.http import JsonResponse
from ninja import Router

from agents import actions
from agents.api.run_routes import accepted, prefers_async
from agents.getters import get_run_for
from agents.prepare import RunRejected
from console.api import ApiError, Problem, require_role
from console.tenancy import ConsoleRequest

router = Router(tags=["runs"])


@router.post("/runs/{run_id}/replay", response={200: dict, 202: dict, 404: Problem, 409: Problem})
def replay_run(request: ConsoleRequest, run_id: uuid.UUID, payload: actions.ReplayRequest | None = None) -> Any:
    """Run the run's message again (SPEC section 10), admins only: a new sessionless run of the same agent with
    the same bound parameter values and culture, on the run's definition version or `definitionVersion`; its
    result says `replayOf`; the run's documents go with it (`omittedDocuments`: those of a run from before they
    were kept, which it goes without). `Prefer:
    respond-async` queues it (202)."""
    membership = require_role(request, "admin")
    original = get_run_for(request, run_id, "tenant", "agent", "version__agent")
    queued = prefers_async(request)
    picked = payload.definition_version if payload else None
    try:
        replay = actions.do_replay_run(membership.user, original, picked, queued=queued)
    except RunRejected as rejected:
        raise ApiError.of(rejected) from None
    linked = {"replayOf": str(original.id), "omittedDocuments": replay.omitted_documents}
    if queued:
        return accepted(replay.run, **linked)
    return JsonResponse({**actions.run_to_end(replay.started).result(), **linked})
