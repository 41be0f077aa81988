"""The console's agent pages: list, create and edit (each save is a new version), versions, diff, rollback,
delete, and the policies' Try panel (one interception point evaluated against a sample context)."""

import json
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.db import IntegrityError
from django.db.models import F
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents import actions
from agents.definitions import ConnectionRefused, DefinitionContent, ExternalTool, McpServer, McpTool, ToolBinding
from agents.forms import (
    APPROVAL_LABELS,
    AS_ITS_SERVER,
    SECTIONS,
    DefinitionForm,
    PolicyTryForm,
    choices,
    form_text,
    hooks_text,
)
from agents.forms.hooks import PolicyEditor
from agents.getters import get_agent_for
from agents.models import Agent, AgentVersion
from agents.request_kinds import KIND_NAMES
from agents.requirements import routing_label
from agents.server_tools import REGISTRY
from agents.starter_policy import starter_hooks
from agents.views.diff_pages import diff_rows
from agents.views.policy_pages import (
    PolicySummary,
    blocked_tools,
    editor_context,
    seen_mcp_tools,
    try_form,
    try_policies,
)
from approvals.models import ApproverGroup
from console.connections import ConnectionSpec
from console.models import Connection
from console.tenancy import ConsoleRequest, role_required


def _granted(request: ConsoleRequest) -> dict[str, ConnectionSpec]:
    return Connection.objects.specs_for(request.tenant)


def _choices(request: ConsoleRequest, granted: dict[str, ConnectionSpec]) -> dict[str, Any]:
    """The form's options: the tenant's granted connections and its approver groups."""
    groups = ApproverGroup.objects.filter(tenant=request.tenant).values_list("name", flat=True)
    return choices(granted, list(groups))


def _version(agent: Agent, number: str | int | None) -> AgentVersion:
    version = agent.versions.select_related("created_by").filter(number=_number(number)).first()
    if version is None:
        raise Http404("No such version.")
    return version


