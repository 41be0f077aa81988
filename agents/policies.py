"""Policies on the engine: the eight interception points of AGENT-HOOKS-0.1 (SPEC section 8).

A definition's `hooks` (an `agent-hooks-declaration/1.0` document) becomes one emitter per turn, built by
the agent-hooks SDK's loader with Airlock's registry: the kinds `airlock.acs` (Rego/Cedar policies run by
agent-control-spec in the policy sandbox, agents/policy_sandbox.py) and `airlock.webhook` (a policy webhook
connection), and the approval resolver `airlock-inbox` (an escalation becomes an inbox request; the operator's
answer decides it next turn).

`TurnPolicies.check` emits one context and returns the target to go on with (transformed where a verdict
said so); a deny raises `PolicyBlocked`. The engine (agents/engine/__init__.py) calls it at each point:
`agent_startup`, `input` and `agent_shutdown` around the turn, `pre_model_call`/`post_model_call`/`output`
in `PolicyCapability`, `pre_tool_call`/`post_tool_call` in the tool gate. This module knows nothing of the
database: the caller resolves connections and hands in the operator's decisions.
"""

import asyncio
import copy
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import httpx2
import yaml
from agent_hooks import (
    AgentContextBuilder,
    Decision,
    DeclarationError,
    EnforcementMode,
    HostRegistry,
    HostSurface,
    InterceptionBlocked,
    InterceptionEmitter,
    InterceptionRecord,
    Verdict,
)
from agent_hooks.approval import ApprovalOutcome, ApprovalRequest, ApprovalResolution
from django.conf import settings

from agents.payloads import Payload, PolicyVerdict
from agents.policy_sandbox import BudgetExceeded, PolicyInvalid, WorkerFailed, sandbox
from console.connections import ConnectionSpec

SURFACE = HostSurface.from_capabilities(["model_calls", "tool_calls", "host_declaration"])
POINTS = (
    "agent_startup",
    "input",
    "pre_model_call",
    "post_model_call",
    "pre_tool_call",
    "post_tool_call",
    "output",
    "agent_shutdown",
)
RESOLVER = "airlock-inbox"
# Where an escalation waits for an operator; elsewhere it is a deny.
LIFTABLE = ("pre_tool_call", "output")
FRAMEWORK = "airlock"

Emit = Callable[[Payload], Awaitable[None]]


