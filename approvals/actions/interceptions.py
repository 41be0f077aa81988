"""An external agent's policies (SPEC section 12): `pre_tool_call` before its approval request opens, as a hosted
turn's tool gate has it (agents/engine/gate.py), and any interception point over HTTP (`POST
/api/agents/{name}/interceptions`), for an agent-hooks host that registers Airlock as its interceptor.

Over HTTP the verdict is the caller's to enforce: its escalations are not resolved here (the declaration's
approval resolver is dropped, so a liftable deny stands as the verdict) but by the caller's approval resolver,
which opens a request (clients/python/airlock_client/agent_hooks.py)."""

import copy
import dataclasses
import uuid
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agent_hooks import (
    Decision,
    DeclarationError,
    EnforcementMode,
    HostDeclaration,
    HostError,
    InterceptionEmitter,
    InterceptorResponse,
    Transform,
)
from agent_hooks.path import resolve
from asgiref.sync import async_to_sync

from agents.models import AgentVersion
from agents.payloads import Payload, PolicyAsk
from agents.policies import AskedEscalation, InboxResolver, PolicyBlocked, PolicyScope, TurnPolicies, registry
from agents.policy_sandbox import for_tenant
from agents.prepare import granted_connections, live_version
from console.connections import ConnectionSpec
from console.models import Membership

# A host's refusals of what an interceptor answered, as opposed to an interceptor's failure (agent-hooks section 11).
POLICY_ANSWER_INVALID = frozenset(
    {
        HostError.VERDICT_INVALID.value,
        HostError.TRANSFORM_INVALID.value,
        HostError.TRANSFORM_TARGET_FORBIDDEN.value,
        HostError.CONTEXT_INVALID.value,
    }
)


@dataclass
class PolicyCheck:
    """What `pre_tool_call` made of an external agent's call: the arguments to ask about (transformed where a
    verdict said so), a deny (`denied`: decided at once) or an escalation (the request stands for it), and the
    events and records the run keeps."""

    arguments: dict[str, Any]
    denied: PolicyAsk | None = None
    escalation: AskedEscalation | None = None
    events: list[Payload] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)


class PoliciesUnavailable(Exception):
    """The agent's policies cannot run (e.g. a webhook connection no longer granted)."""


def _policies(
    version: AgentVersion,
    connections: Mapping[str, ConnectionSpec],
    run_id: uuid.UUID,
    session_key: str,
    events: list[Payload],
    records: list[dict[str, Any]],
) -> TurnPolicies | None:
    """The emitter of `version`'s `hooks` for one call of its run `run_id` (None without policies): its verdicts'
    events go to `events`, its records to `records`."""
    agent = version.agent

    async def emit(payload: Payload) -> None:
        events.append(payload)

    scope = PolicyScope(str(run_id), session_key, str(agent.tenant_id), records)
    try:
        return scope.policies(
            version.definition.hooks,
            connections=connections,
            decisions={},
            agent=agent.name,
            version=version.number,
            emit=emit,
        )
    except DeclarationError as error:
        raise PoliciesUnavailable(f"The policies of {agent.name} cannot run: {error}") from None


async def pre_tool_call_check(
    version: AgentVersion,
    connections: Mapping[str, ConnectionSpec],
    run_id: uuid.UUID,
    session_key: str,
    call: tuple[str, str, dict[str, Any]],
) -> PolicyCheck:
    """`pre_tool_call` of an external agent's `call` (tool name, call id, arguments) under its version's `hooks`,
    with the `connections` granted to its tenant (`agents.prepare.granted_connections`)."""
    tool_name, call_id, arguments = call
    check = PolicyCheck(copy.deepcopy(arguments))
    policies = _policies(version, connections, run_id, session_key, check.events, check.records)
    if policies is None:
        return check
    context = policies.builder.pre_tool_call(call_id=call_id, name=tool_name, args=check.arguments)
    try:
        check.arguments = await policies.check(context)
    except PolicyBlocked as blocked:
        if blocked.escalation is not None:
            check.escalation = blocked.escalation
        else:
            check.denied = PolicyAsk(binding=blocked.binding, reason=blocked.reason, message=blocked.message)
    return check


@dataclass
class ResultCheck:
    """What `post_tool_call` made of a call's result: the value to hand back (transformed where a verdict said
    so), or why it is withheld (`denied`), and the events and records of its verdicts."""

    value: Any
    denied: str | None = None
    events: list[Payload] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)