def _number(text: str | int | None) -> int:
    try:
        return int(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise Http404("Not a version number.") from None


@role_required("reader")
@require_GET
def agent_list(request: ConsoleRequest) -> HttpResponse:
    agents = list(Agent.objects.live().filter(tenant=request.tenant))
    current = AgentVersion.objects.filter(agent__in=agents, number=F("agent__current_version"))
    definitions = {version.agent_id: version.definition for version in current}
    rows = [(agent, definitions.get(agent.pk)) for agent in agents]
    return render(request, "agents/list.html", {"rows": rows})


@role_required("admin")
@require_http_methods(["GET", "POST"])
def agent_create(request: ConsoleRequest) -> HttpResponse:
    granted = _granted(request)
    form = DefinitionForm.from_post(request.POST) if request.method == "POST" else DefinitionForm.blank()
    if request.method == "POST" and form.is_valid(granted):
        assert form.content is not None
        try:
            agent = Agent.create(request.tenant, form.content, request.user)
        except IntegrityError:
            form.errors["name"] = f"An agent named “{form.content.name}” exists already."
        except ConnectionRefused as refused:  # a grant withdrawn since the check
            form.refuse(refused.errors)
        else:
            messages.success(request, f"Created agent “{agent.name}” (version 1).")
            return redirect("agents:detail", agent.name)
    context = {"form": form, "agent": None, **_choices(request, granted), **editor_context(request, form, None)}
    return render(request, "agents/form.html", context)


@role_required("admin")
@require_http_methods(["GET", "POST"])
def agent_edit(request: ConsoleRequest, name: str) -> HttpResponse:
    agent = get_agent_for(request, name)
    current = agent.current.definition
    granted = _granted(request)
    if request.method == "GET":
        form = DefinitionForm.from_content(current)
    else:
        form = DefinitionForm.from_post(request.POST, editing=current)
        if form.is_valid(granted):
            assert form.content is not None
            if form.content.wire() == current.wire():
                messages.info(request, "Nothing changed, so no new version was saved.")
                return redirect("agents:detail", agent.name)
            note = request.POST.get("note", "").strip()[:200] or "edited"
            try:
                version = agent.append_version(form.content, request.user, note=note)
            except ConnectionRefused as refused:  # a grant withdrawn since the check
                form.refuse(refused.errors)
            else:
                messages.success(request, f"Saved version {version.number}.")
                return redirect("agents:detail", agent.name)
    context = {"form": form, "agent": agent, "note": request.POST.get("note", ""), **_choices(request, granted)}
    return render(request, "agents/form.html", context | editor_context(request, form, agent))


@role_required("admin")
@require_GET
def blank_row(request: ConsoleRequest, section: str) -> HttpResponse:
    """One empty row of a form section, added to its table by htmx; a gateway's tool row under the server row
    `?server=<its row key>`."""
    if section not in SECTIONS:
        raise Http404("No such section.")
    row = SECTIONS[section].new()
    if section == "gateway_tools":
        row.values["server"] = request.GET.get("server", "")
        if not re.fullmatch(r"[0-9a-f]{8}", row.values["server"]):
            raise Http404("No such server row.")
    context = {"row": row, **_choices(request, _granted(request))}
    return render(request, f"agents/rows.html#{section}", context)


@role_required("admin")
@require_GET
def starter_policy(request: ConsoleRequest) -> HttpResponse:
    """The policy editor filled with the starter policy (enforced, or in shadow mode)."""
    mode = "evaluate_only" if request.GET.get("mode") == "evaluate_only" else "enforce"
    # The tools the form lists (its rows come along, `hx-include`) and, editing `?agent=`, its sub-agents and
    # the MCP tools its runs called: the manifest names them all (one that governs tool calls denies the rest).
    agent = get_agent_for(request, request.GET["agent"]) if request.GET.get("agent") else None
    sections = "external_tools" if request.GET.get("runtime") == "external" else "tools|client_tools"
    named = [request.GET.get(key, "") for key in request.GET if re.fullmatch(rf"({sections})-[\w-]+-name", key)]
    if request.GET.get("runtime") == "gateway":  # the tools its servers' rows set apart, as clients call them
        named = DefinitionForm.from_post(request.GET).gateway_tool_names
    named += (agent.current.definition.sub_agents if agent is not None else []) + seen_mcp_tools(agent)
    tools = list(dict.fromkeys(name.strip() for name in named if name.strip()))
    hooks = starter_hooks(mode, tools)
    form = DefinitionForm.blank()
    form.policies, form.values["hooks"] = PolicyEditor.of(hooks), hooks_text(hooks)
    context = {"form": form, "starter_mode": mode, **editor_context(request, form, None)}
    context["blocked_tools"] = blocked_tools(str(request.tenant.pk), "new-agent", hooks, tools)
    return render(request, "agents/_policy_editor.html#editor", context)


@role_required("reader")
@require_GET
def agent_detail(request: ConsoleRequest, name: str) -> HttpResponse:
    agent = get_agent_for(request, name)
    version = _version(agent, agent.current_version)
    context = _definition_context(agent, version, request)
    if version.definition.hooks is not None and request.membership.allows("admin"):
        context["try_form"] = try_form(request, agent, version, None)
    return render(request, "agents/detail.html", context)


@role_required("admin")
@require_http_methods(["GET", "POST"])
def agent_try(request: ConsoleRequest, name: str) -> HttpResponse:
    """The Try panel: GET loads the sample context of a point, POST evaluates a context with the current
    version's policies (nothing is stored: no run, no event, no request)."""
    agent = get_agent_for(request, name)
    version = _version(agent, agent.current_version)
    if version.definition.hooks is None:
        raise Http404("The current version has no policies.")
    outcome = None
    if request.method == "POST":
        form = PolicyTryForm(request.POST)
        if form.is_valid():
            outcome = try_policies(request, agent, version, form.cleaned_data["context"])
    else:
        form = try_form(request, agent, version, request.GET.get("point"))
    context = {"try_form": form, "outcome": outcome}
    if request.htmx:
        policies = PolicySummary.of(version.definition.hooks)
        return render(request, "agents/detail.html#try", {"agent": agent, "policies": policies, **context})
    return render(request, "agents/detail.html", _definition_context(agent, version, request) | context)


@role_required("reader")
@require_GET
def agent_version(request: ConsoleRequest, name: str, number: int) -> HttpResponse:
    agent = get_agent_for(request, name)
    return render(request, "agents/detail.html", _definition_context(agent, _version(agent, number)))


@role_required("reader")
@require_GET
def agent_versions(request: ConsoleRequest, name: str) -> HttpResponse:
    agent = get_agent_for(request, name)
    versions = agent.versions.select_related("created_by")
    return render(request, "agents/versions.html", {"agent": agent, "versions": versions})


@role_required("reader")
@require_GET
def agent_diff(request: ConsoleRequest, name: str) -> HttpResponse:
    agent = get_agent_for(request, name)
    a = _version(agent, request.GET.get("a", max(agent.current_version - 1, 1)))
    b = _version(agent, request.GET.get("b", agent.current_version))
    rows = diff_rows(a.definition, b.definition)
    unchanged = [row for row in rows if not row["changed"]]
    context = {"agent": agent, "a": a, "b": b, "rows": rows, "changed": len(rows) - len(unchanged)}
    context["unchanged"] = unchanged
    return render(request, "agents/diff.html", context)


@role_required("admin")
@require_POST
def agent_rollback(request: ConsoleRequest, name: str) -> HttpResponse:
    agent = get_agent_for(request, name)
    old = _version(agent, request.POST.get("version"))
    try:
        new = agent.rollback(old.number, request.user)
    except ConnectionRefused as refused:
        messages.error(request, f"Version {old.number} cannot come back: {refused}.")
        return redirect("agents:versions", agent.name)
    messages.success(request, f"Rolled back: version {new.number} now holds version {old.number}'s content.")
    return redirect("agents:versions", agent.name)


@role_required("admin")
@require_POST
def agent_delete(request: ConsoleRequest, name: str) -> HttpResponse:
    agent = get_agent_for(request, name)
    actions.do_delete_agent(agent)
    messages.success(request, f"Deleted agent “{agent.name}”.")
    return redirect("agents:list")


def _example_value(schema: Any) -> Any:
    """A value a property of this JSON schema would take, for the example request."""
    if not isinstance(schema, dict):
        return "…"
    if schema.get("enum"):
        return schema["enum"][0]
    examples: dict[Any, Any] = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    return examples.get(schema.get("type"), "…")


def _curl_example(request: ConsoleRequest, name: str, content: DefinitionContent) -> str:
    """How the external agent `name` opens a request for its first tool and waits for the decision (SPEC 12)."""
    tool = next((t for t in content.tools if isinstance(t, ExternalTool) and t.approval != "never"), None)
    tool = tool or next((t for t in content.tools if isinstance(t, ExternalTool)), None)
    body: dict[str, Any] = {"kind": "approval", "toolName": tool.name if tool else "your_tool"}
    properties = (tool.parameters.get("properties") if tool else None) or {}
    body["arguments"] = {key: _example_value(schema) for key, schema in properties.items()}
    opened = request.build_absolute_uri(f"/api/agents/{name}/requests")
    waited = request.build_absolute_uri("/api/requests/")
    return (
        f"curl -X POST {opened} \\\n"
        '  -H "Authorization: Bearer $AIRLOCK_TOKEN" -H "Content-Type: application/json" \\\n'
        f"  -d '{json.dumps(body, ensure_ascii=False)}'\n"
        '# -> 201 {"requestId": "…", "status": "pending"} (or "decided" at once, by a rule or approval "never")\n\n'
        f'curl "{waited}$REQUEST_ID?wait=60" -H "Authorization: Bearer $AIRLOCK_TOKEN"\n'
        '# -> {"status": "answered", "decision": {"approved": true, …}} once an operator answers'
    )


def mcp_endpoint(name: str) -> str:
    """Where MCP clients reach the gateway `name` (SPEC section 15)."""
    return f"{settings.CONSOLE_URL}/mcp/{name}"


def _claude_mcp_add(name: str) -> str:
    """How Claude Code is pointed at the gateway `name`: its endpoint, with an Airlock token."""
    return (
        f'claude mcp add --transport http {name} {mcp_endpoint(name)} --header "Authorization: Bearer $AIRLOCK_TOKEN"'
    )


@dataclass(frozen=True)
class FrontedTool:
    """A tool a gateway's server sets apart, as its page says it: the tool's name upstream and as clients call it,
    its approval mode ("" where it is its server's) and who answers ("" where the tool says nothing of it; else each
    part from the tool, or its server where the tool leaves it out, as `DefinitionContent.routing_for` takes them)."""

    name: str
    exposed: str
    approval: str
    routing: str


@dataclass(frozen=True)
class FrontedServer:
    server: McpServer
    approval: str
    tools: list[FrontedTool]


def _fronted(content: DefinitionContent) -> list[FrontedServer]:
    """A gateway's servers with the tools each sets apart (SPEC section 15)."""
    return [
        FrontedServer(
            server,
            APPROVAL_LABELS[server.approval],
            [
                FrontedTool(
                    name,
                    content.exposed_name(server, name),
                    APPROVAL_LABELS[tool.approval] if tool.approval is not None else "",
                    _tool_routing(server, tool) if tool.approvers or tool.require or tool.escalation else "",
                )
                for name, tool in server.tools.items()
            ],
        )
        for server in content.mcp_servers
    ]


def _tool_routing(server: McpServer, tool: McpTool) -> str:
    """Who answers a call of a gateway's tool, each part the tool's own or else its server's."""
    merged = McpTool.model_construct(
        approval=tool.approval,
        approvers=tool.approvers or server.approvers,
        require=tool.require or server.require,
        escalation=tool.escalation or server.escalation,
    )
    return routing_label(merged)


def _definition_context(agent: Agent, version: AgentVersion, request: ConsoleRequest | None = None) -> dict[str, Any]:
    """What a version's page shows; with `request` (the current version), how an external agent calls Airlock, or
    how an MCP client is pointed at a gateway."""
    content = version.definition
    external = [tool for tool in content.tools if isinstance(tool, ExternalTool)]
    return {
        "curl_example": _curl_example(request, agent.name, content) if request and content.external else "",
        "mcp_endpoint": mcp_endpoint(agent.name) if content.gateway else "",
        "claude_mcp_add": _claude_mcp_add(agent.name) if request and content.gateway else "",
        "gateway_servers": _fronted(content) if content.gateway else [],
        "as_its_server": AS_ITS_SERVER,
        "external_tools": [
            (tool, APPROVAL_LABELS[tool.approval], json.dumps(tool.parameters, indent=2)) for tool in external
        ],
        "policies": PolicySummary.of(content.hooks) if content.hooks is not None else None,
        "agent": agent,
        "version": version,
        "content": content,
        "server_tools": [
            (tool, REGISTRY.get(tool.name), APPROVAL_LABELS[tool.approval])
            for tool in content.tools
            if isinstance(tool, ToolBinding)
        ],
        "mcp_servers": [(server, APPROVAL_LABELS[server.approval]) for server in content.mcp_servers],
        "client_tools": [(tool, json.dumps(tool.parameters, indent=2)) for tool in content.client_tools],
        "parameters": [(parameter, form_text(parameter.default)) for parameter in content.parameters],
        "routing": _routing(content),
    }


def _routing(content: DefinitionContent) -> list[tuple[str, str, bool, str]]:
    """Who answers what (SPEC section 11): (what, its name, whether the name is code, the group), most specific
    first as `DefinitionContent.approvers_for` picks; what is not listed is anyone's who can answer."""
    said = routing_label
    routed = [
        ("Policy escalations", e.binding or "every binding", bool(e.binding), said(e)) for e in content.escalations
    ]
    routed += [("Tool", tool.name, True, said(tool)) for tool in content.tools if tool.approvers or tool.require]
    routed += [
        ("Client tool", tool.name, True, said(tool)) for tool in content.client_tools if tool.approvers or tool.require
    ]
    routed += [
        ("MCP server", s.connection + (f" ({s.tool_prefix}_…)" if s.tool_prefix else ""), True, said(s))
        for s in content.mcp_servers
        if s.approvers or s.require
    ]
    routed += [
        ("MCP tool", content.exposed_name(s, name), True, _tool_routing(s, tool))
        for s in content.mcp_servers
        for name, tool in s.tools.items()
        if tool.approvers or tool.require
    ]
    routed += [("Requests", KIND_NAMES[k.kind].routes, False, said(k)) for k in content.request_kinds]
    return routed