def stable_key(context: Mapping[str, Any]) -> str:
    """What an operator's decision on an escalation is bound to: the context without its timestamp,
    sequence and session (which differ when the next turn asks again); changed arguments are a new key."""
    kept = {k: v for k, v in context.items() if k not in ("timestamp", "sequence", "session")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# What is kept of a verdict's strings wherever Airlock stores or streams them (records, events, a run's error, an
# inbox request): a policy's answer is bounded by its source (a webhook's body, an ACS evaluation's output) to
# hundreds of kilobytes, which a run would otherwise copy into several rows and every inbox card.
REASON_LIMIT = 1_000
MESSAGE_LIMIT = 4_000


def capped(text: str | None, limit: int) -> str | None:
    """`text` cut to `limit` characters, the last an ellipsis saying so."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def _capped_record(wire: dict[str, Any]) -> dict[str, Any]:
    """An interception record's wire shape with its verdicts' reasons and messages capped."""
    verdict = wire["verdict"]
    for said in (verdict, *verdict.get("warnings", ())):
        for key, limit in (("reason", REASON_LIMIT), ("message", MESSAGE_LIMIT)):
            if key in said:
                said[key] = capped(said[key], limit)
    for summary in wire.get("verdicts", ()):
        if "reason" in summary:
            summary["reason"] = capped(summary["reason"], REASON_LIMIT)
    return wire


@dataclass
class Escalation:
    """A liftable deny the inbox resolver could not answer yet: it becomes an approval request."""

    key: str
    point: str
    binding: str | None
    reason: str | None
    message: str | None

    def __post_init__(self) -> None:
        self.reason, self.message = capped(self.reason, REASON_LIMIT), capped(self.message, MESSAGE_LIMIT)

    def wire(self) -> dict[str, Any]:
        return {"binding": self.binding, "reason": self.reason, "message": self.message}


class PolicyBlocked(Exception):
    """A deny at `point`; `escalation` is set when the operator may still lift it."""

    def __init__(
        self, point: str, record: InterceptionRecord, escalation: Escalation | None, asked: Escalation | None
    ) -> None:
        # An escalation nobody may lift here is a deny; its reason is the policy's, not the resolver's.
        said = asked or record.verdict
        self.reason, self.message = capped(said.reason, REASON_LIMIT), capped(said.message, MESSAGE_LIMIT)
        super().__init__(self.message or self.reason or "denied by policy")
        self.point, self.record, self.escalation = point, record, escalation
        self.binding = _binding_of(record)

    def wire(self) -> dict[str, Any]:
        """The run's `error` when this ends it (status `blocked`)."""
        return {
            "code": "policy_denied",
            "point": self.point,
            "reason": self.reason,
            "message": self.message or f"A policy denied the run at {self.point}.",
        }


class InboxResolver:
    """`airlock-inbox`: answers an escalation with the operator's decision when one is known for its
    context (`decisions`: stable key -> approved), else leaves it unresolved and notes it in `asked`."""

    def __init__(self, decisions: Mapping[str, bool]) -> None:
        self.decisions = decisions
        self.asked: dict[str, Escalation] = {}

    def resolve(self, request: ApprovalRequest) -> ApprovalResolution:
        key = stable_key(request.context)
        decided = self.decisions.get(key)
        identity = request.context_identity
        if decided is None:
            point = request.interception_point.value
            verdict = request.verdict
            self.asked[key] = Escalation(key, point, None, verdict.reason, verdict.message)
            return ApprovalResolution(outcome=ApprovalOutcome.UNRESOLVED, context_identity=identity)
        if decided:
            return ApprovalResolution(
                outcome=ApprovalOutcome.APPROVE, context_identity=identity, verdict=Verdict.allow()
            )
        reason = request.verdict.reason or "denied"
        verdict = Verdict.deny(reason=reason, message="The operator denied it.")
        return ApprovalResolution(outcome=ApprovalOutcome.REJECT, context_identity=identity, verdict=verdict)


# ---- airlock.acs ----------------------------------------------------------------------------------------

# What a tenant's manifest may say (SPEC sections 2 and 8): every key the engine would resolve to a file or
# URL is refused, and so is every key this list does not name, so a key a later engine learns to resolve is
# refused too. The policies' sources ride in the binding's config (`modules`, `data`), never on the host.
MANIFEST_MAX = 64 * 1024
SOURCES_MAX = 256 * 1024
_MANIFEST_KEYS = {
    "agent_control_specification_version",
    "metadata",
    "extends",
    "policies",
    "intervention_points",
    "tools",
    "annotators",
    "approval",
}
_POLICY_KEYS = {"rego": {"type", "query"}, "cedar": {"type", "query", "policy_set"}}
_POINT_KEYS = {"policy_target", "policy_target_kind", "tool_name_from", "annotations", "policy"}
_POINT_POLICY_KEYS = {"id", "query"}
_TOOL_KEYS = {"type", "id", "description"}
_HOST_KEYS = {"bundle", "bundle_url", "inline_bundle", "data", "data_paths", "policy_path", "entities_path"}
_HOST_KEYS |= {"schema_path", "adapter", "url", "path", "file", "include"}
_READS_THE_HOST = "names a file or URL, and the server reads none: give Rego in config.modules, data in config.data"


class ManifestRefused(ValueError):
    """A manifest Airlock does not run; the message names the key (`policies.mail.bundle`) and why."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"manifest key {key} is not allowed: {why}" if key else f"the manifest {why}")


def _yaml_document(text: str) -> Any:
    """The manifest's YAML as plain data; tags (`!include` reads a file), anchors and aliases (which expand
    without bound) are refused before anything is built."""
    if len(text.encode()) > MANIFEST_MAX:
        raise ManifestRefused("", f"is over {MANIFEST_MAX // 1024} KB")
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise ManifestRefused("", "uses a YAML anchor or alias: write each value out")
            tag = getattr(event, "tag", None)
            if tag is not None and not tag.startswith("tag:yaml.org,2002:") and tag != "!":
                raise ManifestRefused("", f"uses the YAML tag {tag}: tags are not read")
        return yaml.load(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or "cannot be read"
        raise ManifestRefused("", f"is not valid YAML: {problem}{where}") from None


def _only(mapping: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(mapping, dict):
        raise ManifestRefused(where, "must be a mapping")
    for key in mapping:
        if key not in allowed:
            path = f"{where}.{key}" if where else str(key)
            raise ManifestRefused(path, _READS_THE_HOST if key in _HOST_KEYS else "unknown key")
    return mapping


def safe_manifest(text: str) -> dict[str, Any]:
    """The manifest `text` as data, when it names nothing on the host; ManifestRefused naming the key."""
    document = _only(_yaml_document(text), _MANIFEST_KEYS, "")
    if document.get("extends") not in (None, []):
        raise ManifestRefused("extends", "a manifest cannot name another manifest: " + _READS_THE_HOST)
    if document.get("annotators") not in (None, {}):
        raise ManifestRefused("annotators", "annotators call services from the server: use a policy webhook")
    if document.get("approval") is not None:
        raise ManifestRefused("approval", "escalations go to the declaration's resolver (airlock-inbox)")
    for name, policy in _only(document.get("policies") or {}, set(document.get("policies") or {}), "").items():
        kind = policy.get("type") if isinstance(policy, dict) else None
        if kind not in _POLICY_KEYS:
            raise ManifestRefused(f"policies.{name}.type", "must be rego or cedar")
        _only(policy, _POLICY_KEYS[kind], f"policies.{name}")
    for point, config in (document.get("intervention_points") or {}).items():
        _only(config, _POINT_KEYS, f"intervention_points.{point}")
        if config.get("annotations") not in (None, {}):
            raise ManifestRefused(f"intervention_points.{point}.annotations", "annotators are not available")
        _only(config.get("policy") or {}, _POINT_POLICY_KEYS, f"intervention_points.{point}.policy")
    for name, tool in (document.get("tools") or {}).items():
        _only(tool, _TOOL_KEYS, f"tools.{name}")
    return document


@dataclass(frozen=True)
class AcsSources:
    """A binding's policy as the sandbox runs it: the checked manifest (as JSON, which the engine reads as
    YAML: no tag or anchor reaches it), its bundles and the key both are known by."""

    key: str
    manifest: str
    bundles: dict[str, Any]
    points: frozenset[str]
    tools: frozenset[str]


def _text_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _data_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, dict)
        and set(item) == {"mount", "document"}
        and isinstance(item["mount"], list)
        and all(isinstance(part, str) for part in item["mount"])
        for item in value
    )


@lru_cache(maxsize=256)
def _checked(manifest_text: str, modules_text: str, data_text: str) -> AcsSources:
    if len(modules_text) + len(data_text) > SOURCES_MAX:
        raise ValueError(f"config.modules and config.data are over {SOURCES_MAX // 1024} KB together")
    document = safe_manifest(manifest_text)
    # Back from the texts the cache is keyed by (the config's dicts cannot be a key).
    modules, data = json.loads(modules_text), json.loads(data_text)
    bundles = {policy: {"modules": modules.get(policy, {}), "data": data.get(policy, [])} for policy in modules | data}
    manifest = json.dumps(document, sort_keys=True, default=str)
    key = hashlib.sha256(json.dumps([manifest, bundles], sort_keys=True).encode()).hexdigest()
    points = frozenset(document.get("intervention_points") or {})
    tools = frozenset(str(t.get("id", name)) for name, t in (document.get("tools") or {}).items())
    return AcsSources(key, manifest, bundles, points, tools)


def acs_sources(config: Mapping[str, Any]) -> AcsSources:
    """The policy of an `airlock.acs` binding's config, checked (ValueError says why it cannot run)."""
    manifest, modules, data = config.get("manifest"), config.get("modules", {}), config.get("data", {})
    if not isinstance(manifest, str) or not manifest.strip():
        raise ValueError("config.manifest must be the manifest's YAML text")
    if not isinstance(modules, dict) or not all(_text_map(files) for files in modules.values()):
        raise ValueError('config.modules must map policy ids to {"<file>.rego": "<source>"}')
    if not isinstance(data, dict) or not all(_data_list(documents) for documents in data.values()):
        raise ValueError('config.data must map policy ids to [{"mount": ["<name>", ...], "document": {...}}]')
    extra = set(config) - {"manifest", "modules", "data"}
    if extra:
        raise ValueError(f"config has unknown fields: {', '.join(sorted(extra))}")
    return _checked(manifest, json.dumps(modules, sort_keys=True), json.dumps(data, sort_keys=True))