async def post_tool_call_check(
    version: AgentVersion,
    connections: Mapping[str, ConnectionSpec],
    run_id: uuid.UUID,
    session_key: str,
    call: tuple[str, str, dict[str, Any]],
    value: Any,
    *,
    is_error: bool,
) -> ResultCheck:
    """`post_tool_call` of a call's result `value` (a gateway's upstream answer, SPEC section 15), as a hosted turn's
    tool gate has it (agents.engine.gate.post_tool_call): a deny withholds it (an escalation too: nobody waits
    on a result), a transform changes it (a redaction)."""
    tool_name, call_id, arguments = call
    check = ResultCheck(copy.deepcopy(value))
    policies = _policies(version, connections, run_id, session_key, check.events, check.records)
    if policies is None:
        return check
    context = policies.builder.post_tool_call(
        call_id=call_id, name=tool_name, args=arguments, value=check.value, is_error=is_error
    )
    try:
        check.value = await policies.check(context)
    except PolicyBlocked as blocked:
        check.denied = blocked.message or blocked.reason
    return check


# Each version's emitter as an interceptor runs it, built once per process for the connections its tenant grants
# (issue 56 item 4): a version never changes. The creation time is in the key too, as in AgentVersion.definition.
# Its bindings keep no state of a call; what one answered reaches the call through `_ANSWERS`.
_EMITTERS: dict[tuple[int, datetime, frozenset[tuple[str, ConnectionSpec]]], InterceptionEmitter] = {}
_ANSWERS: ContextVar[list[Any]] = ContextVar("interception_answers")


def _emitter(
    version: AgentVersion, document: dict[str, Any], connections: Mapping[str, ConnectionSpec]
) -> InterceptionEmitter:
    """`version`'s policies (`document`, its hooks) as an interceptor runs them: the caller resolves escalations
    (its approval resolver opens a request), so here a liftable deny stands. Raises DeclarationError."""
    key = (version.pk, version.created_at, frozenset(connections.items()))
    if key not in _EMITTERS:
        document = copy.deepcopy(document)
        configuration = document.setdefault("configuration", {})
        configuration["approval"] = {**configuration.get("approval", {}), "resolver": None}
        heard = registry(connections, InboxResolver({}), lambda answer: _ANSWERS.get().append(answer))
        if len(_EMITTERS) >= 1024:
            _EMITTERS.clear()
        _EMITTERS[key] = InterceptionEmitter.from_declaration(HostDeclaration.from_value(document), heard)
    return _EMITTERS[key]


async def interception_verdict(
    version: AgentVersion, connections: Mapping[str, ConnectionSpec], context: Any
) -> dict[str, Any]:
    """The verdict of `version`'s policies on one AGENT-HOOKS-0.1 interception event, as an interceptor answers
    it (agent-hooks section 5.5: the verdict, and in `extensions.airlock` the interception record). No `hooks`:
    allow. Under `evaluate_only` the answer is allow; the record says what the policies would have done."""
    document = version.definition.hooks
    if document is None:
        return {"decision": "allow"}
    agent = version.agent
    try:
        emitter = _emitter(version, document, connections)
    except DeclarationError as error:
        raise PoliciesUnavailable(f"The policies of {agent.name} cannot run: {error}") from None
    answers: list[Any] = []
    heard = _ANSWERS.set(answers)  # in this call's context, which the bindings' tasks copy
    try:
        with for_tenant(str(agent.tenant_id)):  # the tenant the token is of, whatever the context says
            record = await emitter.emit_unchecked(context)
    finally:
        _ANSWERS.reset(heard)
        emitter.take_records()  # the record is the call's: the shared emitter keeps none
    extensions = {"airlock": {"agent": agent.name, "definitionVersion": version.number, "record": record.to_wire()}}
    if emitter.mode is not EnforcementMode.ENFORCE:
        return {"verdict": {"decision": "allow"}, "extensions": extensions}
    verdict = record.verdict
    if len(answers) == 1 and (verdict.decision is not Decision.DENY or verdict.reason in POLICY_ANSWER_INVALID):
        # One policy answered: its answer goes on as given (its reasons, its transform's value), for the caller's
        # emitter to apply or refuse as it would its own interceptor's.
        return {"verdict": answers[0], "extensions": extensions}
    if verdict.transform is not None:
        # A record keeps no transform's value: the answer carries what the folded transforms left at its path
        # (the whole target where the path was the policy's own view of it).
        path = verdict.transform.path if verdict.transform.path.startswith("$target") else "$target"
        value = resolve(context.get("target"), path)
        verdict = dataclasses.replace(verdict, transform=Transform(path=path, value=value))
    return InterceptorResponse(verdict=verdict, extensions=extensions).to_wire()


def verdict_for(membership: Membership, name: str, context: dict[str, Any]) -> dict[str, Any]:
    """`interception_verdict` for the agent `name` of the member's tenant, on its current version (RunRejected 404, or
    PoliciesUnavailable)."""
    version = live_version(membership.tenant, name, None)
    connections = granted_connections(membership.tenant, version)
    return async_to_sync(interception_verdict)(version, connections, context)
