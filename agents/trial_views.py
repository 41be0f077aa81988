"""The trial-run page: try an agent turn by turn, answering what it asks for inline.

The page posts each turn to the run API (`Accept: text/event-stream`) from static/console/trial.js,
shows the reply as it streams, then swaps in the server-rendered turn (with its answer forms).
"""

import json
import uuid

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agents.getters import get_run_for
from agents.models import Agent, Run, Session
from agents.schema_forms import schema_fields
from approvals.models import PendingRequest, RequestKind, RequestStatus
from console.tenancy import ConsoleRequest, role_required


def _turn_context(run: Run) -> dict[str, object]:
    requests = list(run.requests.filter(session=run.session_id))  # a fork's copies are the fork's
    for pending in requests:
        pending.arguments_json = json.dumps(pending.arguments, indent=2, ensure_ascii=False)  # type: ignore[attr-defined]
        pending.fields = schema_fields(pending.requested_schema) if pending.kind == RequestKind.INPUT else []  # type: ignore[attr-defined]
    answered = list(PendingRequest.objects.filter(answered_in=run).select_related("answered_by"))
    return {
        "run": run,
        "answered": answered,
        "open_requests": [r for r in requests if r.status == RequestStatus.PENDING],
    }


@role_required("operator")
@require_GET
def trial(request: ConsoleRequest) -> HttpResponse:
    tenant = request.tenant
    agents = list(Agent.objects.live().filter(tenant=tenant))
    agent = next((a for a in agents if a.name == request.GET.get("agent")), agents[0] if agents else None)
    context: dict[str, object] = {"agents": agents, "agent": agent}
    if agent is not None:
        versions = list(agent.versions.all())
        chosen = request.GET.get("version", "")
        version = next((v for v in versions if str(v.number) == chosen), versions[0])
        session_key = request.GET.get("session") or f"trial-{uuid.uuid4().hex[:12]}"
        session = Session.objects.live().filter(tenant=tenant, key=session_key, agent=agent).first()
        runs = session.runs.select_related("version", "agent").order_by("created_at") if session else []
        context.update(
            versions=versions,
            version=version,
            definition=version.definition,
            session_key=session_key,
            turns=[_turn_context(run) for run in runs],
        )
    return render(request, "agents/trial.html", context)


@role_required("operator")
@require_GET
def trial_turn(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_run_for(request, run_id, "agent", "version", "session")
    return render(request, "agents/trial.html#turn", {"turn": _turn_context(run)})