# The compiler's messages quote the tenant's own sources, never the host (nothing it reads is the host's);
# its positions are in the JSON the sandbox hands it, not in the tenant's YAML, so they are dropped.
_POSITION = re.compile(r" at line \d+,? column \d+")


def _in_our_words(problem: str) -> str:
    problem = _POSITION.sub("", problem)
    return problem if len(problem) <= 500 else problem[:500] + "…"


class AcsBinding:
    """An `airlock.acs` binding: points its manifest does not govern allow at once (the declaration binds
    every point); the rest are evaluated in the policy sandbox under its budget, which fails closed."""

    def __init__(self, sources: AcsSources, name: str) -> None:
        self.sources, self.name = sources, name

    def intercept(self, context: dict[str, Any]) -> Verdict | Awaitable[Verdict]:
        if context["interception_point"] not in self.sources.points:
            return ALLOW
        return self._evaluate(context)

    async def _evaluate(self, context: dict[str, Any]) -> Verdict:
        sources, point = self.sources, context["interception_point"]
        try:
            wire = await sandbox().evaluate(sources.key, sources.manifest, sources.bundles, point, context)
        except BudgetExceeded:
            return Verdict.deny(reason=BUDGET_EXCEEDED, message="The policy ran past its time budget.")
        except WorkerFailed:
            return Verdict.deny(reason=WORKER_FAILED, message="The policy's evaluation stopped.")
        except PolicyInvalid as error:
            return Verdict.deny(reason="runtime_error:policy_invalid", message=_in_our_words(str(error)))
        return Verdict.from_wire(wire)


