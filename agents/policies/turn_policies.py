"""One turn's emitter (`TurnPolicies`), what the emitters of a run share (`PolicyScope`), and a deny
(`PolicyBlocked`)."""

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_hooks import (
    AgentContextBuilder,
    Decision,
    EnforcementMode,
    InterceptionBlocked,
    InterceptionEmitter,
    InterceptionRecord,
)

from agents.payloads import Payload, PolicyVerdict
from agents.policies.declarations import registry
from agents.policies.escalations import MESSAGE_LIMIT, REASON_LIMIT, AskedEscalation, InboxResolver, capped, stable_key
from agents.policies.points import LIFTABLE, POINTS
from agents.policy_sandbox import for_tenant
from console.connections import ConnectionSpec

FRAMEWORK = "airlock"

Emit = Callable[[Payload], Awaitable[None]]


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


class PolicyBlocked(Exception):
    """A deny at `point`; `escalation` is set when the operator may still lift it."""

    def __init__(
        self, point: str, record: InterceptionRecord, escalation: AskedEscalation | None, asked: AskedEscalation | None
    ) -> None:
        # An escalation nobody may lift here is a deny; its reason is the policy's, not the resolver's.
        said = asked or record.verdict
        self.reason, self.message = capped(said.reason, REASON_LIMIT), capped(said.message, MESSAGE_LIMIT)
        super().__init__(self.message or self.reason or "denied by policy")
        self.point, self.record, self.escalation = point, record, escalation
        self.binding = _binding_of(record)

    def wire(self) -> dict[str, Any]:
        """The run's `error` when this ends it (status `blocked`): the point, the binding that denied and why."""
        return {
            "code": "policy_denied",
            "point": self.point,
            "binding": self.binding,
            "reason": self.reason,
            "message": self.message or f"A policy denied the run at {self.point}.",
        }


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
    interception record, in order, on the wire) and the operators' decisions (and denials' reasons) in
    `resolver`. `surface`: the points the declaration selected (all eight unless its `surface` names fewer);
    the others are not emitted. `tenant`: whose share of the policy workers its evaluations wait for."""

    emitter: InterceptionEmitter
    builder: AgentContextBuilder
    resolver: InboxResolver
    emit: Emit
    records: list[dict[str, Any]] = field(default_factory=list)
    tenant: str = ""
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
        refusals: Mapping[str, str] | None = None,
        agent: str,
        version: int | None,
        run_id: str,
        session_id: str | None,
        tenant: str | None,
        emit: Emit,
        records: list[dict[str, Any]],
    ) -> "TurnPolicies":
        resolver = InboxResolver(decisions, refusals)
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
        policies = cls(emitter, builder, resolver, emit, records, tenant or "")
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
            with for_tenant(self.tenant):
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
        with for_tenant(self.tenant):
            record = await self.emitter.emit_unchecked(self.builder.agent_shutdown(reason=reason))
        await self._report({"interception_point": "agent_shutdown"}, record, None)

    def decided(self, context: Mapping[str, Any]) -> bool:
        """Whether an operator answered an escalation of `context` (their denial is theirs, not the rules')."""
        return stable_key(context) in self.resolver.decisions

    async def _report(
        self, context: Mapping[str, Any], record: InterceptionRecord, escalation: AskedEscalation | None
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
            arguments=call.get("args"),
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
        refusals: Mapping[str, str] | None = None,
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
            refusals=refusals,
            agent=agent,
            version=version,
            run_id=self.session,
            session_id=self.session_id,
            tenant=self.tenant,
            emit=emit,
            records=self.records,
        )
