"""The console's agent pages: list, create and edit (each save is a new version), versions, diff, rollback,
and the policies' Try panel (one interception point evaluated against a sample context)."""

import copy
import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from agent_hooks import DeclarationError
from django.contrib import messages
from django.db import IntegrityError
from django.db.models import F
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents import actions
from agents.definitions import ConnectionRefused, DefinitionContent
from agents.forms import (
    APPROVAL_LABELS,
    SECTIONS,
    DefinitionForm,
    PolicyTryForm,
    as_text,
    choices,
    hooks_text,
    sample_context,
    try_builder,
)
from agents.getters import get_agent_for
from agents.models import Agent, AgentVersion, Run
from agents.payloads import Payload
from agents.policies import LIFTABLE, POINTS, PolicyBlocked, TurnPolicies
from agents.prepare import granted_connections
from agents.starter_policy import starter_hooks
from agents.tools import REGISTRY
from agents.turns import run_here
from console.connections import ConnectionSpec
from console.models import Connection
from console.tenancy import ConsoleRequest, role_required


def _granted(request: ConsoleRequest) -> dict[str, ConnectionSpec]:
    return Connection.objects.specs_for(request.tenant)


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
    return render(request, "agents/form.html", {"form": form, "agent": None, **choices(granted)})


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
    context = {"form": form, "agent": agent, "note": request.POST.get("note", ""), **choices(granted)}
    return render(request, "agents/form.html", context)


@role_required("admin")
@require_GET
def blank_row(request: ConsoleRequest, section: str) -> HttpResponse:
    """One empty row of a form section, added to its table by htmx."""
    if section not in SECTIONS:
        raise Http404("No such section.")
    context = {"row": SECTIONS[section].new(), **choices(_granted(request))}
    return render(request, f"agents/rows.html#{section}", context)


@role_required("admin")
@require_GET
def starter_policy(request: ConsoleRequest) -> HttpResponse:
    """The editor's Policies field filled with the starter policy (enforced, or in shadow mode)."""
    mode = "evaluate_only" if request.GET.get("mode") == "evaluate_only" else "enforce"
    # The tools the form lists (its rows come along, `hx-include`): the manifest names them all, as one that
    # governs tool calls denies a tool it does not name.
    named = [request.GET.get(key, "") for key in request.GET if re.fullmatch(r"(tools|client_tools)-[\w-]+-name", key)]
    tools = [name.strip() for name in named if name.strip()]
    form = DefinitionForm.blank()
    form.values["hooks"] = hooks_text(starter_hooks(mode, tools))
    return render(request, "agents/form.html#hooks-field", {"form": form, "starter_mode": mode})


@role_required("reader")
@require_GET
def agent_detail(request: ConsoleRequest, name: str) -> HttpResponse:
    agent = get_agent_for(request, name)
    version = _version(agent, agent.current_version)
    context = _definition_context(agent, version)
    if version.definition.hooks is not None and request.membership.allows("admin"):
        context["try_form"] = _try_form(request, agent, version, None)
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
        form = _try_form(request, agent, version, request.GET.get("point"))
    context = {"try_form": form, "outcome": outcome}
    if request.htmx:
        policies = PolicySummary.of(version.definition.hooks)
        return render(request, "agents/detail.html#try", {"agent": agent, "policies": policies, **context})
    return render(request, "agents/detail.html", _definition_context(agent, version) | context)


def _try_form(request: ConsoleRequest, agent: Agent, version: AgentVersion, point: str | None) -> PolicyTryForm:
    """The Try form with the sample context of `point` (pre_tool_call unless a known point is asked for)."""
    point = point if point in POINTS else "pre_tool_call"
    runs = Run.objects.filter(agent=agent, message__gt="").order_by("-created_at")
    latest = runs.values_list("message", flat=True).first()
    builder = try_builder(agent.name, version.number, str(request.tenant.pk))
    sample = sample_context(point, builder, version.definition, latest)
    return PolicyTryForm(initial={"point": point, "context": json.dumps(sample, indent=2, ensure_ascii=False)})