ALLOW = Verdict.allow()
# The budget is the host's, but agent-hooks reserves `host_error:*` for the emitter's own failures (an
# interceptor's verdict may not use it, section 5): ours take the prefix the policy engine's fail-closed
# denies use.
BUDGET_EXCEEDED = "runtime_error:budget_exceeded"
WORKER_FAILED = "runtime_error:policy_worker_failed"


def acs_binding(config: Mapping[str, Any], binding: Any) -> Any:  # an AcsBinding (sync or async: not the SDK's type)
    return AcsBinding(acs_sources(config), binding.id)


class CompileQuota:
    """Compiles of new policy texts per tenant (saves that bring one), at most `POLICY_COMPILES_PER_MINUTE`
    a minute in this process: a token bucket per tenant. A text compiled before costs nothing."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, tenant: str) -> float:
        """0 when `tenant` may compile now (and it is counted), else the seconds until it may."""
        per_minute = float(settings.POLICY_COMPILES_PER_MINUTE)
        with self._lock:
            now = time.monotonic()
            tokens, then = self._buckets.get(tenant, (per_minute, now))
            tokens = min(per_minute, tokens + (now - then) * per_minute / 60)
            if tokens < 1:
                self._buckets[tenant] = (tokens, now)
                return (1 - tokens) * 60 / per_minute
            self._buckets[tenant] = (tokens - 1, now)
            return 0.0


COMPILE_QUOTA = CompileQuota()
# Policy key -> why it does not compile (empty: it does), for the texts this process compiled; oldest first.
_COMPILED: OrderedDict[str, tuple[str, ...]] = OrderedDict()
_COMPILED_HELD = 1024


class CompilesThrottled(Exception):
    """The tenant compiled `CompileQuota.per_minute` new policies in the last minute; `retry_after` seconds."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, round(retry_after))
        super().__init__(f"too many new policies compiled in a minute; try again in {self.retry_after} s")


def _compile(sources: AcsSources, tenant: str) -> tuple[str, ...]:
    wait = COMPILE_QUOTA.take(tenant)
    if wait:
        raise CompilesThrottled(wait)
    try:
        return tuple(_in_our_words(p) for p in sandbox().check(sources.key, sources.manifest, sources.bundles))
    except BudgetExceeded:
        budget = settings.POLICY_COMPILE_BUDGET_MS / 1000
        return (f"{BUDGET_EXCEEDED}: the policy did not compile within {budget:g} s",)


