"""The tenant-scoped getters pages and API routes share: the object, or a 404 for anything not the caller's."""

import uuid

from django.db.models import QuerySet

from agents.models import Agent, Run
from console.tenancy import ConsoleRequest, NotFound


def get_agent_for(request: ConsoleRequest, name: str) -> Agent:
    agent = Agent.objects.live().filter(tenant=request.tenant, name=name).first()
    if agent is None:
        raise NotFound("agent_not_found", f"No agent named {name!r} in this tenant.")
    return agent


def get_run_for(request: ConsoleRequest, run_id: uuid.UUID, *related: str, among: QuerySet[Run] | None = None) -> Run:
    """The run, with the `related` objects the caller reads joined in (from `among`, annotated as the caller
    wants, when given)."""
    runs = Run.objects.all() if among is None else among
    runs = runs.select_related(*related) if related else runs
    run = runs.filter(tenant=request.tenant, id=run_id).first()
    if run is None:
        raise NotFound("run_not_found", f"No run {run_id} in this tenant.")
    return run