@dataclass
class TryOutcome:
    """What the policies said of one context: the verdict as a run's `policy.verdict` event would carry it
    (decision `allow` when there is none), the target the action would go on with, the interception record."""

    point: str
    decision: str = "allow"
    reason: str | None = None
    message: str | None = None
    binding: str | None = None
    before: str = ""
    after: str | None = None  # None when nothing goes on (deny, escalate)
    liftable: bool = False  # an escalation an operator may lift here (the run would wait in the inbox)
    record: str = ""
    problem: str = ""  # the policies could not be loaded


def try_policies(request: ConsoleRequest, agent: Agent, version: AgentVersion, context: dict[str, Any]) -> TryOutcome:
    """Emit `context` once with the version's policies, enforced (a shadow-mode agent's runs would only
    record the verdict; the page says so), with no operator decision known."""
    hooks = copy.deepcopy(version.definition.hooks) or {}
    hooks.setdefault("configuration", {})["mode"] = "enforce"
    point = context["interception_point"]
    outcome = TryOutcome(point=point, before=pretty_json(context.get("target")))
    verdicts: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []

    async def collect(payload: Payload) -> None:
        verdicts.append(payload.dump())

    try:
        policies = TurnPolicies.build(
            hooks,
            connections=granted_connections(request.tenant, version),
            decisions={},
            agent=agent.name,
            version=version.number,
            run_id="try",
            session_id=None,
            tenant=str(request.tenant.pk),
            emit=collect,
            records=records,
        )
    except DeclarationError as error:
        outcome.problem = "; ".join(f"{error.code} at {f.pointer or '/'}: {f.detail}" for f in error.findings)
        outcome.problem = outcome.problem or error.code
        return outcome
    try:
        outcome.after = pretty_json(run_here(policies.check(context)))
    except PolicyBlocked as blocked:
        outcome.liftable = blocked.escalation is not None and point in LIFTABLE
    if verdicts:
        verdict = verdicts[-1]
        outcome.decision, outcome.reason = verdict["decision"], verdict["reason"]
        outcome.message, outcome.binding = verdict["message"], verdict["binding"]
    outcome.record = pretty_json(records[-1]) if records else ""
    return outcome


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


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
    rows = _diff_rows(a.definition, b.definition)
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
    actions.delete_agent(agent)
    messages.success(request, f"Deleted agent “{agent.name}”.")
    return redirect("agents:list")


def _definition_context(agent: Agent, version: AgentVersion) -> dict[str, Any]:
    content = version.definition
    return {
        "policies": PolicySummary.of(content.hooks) if content.hooks is not None else None,
        "agent": agent,
        "version": version,
        "content": content,
        "server_tools": [(tool, REGISTRY.get(tool.name), APPROVAL_LABELS[tool.approval]) for tool in content.tools],
        "mcp_servers": [(server, APPROVAL_LABELS[server.approval]) for server in content.mcp_servers],
        "client_tools": [(tool, json.dumps(tool.parameters, indent=2)) for tool in content.client_tools],
        "parameters": [(parameter, as_text(parameter.default)) for parameter in content.parameters],
    }


@dataclass
class PolicyBinding:
    """One binding of a declaration as the agent page shows it: its settings, and the policy sources of an
    `airlock.acs` binding (manifest and modules) as text rather than JSON strings."""

    id: str
    kind: str
    points: list[str]  # empty: every point
    settings: list[tuple[str, str]]
    sources: list[tuple[str, str]]

    @classmethod
    def of(cls, binding: dict[str, Any]) -> "PolicyBinding":
        config = dict(binding.get("config") or {})
        sources: list[tuple[str, str]] = []
        if binding.get("kind") == "airlock.acs":
            sources.append(("manifest", str(config.pop("manifest", ""))))
            for policy, files in (config.pop("modules", None) or {}).items():
                sources += [(f"{policy}/{file}", str(text)) for file, text in files.items()]
        settings = [(key, value if isinstance(value, str) else json.dumps(value)) for key, value in config.items()]
        return cls(
            str(binding.get("id", "")), str(binding.get("kind", "")), list(binding.get("at") or []), settings, sources
        )


