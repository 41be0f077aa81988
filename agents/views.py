from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agents.models import Agent
from console.tenancy import role_required


@role_required("reader")
def agent_list(request: HttpRequest) -> HttpResponse:
    agents = Agent.objects.live().filter(tenant=request.membership.tenant)  # type: ignore[attr-defined]
    return render(request, "agents/list.html", {"agents": agents})


agent_create = agent_detail = agent_edit = agent_versions = agent_version = agent_diff = agent_list
agent_rollback = agent_delete = blank_row = agent_list