def compile_problems(document: Any, tenant: str) -> list[str]:
    """Why the `airlock.acs` policies of a valid `document` do not compile, in the loader's words: what saving
    a definition checks after its structure, once per process per policy text. A policy over the compile
    budget does not compile; CompilesThrottled when `tenant` compiled too many new texts lately."""
    problems = []
    for index, binding in enumerate(document.get("bindings", []) if isinstance(document, dict) else []):
        if not isinstance(binding, dict) or binding.get("kind") != "airlock.acs":
            continue
        sources = acs_sources(binding.get("config") or {})
        found = _COMPILED.get(sources.key)
        if found is None:
            try:
                found = _compile(sources, tenant)
            except WorkerFailed:  # not kept: the next save tries again
                found = ("the policy compiler stopped while compiling this policy",)
            else:
                _COMPILED[sources.key] = found
                while len(_COMPILED) > _COMPILED_HELD:
                    _COMPILED.popitem(last=False)
        problems += [f"declaration_error:binding_rejected at /bindings/{index}/config: {p}" for p in found]
    return problems


# ---- airlock.webhook ------------------------------------------------------------------------------------


def webhook_config(config: Mapping[str, Any]) -> tuple[str, float]:
    connection, timeout_ms = config.get("connection"), config.get("timeoutMs", 2000)
    if not isinstance(connection, str) or not connection:
        raise ValueError("config.connection must name a policy webhook connection")
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 1 <= timeout_ms <= 30_000:
        raise ValueError("config.timeoutMs must be a whole number of milliseconds from 1 to 30000")
    extra = set(config) - {"connection", "timeoutMs"}
    if extra:
        raise ValueError(f"config has unknown fields: {', '.join(sorted(extra))}")
    return connection, timeout_ms / 1000


# A verdict is a few hundred bytes; a receiver's answer over this is refused, read no further (issue 26: a 200 MB
# `reason` took the process from 0.4 to 2.8 GB, and its run's outcome could not be stored).
VERDICT_LIMIT = 64 * 1024


class VerdictTooLarge(Exception):
    """A webhook's answer over VERDICT_LIMIT bytes. The emitter makes any exception of an interceptor a
    fail-closed deny, `host_error:interceptor_failed` with the exception's name as its message: the standard's
    reserved reasons (agent-hooks section 11) have none for this, and an interceptor cannot add one."""


async def _verdict_body(response: httpx2.Response) -> bytes:
    """The body of `response`, as sent (never decompressed: a small compressed body can inflate to gigabytes),
    or VerdictTooLarge as soon as it is known to be over VERDICT_LIMIT."""
    if int(response.headers.get("Content-Length") or 0) > VERDICT_LIMIT:
        raise VerdictTooLarge
    parts, size = [], 0
    async for part in response.aiter_raw():
        size += len(part)
        if size > VERDICT_LIMIT:
            raise VerdictTooLarge
        parts.append(part)
    return b"".join(parts)


class WebhookBinding:
    """An `airlock.webhook` binding: POSTs the context to the connection's URL, signed with its secret, and
    reads the verdict; a timeout, a non-2xx answer, an answer over VERDICT_LIMIT bytes or a body that is not a
    verdict fails closed."""

    def __init__(self, spec: ConnectionSpec, timeout: float, name: str) -> None:
        self.spec, self.timeout, self.name = spec, timeout, name

    async def intercept(self, context: dict[str, Any]) -> Any:
        body = json.dumps(context, separators=(",", ":")).encode()
        # The body is read raw (_verdict_body): a compressed one would not be JSON.
        headers = {**self.spec.webhook_headers(body), "Accept-Encoding": "identity"}
        # Leaving the blocks unread closes the connection: the rest of an oversized answer is never read.
        async with (
            asyncio.timeout(self.timeout),
            httpx2.AsyncClient() as client,
            client.stream("POST", self.spec.url, content=body, headers=headers) as response,
        ):
            response.raise_for_status()
            answer = await _verdict_body(response)
        return json.loads(answer)


def webhook_binding(connections: Mapping[str, ConnectionSpec] | None) -> Callable[[Mapping[str, Any], Any], Any]:
    """The `airlock.webhook` kind for a turn with these `connections`; None checks the config's shape only (on
    save the connection is checked with the definition's other connections, as a grant can change)."""

    def build(config: Mapping[str, Any], binding: Any) -> Any:
        name, timeout = webhook_config(config)
        spec = connections.get(name) if connections is not None else ConnectionSpec(name, "webhook")
        if spec is None or spec.kind != "webhook":
            raise ValueError(f"no policy webhook connection named {name!r} is granted to this tenant")
        return WebhookBinding(spec, timeout, binding.id)

    return build


# ---- the declaration ------------------------------------------------------------------------------------


