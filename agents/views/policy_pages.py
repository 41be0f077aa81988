"""The policies as the agent page shows them (`PolicySummary`), the Try panel's evaluation: one
interception point's context evaluated with a version's policies, nothing stored; the policy editor's
Preview (`policy_preview`): what the declaration in the fields would have done to the agent's last closed
approvals (approvals/previews.py), before it is saved; its blank rows (`policy_row`) and its warning naming the
agent's tools the declaration would deny (`blocked_tools`)."""

import copy
import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from agent_hooks import DeclarationError
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from agents.definitions import ConnectionRefused
from agents.forms import DefinitionForm, PolicyTryForm, hooks_text, try_builder, try_context
from agents.forms.hooks import BINDINGS, KINDS, MODULES, PolicyEditor
from agents.getters import get_agent_for
from agents.models import Agent, AgentVersion, Event, Run
from agents.payloads import EventType, Payload
from agents.policies import (
    LIFTABLE,
    POINTS,
    CompilesThrottled,
    PolicyBlocked,
    TurnPolicies,
    compile_problems,
    declaration_problems,
)
from agents.prepare import granted_connections
from approvals.previews import PreviewRefused, checked_hooks, preview_policies
from console.loops import run_here
from console.tenancy import ConsoleRequest, role_required


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


def try_form(request: ConsoleRequest, agent: Agent, version: AgentVersion, point: str | None) -> PolicyTryForm:
    """The Try form with the sample context of `point` (pre_tool_call unless a known point is asked for)."""
    point = point if point in POINTS else "pre_tool_call"
    runs = Run.objects.filter(agent=agent, message__gt="").order_by("-created_at")
    latest = runs.values_list("message", flat=True).first()
    builder = try_builder(agent.name, version.number, str(request.tenant.pk))
    sample = try_context(point, builder, version.definition, latest)
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
    outcome = TryOutcome(point=point, before=_pretty_json(context.get("target")))
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
        outcome.after = _pretty_json(run_here(policies.check(context)))
    except PolicyBlocked as blocked:
        outcome.liftable = blocked.escalation is not None and point in LIFTABLE
    if verdicts:
        verdict = verdicts[-1]
        outcome.decision, outcome.reason = verdict["decision"], verdict["reason"]
        outcome.message, outcome.binding = verdict["message"], verdict["binding"]
    outcome.record = _pretty_json(records[-1]) if records else ""
    return outcome


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@role_required("admin")
@require_POST
def policy_preview(request: ConsoleRequest, name: str) -> HttpResponse:
    """The editor's Preview: the `hooks` field (JSON; empty for none) checked as saving checks it, then run at
    `pre_tool_call` over the agent's last closed approvals; a deny denies, an escalation asks, an allow leaves
    the call to its approval mode. Nothing is saved."""
    agent = get_agent_for(request, name)
    context: dict[str, Any] = {"problems": []}
    editor = PolicyEditor.from_post(request.POST)
    if editor.raw:
        text = request.POST.get("hooks", "").strip()
        try:
            hooks = json.loads(text) if text else None
            if hooks is not None and not isinstance(hooks, dict):
                raise ValueError("the declaration is a JSON object")
        except ValueError as error:
            context["problems"] = [f"The declaration is not valid JSON: {error}"]
            return render(request, "approvals/_preview.html", context)
    else:
        hooks = editor.document()
        if editor.has_errors:
            context["problems"] = ["Some policy fields cannot be read: save to see them marked."]
            return render(request, "approvals/_preview.html", context)
    try:
        checked_hooks(agent, hooks)
    except PreviewRefused as refused:
        context["problems"] = list(refused.errors.values())
    except ConnectionRefused as refused:  # its policies do not compile, or too many compiled lately
        context["problems"] = list(refused.errors.values())
    else:
        preview = preview_policies(agent, hooks)
        context |= {"preview": preview, "said": preview.said("denied")}
    return render(request, "approvals/_preview.html", context)


# The contexts of the tools warning: a call with no arguments (a policy reading one finds it undefined).
_NO_ARGUMENTS: dict[str, Any] = {}


class Blocked(NamedTuple):
    """A tool the declaration would deny: `every` call of it (its manifest does not name it: whatever the
    arguments or the time), or the one call tried, made now with no arguments (a policy reading the time or the
    arguments may allow others); `why` is a sentence."""

    tool: str
    every: bool
    why: str