@dataclass
class PolicySummary:
    mode: str
    resolver: str | None
    bindings: list[PolicyBinding]
    declaration: str

    @classmethod
    def of(cls, hooks: dict[str, Any]) -> "PolicySummary":
        configuration = hooks.get("configuration") or {}
        return cls(
            mode=configuration.get("mode") or "enforce",
            resolver=(configuration.get("approval") or {}).get("resolver"),
            bindings=[PolicyBinding.of(binding) for binding in hooks.get("bindings", [])],
            declaration=hooks_text(hooks),
        )

    @property
    def shadow(self) -> bool:
        return self.mode == "evaluate_only"


def _policy_texts(hooks: dict[str, Any] | None) -> dict[str, str]:
    """A declaration for the diff: the document with its policy sources left out, then each source apart,
    so that a changed Rego line shows as text."""
    if hooks is None:
        return {"Policies": ""}
    summary = PolicySummary.of(hooks)
    elided = copy.deepcopy(hooks)
    for binding in elided.get("bindings", []):
        config = binding.get("config") or {}
        if binding.get("kind") == "airlock.acs":
            if "manifest" in config:
                config["manifest"] = "(below)"
            for files in (config.get("modules") or {}).values():
                files.update(dict.fromkeys(files, "(below)"))
    texts = {"Policies": hooks_text(elided)}
    for binding in summary.bindings:
        texts |= {f"Policy {binding.id}: {label}": text for label, text in binding.sources}
    return texts


_LIST_FIELDS = (
    ("Server tools", "tools"),
    ("Client tools", "clientTools"),
    ("MCP servers", "mcpServers"),
    ("Parameters", "parameters"),
)


def _comparable(content: DefinitionContent, cultures: list[str]) -> dict[str, str]:
    """Every field of a definition as text, under the label the diff shows it with."""
    wire = content.wire()
    fields = {
        "Name": content.name,
        "Display name": content.display_name,
        "Description": content.description,
        "Instructions": content.instructions,
        "Request deadline (seconds)": as_text(content.request_deadline_seconds),
        "Model": content.model.label,
    }
    fields |= {f"Instructions ({culture})": content.instructions_by_culture.get(culture, "") for culture in cultures}
    fields |= {label: json.dumps(wire[key], indent=2) if wire[key] else "" for label, key in _LIST_FIELDS}
    return fields | _policy_texts(content.hooks)


def _diff_rows(a: DefinitionContent, b: DefinitionContent) -> list[dict[str, Any]]:
    """A row per field; a changed one with its lines paired (`lines`: removed, added, kept, folded)."""
    cultures = sorted(a.instructions_by_culture.keys() | b.instructions_by_culture.keys())
    left, right = _comparable(a, cultures), _comparable(b, cultures)
    labels = [*left, *(label for label in right if label not in left)]  # a policy source only one side has
    rows = [(label, left.get(label, ""), right.get(label, "")) for label in labels]
    return [
        {"label": label, "a": x, "b": y, "changed": x != y, "lines": _line_pairs(x, y) if x != y else []}
        for label, x, y in rows
    ]


# Unchanged lines kept around a change, and how many unchanged lines in a row are folded into one.
DIFF_CONTEXT, DIFF_FOLD = 2, 6


def _line_pairs(a: str, b: str) -> list[dict[str, Any]]:
    """The two texts' lines side by side: `kept` on both sides, `changed` (old, new), `removed`, `added`; a run
    of unchanged lines longer than DIFF_FOLD away from the changes is one `folded` row counting them."""
    old, new = a.splitlines(), b.splitlines()
    pairs: list[dict[str, Any]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            kept: list[dict[str, Any]] = [{"kind": "kept", "a": line, "b": line} for line in old[i1:i2]]
            if len(kept) > DIFF_FOLD:
                head = kept[:DIFF_CONTEXT] if pairs else []
                tail = kept[-DIFF_CONTEXT:] if i2 < len(old) or j2 < len(new) else []
                folded = len(kept) - len(head) - len(tail)
                kept = [*head, {"kind": "folded", "count": folded}, *tail]
            pairs += kept
        else:
            removed, added = old[i1:i2], new[j1:j2]
            for index in range(max(len(removed), len(added))):
                x = removed[index] if index < len(removed) else None
                y = added[index] if index < len(added) else None
                kind = "changed" if x is not None and y is not None else ("removed" if x is not None else "added")
                pairs.append({"kind": kind, "a": x, "b": y})
    return pairs
