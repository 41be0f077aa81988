from datetime import datetime

from django.db import IntegrityError
from django.db.models import F
from django.http import HttpRequest, HttpResponse
from ninja import Router, Schema, Status
from pydantic import ConfigDict, StrictInt
from pydantic.alias_generators import to_camel

from agents import actions
from agents.definitions import ConnectionRefused, DefinitionContent, PoliciesRefused
from agents.getters import get_agent_for
from agents.models import Agent, AgentVersion
from console.api import ApiError, Problem, api, problem, require_role
from console.tenancy import ConsoleRequest

router = Router(tags=["agents"])


# What a refused definition is told, by code (the field errors say where); connections' problems otherwise.
_REFUSED = {
    "unknown_group": "The definition routes requests to approver groups this tenant does not have.",
    "unknown_subagent": "The definition names sub-agents that are not agents of this tenant.",
    "subagent_cycle": "The definition's sub-agents lead back to the agent itself.",
    "subagent_too_deep": "The definition's sub-agents call each other too deep.",
    "external_subagent": "An external agent runs elsewhere: no agent here can call it as a sub-agent.",
    "invalid_hooks": "The definition's hooks cannot be loaded.",
    "too_many_policy_compiles": "This tenant saved too many new policies in the last minute; try again later.",
}


@api.exception_handler(ConnectionRefused)
def _connection_refused(request: HttpRequest, exc: ConnectionRefused) -> HttpResponse:
    errors = [{"field": field, "message": message} for field, message in exc.errors.items()]
    detail = _REFUSED.get(exc.code, "The definition names connections it cannot use.")
    response = problem(exc.status, exc.code, detail, errors=errors)
    if isinstance(exc, PoliciesRefused) and exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response


class AgentOut(DefinitionContent):
    version: int
    created_at: datetime


class VersionSummary(Schema):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
    version: int
    created_at: datetime
    created_by: str | None
    note: str


class RollbackIn(Schema):
    version: StrictInt


def _out(version: AgentVersion) -> AgentOut:
    return AgentOut(**version.definition.model_dump(), version=version.number, created_at=version.created_at)


@router.get("", response=list[AgentOut], by_alias=True)
def list_agents(request: ConsoleRequest) -> list[AgentOut]:
    versions = AgentVersion.objects.filter(
        agent__tenant=request.tenant,
        agent__deleted_at__isnull=True,
        number=F("agent__current_version"),
    ).order_by("agent__name")
    return [_out(v) for v in versions]


@router.post("", response={201: AgentOut, 409: Problem, 429: Problem}, by_alias=True)
def create_agent(request: ConsoleRequest, payload: DefinitionContent) -> Status[AgentOut]:
    membership = require_role(request, "admin")
    if Agent.objects.live().filter(tenant=membership.tenant, name=payload.name).exists():
        raise ApiError(409, "duplicate_name", f"An agent named {payload.name!r} exists already.")
    try:
        agent = Agent.create(membership.tenant, payload, request.user)
    except IntegrityError:
        raise ApiError(409, "duplicate_name", f"An agent named {payload.name!r} exists already.") from None
    return Status(201, _out(agent.current))


@router.get("/{name}", response=AgentOut, by_alias=True)
def get_agent(request: ConsoleRequest, name: str) -> AgentOut:
    return _out(get_agent_for(request, name).current)


@router.put("/{name}", response={200: AgentOut, 429: Problem}, by_alias=True)
def update_agent(request: ConsoleRequest, name: str, payload: DefinitionContent) -> AgentOut:
    require_role(request, "admin")
    agent = get_agent_for(request, name)
    if payload.name != name:
        raise ApiError(
            400,
            "invalid_request",
            "The name of an agent cannot change.",
            errors=[{"field": "name", "message": f"must stay {name!r}"}],
        )
    return _out(agent.append_version(payload, request.user, note="edited"))


@router.delete("/{name}", response={204: None})
def delete_agent(request: ConsoleRequest, name: str) -> Status[None]:
    require_role(request, "admin")
    actions.do_delete_agent(get_agent_for(request, name))
    return Status(204, None)


@router.get("/{name}/versions", response=list[VersionSummary], by_alias=True)
def list_versions(request: ConsoleRequest, name: str) -> list[VersionSummary]:
    agent = get_agent_for(request, name)
    return [
        VersionSummary(
            version=v.number,
            created_at=v.created_at,
            created_by=v.created_by.username if v.created_by else None,
            note=v.note,
        )
        for v in agent.versions.select_related("created_by")
    ]


@router.get("/{name}/versions/{number}", response=AgentOut, by_alias=True)
def get_version(request: ConsoleRequest, name: str, number: int) -> AgentOut:
    version = get_agent_for(request, name).versions.filter(number=number).first()
    if version is None:
        raise ApiError(404, "version_not_found", f"Agent {name!r} has no version {number}.")
    return _out(version)


@router.post("/{name}/rollback", response={200: AgentOut, 429: Problem}, by_alias=True)
def rollback(request: ConsoleRequest, name: str, payload: RollbackIn) -> AgentOut:
    require_role(request, "admin")
    agent = get_agent_for(request, name)
    if not agent.versions.filter(number=payload.version).exists():
        raise ApiError(404, "version_not_found", f"Agent {name!r} has no version {payload.version}.")
    return _out(agent.rollback(payload.version, request.user))