def registry(connections: Mapping[str, ConnectionSpec] | None, resolver: Any) -> HostRegistry:
    return (
        HostRegistry(SURFACE)
        .kind("airlock.acs", acs_binding)
        .kind("airlock.webhook", webhook_binding(connections))
        .approval_resolver(RESOLVER, resolver)
    )


def declaration_problems(document: Any) -> list[str]:
    """Why `document` cannot be an agent's `hooks` (the loader's refusals, with their JSON pointers, and
    surface points no binding covers, which would deny every run); empty when it can. Each `airlock.acs`
    manifest is checked here (`safe_manifest`); its policies compile when the version is saved
    (`compile_problems`), so a version that saves is a version that runs."""
    try:
        emitter = InterceptionEmitter.from_declaration_value(document, registry(None, InboxResolver({})))
    except DeclarationError as error:
        return [f"{error.code} at {f.pointer or '/'}: {f.detail}" for f in error.findings] or [error.code]
    resolved = emitter.declaration
    assert resolved is not None
    wire = resolved.to_wire()
    covered: set[str] = set()
    for binding in wire.get("bindings", []):
        covered |= set(binding.get("at") or POINTS)
    surface = set((wire.get("surface") or {}).get("interception_points") or POINTS)
    missing = [point for point in POINTS if point in surface and point not in covered]
    if missing:
        return [f"no binding covers {', '.join(missing)}: every run would be denied there (omit `at` to bind all)"]
    return []


def unlisted_tools(document: Any, tools: list[str]) -> list[str]:
    """Why `tools` (the definition's server and client tools) would be denied by a valid `document`: an
    `airlock.acs` manifest that governs tool calls denies every tool it does not list (`tool_unknown`)."""
    problems = []
    for binding in document.get("bindings", []):
        if binding.get("kind") != "airlock.acs":
            continue
        sources = acs_sources(binding["config"])
        missing = [name for name in tools if name not in sources.tools]
        if sources.points & {"pre_tool_call", "post_tool_call"} and missing:
            problems.append(
                f"the manifest of binding {binding.get('id')!r} governs tool calls but does not list "
                f"{', '.join(missing)} under `tools:`: every call of it would be denied"
            )
    return problems


def webhook_connections(document: Any) -> list[tuple[int, str]]:
    """(binding index, connection name) of each `airlock.webhook` binding of a valid `document`."""
    return [
        (i, binding.get("config", {}).get("connection"))
        for i, binding in enumerate(document.get("bindings", []) if isinstance(document, dict) else [])
        if isinstance(binding, dict) and binding.get("kind") == "airlock.webhook"
    ]


# ---- one turn -------------------------------------------------------------------------------------------


def _verdict_decision(record: InterceptionRecord) -> str:
    verdict = record.verdict
    decision = verdict.decision.value
    if decision == "allow" and verdict.warnings:
        return "warn"
    if decision == "deny" and verdict.approval is not None:
        return "escalate"
    return decision


def _binding_of(record: InterceptionRecord) -> str | None:
    deciding = [v for v in record.verdicts if v.decision.value != "allow"] or list(record.verdicts)
    return deciding[-1].name if deciding else None


