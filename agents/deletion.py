"""Deleting an agent (SPEC section 9): its history stays, its future goes.

The agent is marked deleted (its name is free again), its queued and running turns are cancelled, and every
open request of its sessions closes `abandoned`, all in one transaction: nothing it asked for can be
answered into a run afterwards. Open consoles drop the cards once the deletion is committed.
"""

from django.db import transaction

from agents import queue
from agents.models import Agent, Run, RunStatus, Session
from agents.runs import abandon_requests_of_deleted_agent
from approvals.push import notify_requests_closed


def delete_agent(agent: Agent) -> None:
    with transaction.atomic():
        agent.soft_delete()
        assert agent.deleted_at is not None
        # The sessions' locks order this against a turn being recorded or finished now (agents/runs.py):
        # that turn is cancelled below, or it sees the deletion and stops.
        list(Session.objects.select_for_update().filter(agent=agent).values_list("pk"))
        for run in Run.objects.filter(agent=agent, status__in=(RunStatus.QUEUED, RunStatus.RUNNING)):
            # A queued turn ends `cancelled` here and hands back the answers it carried (closed below);
            # a running one stops within a second and closes what it leaves open itself.
            queue.cancel(run)
        closed = abandon_requests_of_deleted_agent(agent.requests.all(), agent.deleted_at)
        ids = [str(pending.id) for pending in closed]
        transaction.on_commit(lambda: notify_requests_closed(agent.tenant_id, ids))
