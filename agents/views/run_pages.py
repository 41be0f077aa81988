"""A run's page (its session's turns on the timeline) and its buttons: cancel, replay, fork from here."""

import uuid
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agents import actions
from agents.checkpoints import fork_origin
from agents.events import EventType
from agents.getters import get_run_for
from agents.models import AWAITING, Event, Run, RunStatus
from agents.prepare import RunRejected
from agents.views.run_list_pages import RunRow, with_afterwards
from agents.views.timeline_pages import pretty, session_turns
from approvals.models import PendingRequest, RequestStatus
from console.tenancy import ConsoleRequest, role_required

# What the run page and its actions read of a run.
RUN_RELATED = ("agent", "version", "session", "created_by", "previous_run")


@role_required("operator")
@require_POST
def run_cancel(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_run_for(request, run_id, *RUN_RELATED)
    was = run.get_status_display().lower()
    try:
        outcome = actions.do_cancel_run(request.membership, request.user, run)
    except RunRejected as rejected:
        messages.error(request, rejected.detail)
        return redirect("run", run_id=run.id)
    if outcome is None:
        messages.error(request, f"The run has finished ({was}) and waits on nothing; nothing to cancel.")
    elif outcome == "cancelling":
        messages.info(request, "Cancelling: the turn stops within a few seconds.")
    elif was == RunStatus.QUEUED:
        messages.success(request, "Cancelled the queued run.")
    else:
        messages.success(request, "Cancelled the run: its open requests are closed.")
    return redirect("run", run_id=run.id)


@role_required("admin")
@require_POST
def run_replay(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    """Replay the run (SPEC section 10) on the version picked (its own by default), queued; to the new run."""
    original = get_run_for(request, run_id, "tenant", "agent", "version__agent")
    picked = request.POST.get("version", "").strip()
    if picked and not (picked.isascii() and picked.isdigit() and len(picked) <= 9):
        messages.error(request, "Pick one of the agent's versions.")
        return redirect("run", run_id=original.id)
    try:
        replay = actions.do_replay_run(request.user, original, int(picked) if picked else None, queued=True)
    except RunRejected as rejected:
        messages.error(request, rejected.detail)
        return redirect("run", run_id=original.id)
    messages.success(request, f"Replaying the run's message on version {replay.version}.")
    if replay.omitted_documents:
        names = ", ".join(str(d["name"]) for d in replay.omitted_documents)
        messages.info(request, f"This run is older than kept documents; replayed without: {names}.")
    return redirect("run", run_id=replay.run.id)


@role_required("operator")
@require_POST
def run_fork(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    """Fork the run's session from this turn (SPEC section 9, without an answer): a new session whose
    conversation is the one the turn's checkpoint holds, with copies of the requests open there; the page goes
    on in it on the trial page, where the next message continues from that point. The original is untouched."""
    run = get_run_for(request, run_id, "agent")
    try:
        fork = actions.fork_session(run)
    except actions.ForkRefused as refused:
        messages.error(request, refused.detail)
        return redirect("run", run_id=run.id)
    messages.success(request, f"Forked at turn {fork.checkpoint.number}: the next message continues from there.")
    return redirect(f"{reverse('trial')}?{urlencode({'agent': run.agent.name, 'session': fork.session.key})}")


def replay_of(run: Run, events: list[Event]) -> Run | None:
    """The run this one replays (`replayOf` in its `run.started`), when it is one, of the same tenant."""
    started = next((event for event in events if event.type == EventType.RUN_STARTED), None)
    original_id = (started.data or {}).get("replayOf") if started is not None else None
    if not original_id:
        return None
    return Run.objects.filter(tenant=run.tenant_id, pk=original_id).select_related("version").first()


@role_required("reader")
@require_GET
def run_detail(request: ConsoleRequest, run_id: uuid.UUID) -> HttpResponse:
    run = get_run_for(request, run_id, *RUN_RELATED, among=with_afterwards(Run.objects.all()))
    turns = session_turns(run.session, run)
    [viewed] = [turn for turn in turns if turn.viewed]
    events = [entry.event for entry in viewed.entries or []]
    external = run.version.definition.external
    context = {
        "run": run,
        # A run of an external agent stands for the agent's pause (SPEC section 12): nothing here can replay,
        # fork or continue it, as the agent runs elsewhere.
        "external": external,
        "row": RunRow(run),
        "parameters": [(name, pretty(value)) for name, value in run.parameters.items()],
        # A fork's first run follows this one too, in another session: the timeline shows it as a branch.
        "next_runs": Run.objects.filter(tenant=run.tenant_id, previous_run=run, session=run.session_id).order_by(
            "created_at"
        ),
        "turns": turns,
        "forked_from": fork_origin(run.session) if run.session else None,
        "replay_of": replay_of(run, events),
        # The Replay button's version picker, for admins.
        "versions": list(run.agent.versions.order_by("-number").values_list("number", flat=True))
        if request.membership.allows("admin") and not external
        else [],
        # A fork's copies of this run's requests are the fork's.
        "requests": PendingRequest.objects.filter(run=run, session=run.session_id).select_related("answered_by"),
        "waiting": run.status in AWAITING
        and run.requests.filter(status=RequestStatus.PENDING, answered_in=None, session=run.session_id).exists(),
        # While the session's latest turn has not ended, the page follows the session stream (run_live.js).
        "follow": run.session is not None
        and run.session.deleted_at is None
        and turns[-1].run.status in (RunStatus.QUEUED, RunStatus.RUNNING, *AWAITING),
        # A run without a session (a replay) follows its own stream until it ends.
        "follow_run": run.session is None and run.status in (RunStatus.QUEUED, RunStatus.RUNNING),
    }
    return render(request, "agents/run_detail.html", context)