@dataclass
class TurnPolicies:
    """The emitter of one turn, with what it needs to report: `emit` (the run's events), `records` (every
    interception record, in order, on the wire) and the operator's decisions in `resolver`. `surface`: the
    points the declaration selected (all eight unless its `surface` names fewer); the others are not emitted."""

    emitter: InterceptionEmitter
    builder: AgentContextBuilder
    resolver: InboxResolver
    emit: Emit
    records: list[dict[str, Any]] = field(default_factory=list)
    surface: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        declared = self.emitter.declaration
        self.surface = frozenset(declared.surface["interception_points"] if declared is not None else POINTS)

    @classmethod
    def build(
        cls,
        document: Any,
        *,
        connections: Mapping[str, ConnectionSpec],
        decisions: Mapping[str, bool],
        agent: str,
        version: int | None,
        run_id: str,
        session_id: str | None,
        tenant: str | None,
        emit: Emit,
        records: list[dict[str, Any]],
    ) -> "TurnPolicies":
        resolver = InboxResolver(decisions)
        emitter = InterceptionEmitter.from_declaration_value(document, registry(connections, resolver))
        # The run is the contract's session (its records are numbered from 0 per turn); Airlock's session
        # travels as an extension.
        builder = AgentContextBuilder(
            agent_id=agent,
            framework=FRAMEWORK,
            session_id=run_id,
            agent_name=agent,
            agent_version=str(version) if version is not None else None,
        )
        if tenant or session_id:
            builder.with_l2(tenant=tenant, extensions={"airlock": {"sessionId": session_id}})
        policies = cls(emitter, builder, resolver, emit, records)
        emitter.set_record_sink(lambda record: records.append(_capped_record(record.to_wire())))
        return policies

    @property
    def enforced(self) -> bool:
        return self.emitter.mode is EnforcementMode.ENFORCE

    async def check(self, context: dict[str, Any]) -> Any:
        """Emit `context`; the target to go on with, or PolicyBlocked. In evaluate_only the original target
        always goes on (verdicts are recorded, not enforced). A point outside the declared surface goes on
        unchecked: the declaration says the host does not emit it."""
        point, target = context["interception_point"], context["target"]
        if point not in self.surface:
            return target
        original = copy.deepcopy(target) if not self.enforced else None
        try:
            outcome = await self.emitter.emit(context)
        except InterceptionBlocked as blocked:
            record = blocked.result
            asked = self.resolver.asked.get(stable_key(context))
            if asked is not None:
                asked.binding = _binding_of(record)
            escalation = asked if asked is not None and point in LIFTABLE else None
            await self._report(context, record, asked)
            raise PolicyBlocked(point, record, escalation, asked) from None
        await self._report(context, outcome.record, None)
        if not self.enforced:
            return original
        # The caller's own object when no verdict changed it: `after is before` tells, at no cost.
        return outcome.target if outcome.record.verdict.decision is Decision.TRANSFORM else target

    async def shutdown(self, reason: str) -> None:
        """`agent_shutdown`, on every way out of a turn (its verdict is recorded, never enforced)."""
        record = await self.emitter.emit_unchecked(self.builder.agent_shutdown(reason=reason))
        await self._report({"interception_point": "agent_shutdown"}, record, None)

    def decided(self, context: Mapping[str, Any]) -> bool:
        """Whether an operator answered an escalation of `context` (their denial is theirs, not the rules')."""
        return stable_key(context) in self.resolver.decisions

    async def _report(
        self, context: Mapping[str, Any], record: InterceptionRecord, escalation: Escalation | None
    ) -> None:
        decision = "escalate" if escalation is not None else _verdict_decision(record)
        if decision == "allow":
            return
        verdict = record.verdict
        if escalation is not None:
            verdict_reason, verdict_message = escalation.reason, escalation.message
        elif decision == "warn":
            verdict_reason, verdict_message = verdict.warnings[0].reason, verdict.warnings[0].message
        else:
            verdict_reason, verdict_message = verdict.reason, verdict.message
        point = context["interception_point"]
        call = context.get("tool_call") or {}  # at a tool point, which call of the run it was about
        verdict_event = PolicyVerdict(
            point=point,
            decision=decision,
            reason=capped(verdict_reason, REASON_LIMIT),
            message=capped(verdict_message, MESSAGE_LIMIT),
            binding=_binding_of(record),
            enforced=self.enforced,
            toolName=call.get("name"),
            toolCallId=call.get("id"),
        )
        await self.emit(verdict_event)


@dataclass(frozen=True)
class PolicyScope:
    """What the emitters of one run share: the run (the contract's session of its agent's records; a
    sub-agent's records have its `agentId` instead, `within`), Airlock's session and tenant in every context,
    and the run's records, where every emitter of the run (its agent's, its sub-agents') appends."""

    session: str
    session_id: str | None
    tenant: str | None
    records: list[dict[str, Any]]

    def within(self, agent_id: str) -> "PolicyScope":
        """The scope of a sub-agent's turn: its records say which sub-agent (`agentId`) they are of."""
        return PolicyScope(agent_id, self.session_id, self.tenant, self.records)

    def policies(
        self,
        document: Any,
        *,
        connections: Mapping[str, ConnectionSpec],
        decisions: Mapping[str, bool],
        agent: str,
        version: int | None,
        emit: Emit,
    ) -> TurnPolicies | None:
        """The emitter of a turn of `agent` from its version's declaration `document`; None without one
        (nothing is built: a turn without hooks pays nothing)."""
        if document is None:
            return None
        return TurnPolicies.build(
            document,
            connections=connections,
            decisions=decisions,
            agent=agent,
            version=version,
            run_id=self.session,
            session_id=self.session_id,
            tenant=self.tenant,
            emit=emit,
            records=self.records,
        )