def blocked_tools(tenant: str, agent: str, hooks: Any, tools: list[str]) -> list[Blocked]:
    """Each of `tools` a call of which `hooks` would deny at `pre_tool_call`, found by evaluating its
    `airlock.acs` bindings in the policy sandbox at one call per tool, made now with no arguments: no tool
    runs, no webhook is called, nothing is stored. Empty for a declaration that does not load or compile."""
    if not isinstance(hooks, dict) or not tools or declaration_problems(hooks):
        return []
    try:  # compiled as saving compiles (once per text, the tenant's compiles rate-limited), or not evaluated
        if compile_problems(hooks, tenant):
            return []
    except CompilesThrottled:
        return []
    bindings = [b for b in hooks.get("bindings", []) if isinstance(b, dict) and b.get("kind") == "airlock.acs"]
    if not bindings:
        return []
    document = {**copy.deepcopy(hooks), "bindings": bindings}
    document.setdefault("configuration", {})["mode"] = "enforce"
    document.pop("surface", None)  # the webhook bindings left out may be what covered some of its points
    verdicts: list[dict[str, Any]] = []

    async def collect(payload: Payload) -> None:
        verdicts.append(payload.dump())

    try:
        policies = TurnPolicies.build(
            document,
            connections={},
            decisions={},
            agent=agent,
            version=None,
            run_id="try",
            session_id=None,
            tenant=tenant,
            emit=collect,
            records=[],
        )
    except (DeclarationError, ValueError):
        return []
    builder = try_builder(agent, 0, tenant)
    blocked = []
    for tool in dict.fromkeys(tools):
        verdicts.clear()
        context = dict(builder.pre_tool_call(call_id="call_1", name=tool, args=_NO_ARGUMENTS))
        try:
            run_here(policies.check(context))
        except PolicyBlocked:
            verdict = verdicts[-1] if verdicts else {}
            if verdict.get("decision") == "deny":
                blocked.append(_blocked(tool, verdict))
    return blocked


def _blocked(tool: str, verdict: dict[str, Any]) -> Blocked:
    reason = str(verdict.get("reason") or "")
    if reason.endswith("tool_unknown"):
        return Blocked(
            tool,
            True,
            "its manifest does not name it under tools: (a manifest that governs tool calls "
            "denies the tools it does not name).",
        )
    said = str(verdict.get("message") or "").strip() or f"A policy denies it ({reason or 'no reason given'})"
    return Blocked(tool, False, said if said.endswith((".", "!", "?")) else f"{said}.")


def seen_mcp_tools(agent: Agent | None) -> list[str]:
    """The MCP tools the agent's recent runs called: their names are known only once a server lists them, so
    the editor checks these (an MCP server is never started for it)."""
    if agent is None:
        return []
    starts = Event.objects.filter(run__agent=agent, type=EventType.TOOL_EXECUTION_START, data__has_key="mcpServerName")
    calls = starts.order_by("-timestamp").values_list("data__toolName", "data__mcpServerName")[:500]
    return sorted({name for name, server in calls if isinstance(name, str) and server})


def form_tools(form: DefinitionForm, agent: Agent | None) -> list[str]:
    """The agent's tools as the form stands (its server and client tools, or an external agent's declared
    ones), and a hosted agent's sub-agents (called as tools) and the MCP tools its runs called."""
    if form.external:
        return [row.values["name"] for row in form.rows["external_tools"] if row.values["name"]]
    if form.gateway:
        # A gateway's tools are its servers': those the form sets apart, and those its calls named.
        seen: list[Any] = []
        if agent is not None:
            called = Event.objects.filter(run__agent=agent, type=EventType.TOOL_EXECUTION_START)
            seen = list(called.order_by("-timestamp").values_list("data__toolName", flat=True)[:500])
        return list(dict.fromkeys([*form.gateway_tool_names, *(name for name in seen if isinstance(name, str))]))
    named = [row.values["name"] for section in ("tools", "client_tools") for row in form.rows[section]]
    kept = form.kept or (agent.current.definition if agent is not None else None)
    named += (kept.sub_agents if kept is not None else []) + seen_mcp_tools(agent)
    return list(dict.fromkeys(name for name in named if name))


def editor_context(request: ConsoleRequest, form: DefinitionForm, agent: Agent | None) -> dict[str, Any]:
    """What the policy editor shows besides the form: the warning naming the tools its declaration would
    deny, and (editing an agent whose saved version has policies) the Try panel."""
    context: dict[str, Any] = {"binding_kinds": KINDS, "points": POINTS}
    tools = form_tools(form, agent)
    if "hooks" not in form.errors:
        hooks = form.content.hooks if form.content else _typed_hooks(form)
        name = agent.name if agent else form.values["name"] or "new-agent"
        context["blocked_tools"] = blocked_tools(str(request.tenant.pk), name, hooks, tools)
    current = agent.current if agent is not None else None
    if agent is not None and current is not None and current.definition.hooks is not None:
        context["try_form"] = try_form(request, agent, current, None)
        context["policies"] = PolicySummary.of(current.definition.hooks)
    return context


def _typed_hooks(form: DefinitionForm) -> Any:
    if not form.policies.raw:
        return form.policies.document()
    try:
        return json.loads(form.values["hooks"] or "null")
    except ValueError:
        return None


@role_required("admin")
@require_GET
def policy_row(request: ConsoleRequest, kind: str) -> HttpResponse:
    """A blank binding of the policy editor (with one blank module), or a blank module of the binding row
    `?binding=<key>`, added by htmx."""
    if kind == "binding":
        binding = BINDINGS.new()
        modules = [MODULES.new(binding=binding.key, file="policy.rego")]
        return render(
            request,
            "agents/_policy_editor.html#binding",
            {"binding": binding, "modules": modules, "at": [], "binding_kinds": KINDS, "points": POINTS},
        )
    key = request.GET.get("binding", "")
    if kind != "module" or not re.fullmatch(r"[0-9a-f]{8}", key):
        raise Http404("No such row.")
    return render(request, "agents/_policy_editor.html#module", {"module": MODULES.new(binding=key)})
