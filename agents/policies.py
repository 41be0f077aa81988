"""Policies on the engine: the eight interception points of AGENT-HOOKS-0.1 (SPEC section 8).

A definition's `hooks` (an `agent-hooks-declaration/1.0` document) becomes one emitter per turn, built by
the agent-hooks SDK's loader with Airlock's registry: the kinds `airlock.acs` (Rego/Cedar policies run by
agent-control-spec) and `airlock.webhook` (a policy webhook connection), and the approval resolver
`airlock-inbox` (an escalation becomes an inbox request; the operator's answer decides it next turn).

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
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import httpx2
from agent_control_spec import ActivatedPolicy, parse_manifest, validate_artifacts
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

from agents.payloads import Payload, PolicyVerdict
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


# Where a point's Rego runs (SPEC section 8: the event loop never waits on a slow policy). A point is evaluated on a
# worker thread until the median of its last MEASURED evaluations took under INLINE_BOUND seconds (wall time), then
# on the event loop, where it stays while that median does; one evaluation over SLOW seconds (a slow policy, not a
# busy machine's pause) sends it back to the thread until MEASURED more under SLOW were timed there.
INLINE_BOUND = 0.001
SLOW = 0.02
MEASURED = 8


class AcsPolicy:
    """A binding's activated policy (one per process per policy text: a version's text never changes) and
    where each of its points is evaluated now (see INLINE_BOUND). The thread costs a hop each way per
    evaluation (about 1 ms a point on a busy 2-core machine, against 0.2-0.5 ms for a starter-sized query), so
    the loop waits only on points measured sub-millisecond: a point that turns slower waits there at most
    MEASURED // 2 times in a row before the median sends it back; one evaluation over SLOW sends it back at once,
    for its next MEASURED evaluations at least."""

    def __init__(self, policy: ActivatedPolicy) -> None:
        self.policy = policy
        self.points = frozenset(policy.intervention_points)
        # Per governed point, its latest evaluations' wall times (racy across a process's threads: a lost
        # measurement only moves a point later).
        self.times: dict[str, deque[float]] = {point: deque(maxlen=MEASURED) for point in self.points}

    def evaluate(self, point: str, context: dict[str, Any]) -> Verdict | Awaitable[Verdict]:
        """The verdict at once when `point` is measured quick (the emitter then needs no task and no timeout
        wait for it), else an awaitable of it on a worker thread (the emitter's timeout applies)."""
        times = self.times[point]
        if len(times) == MEASURED and sorted(times)[MEASURED // 2] < INLINE_BOUND:
            return self._timed(point, context)
        return asyncio.to_thread(self._timed, point, context)

    def _timed(self, point: str, context: dict[str, Any]) -> Verdict:
        started = time.perf_counter()
        verdict = self.policy.evaluate(point, context)
        took = time.perf_counter() - started
        if took > SLOW:
            self.times[point].clear()
        else:
            self.times[point].append(took)
        return verdict


@lru_cache(maxsize=128)
def _activated(manifest: str, modules: str) -> AcsPolicy:
    """The policy of a binding, checked and activated once per process for its text; ValueError says why it
    cannot be."""
    bundles = {policy: {"modules": files} for policy, files in json.loads(modules).items()}
    problems = [p for p in validate_artifacts(manifest, bundles) if p.get("severity", "error") == "error"]
    if problems:
        raise ValueError("; ".join(f"{p.get('code')}: {p.get('message')}" for p in problems))
    try:
        return AcsPolicy(ActivatedPolicy.from_memory(manifest, bundles))
    except Exception as error:  # the native loader reports a bad manifest or module as RuntimeError
        raise ValueError(str(error)) from None


def _acs_sources(config: Mapping[str, Any]) -> tuple[str, dict[str, dict[str, str]]]:
    manifest, modules = config.get("manifest"), config.get("modules", {})
    if not isinstance(manifest, str) or not manifest.strip():
        raise ValueError("config.manifest must be the manifest's YAML text")
    if not isinstance(modules, dict) or not all(
        isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
        for files in modules.values()
    ):
        raise ValueError('config.modules must map policy ids to {"<file>.rego": "<source>"}')
    extra = set(config) - {"manifest", "modules"}
    if extra:
        raise ValueError(f"config has unknown fields: {', '.join(sorted(extra))}")
    return manifest, modules


ALLOW = Verdict.allow()


class AcsBinding:
    """An `airlock.acs` binding: points its manifest does not govern allow (the declaration binds every point);
    the rest are evaluated by its policy, on a worker thread unless measured quick (AcsPolicy). It answers
    synchronously when it can: the emitter awaits (in a task, under its timeout) only an awaitable."""

    def __init__(self, policy: AcsPolicy, name: str) -> None:
        self.policy, self.name = policy, name

    def intercept(self, context: dict[str, Any]) -> Verdict | Awaitable[Verdict]:
        point = context["interception_point"]
        if point not in self.policy.points:
            return ALLOW
        return self.policy.evaluate(point, context)


def acs_binding(config: Mapping[str, Any], binding: Any) -> Any:  # an AcsBinding (sync or async: not the SDK's type)
    manifest, modules = _acs_sources(config)
    return AcsBinding(_activated(manifest, json.dumps(modules, sort_keys=True)), binding.id)


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
    surface points no binding covers, which would deny every run); empty when it can. The policies are
    compiled here, so a version that saves is a version that runs."""
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
        manifest = parse_manifest(binding["config"]["manifest"])
        points = set(manifest.get("intervention_points") or {})
        listed = {tool.get("id", name) for name, tool in (manifest.get("tools") or {}).items()}
        missing = [name for name in tools if name not in listed]
        if points & {"pre_tool_call", "post_tool_call"} and missing:
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
