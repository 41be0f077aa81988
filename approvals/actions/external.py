"""The requests of external agents (SPEC section 12): opening one from outside, decided at once by a rule, a policy
or the tool's mode, or left waiting; what becomes of it after is `approvals.actions.settling`.

Each request of an external agent is an ordinary `PendingRequest`, in a session of the agent (the client's
`sessionId`, or one of its own), asked by a run of its own: the run stands for the agent's turn that paused, so
the inbox, routing, claims, deadlines, digests, webhooks, the audit and the session stream treat it as any other.
The run waits while its request does and completes once it is decided; no continuation follows (the agent runs
elsewhere and reads the decision with `GET /api/requests/{id}?wait=N`, woken through `approvals.waiting`).
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.events import EventLog
from agents.models import AgentVersion, RunStatus, Session
from agents.payloads import (
    Approved,
    DeniedByHook,
    PermissionCompleted,
    PermissionRequested,
    PolicyAsk,
    RequestAnswered,
    RunAwaiting,
    RunCompleted,
)
from agents.prepare import RunRejected, granted_connections, live_version
from agents.requirements import next_step_at
from agents.rule_matching import first_matching
from agents.run_lifecycle import active_rules, new_run, run_started
from agents.run_requests import SESSION_KEY
from approvals.actions.interceptions import PoliciesUnavailable, PolicyCheck, pre_tool_call_check
from approvals.decisions import Actor, Decision, decide
from approvals.external_wire import (  # AskedTool and RequestRefused are imported from here too (gateway.calls)
    ARGUMENTS_LIMIT,
    SCHEMA_LIMIT,
    AskedTool,
    OpenRequest,
    RequestRefused,
    TooLarge,
    check_size,
    invalid,
    request_ids,
    stored_request_id,
    too_large,
)
from approvals.kinds import KINDS, awaiting_status
from approvals.models import PendingRequest, Rule
from approvals.push import notify_requests_opened
from console.models import Membership


@dataclass(frozen=True)
class Opened:
    """The request opened (`created`), or the one a retry with the same `requestId` names."""

    request: PendingRequest
    created: bool


def open_request(
    membership: Membership, user: Any, name: str, body: OpenRequest, tool: AskedTool | None = None
) -> Opened:
    """Open a request of the external agent `name` (SPEC section 12), or an approval of a gateway's call of `tool`
    (SPEC section 15, `gateway.calls`). A remembered rule, or a tool in approval mode `never`, decides an approval
    at once; otherwise it waits in every inbox. Raises RequestRefused."""
    tenant = membership.tenant
    if body.session_id is not None and not SESSION_KEY.fullmatch(body.session_id):
        # A session is addressed in paths (/api/sessions/{sessionId}/…): refused as a hosted run's is.
        raise invalid("sessionId", "a session id may not contain '/' or control characters")
    _refuse_iftoo_large(body)
    if body.request_id is not None:
        known = _known(membership, body)
        if known is not None:
            return Opened(known, created=False)
    try:
        version = live_version(tenant, name, None)
    except RunRejected as rejected:
        raise RequestRefused(rejected.status, rejected.code, rejected.detail) from None
    definition = version.definition
    if definition.gateway and tool is None:
        detail = f"The agent {name!r} is an MCP gateway: its calls come through /mcp/{name} (SPEC section 15)."
        raise RequestRefused(409, "gateway_agent", detail)
    if not definition.runs_elsewhere:
        detail = f"The agent {name!r} is hosted: its requests open in its runs (POST /api/agents/{name}/runs)."
        raise RequestRefused(409, "not_external", detail)
    request_id = stored_request_id(tenant.pk, body.request_id) if body.request_id is not None else uuid.uuid4()
    fields = _fields(version, body, request_id, tool)
    run_id = uuid.uuid4()
    check = _checked(version, body, fields, request_id, run_id)
    now = timezone.now()
    opening = partial(_open, version, user=user, body=body, fields=fields, ids=(request_id, run_id), check=check)
    try:
        with transaction.atomic():
            opened = opening(_session(version, body, request_id, now), now=now)
    except IntegrityError:
        # A retry of the same request at the same moment (its id is taken now), or a session of that key made
        # meanwhile: the retry finds the request; a second try finds the session.
        known = _known(membership, body)
        if known is not None:
            return Opened(known, created=False)
        with transaction.atomic():
            opened = opening(_session(version, body, request_id, now), now=now)
    if opened.answer is None:
        transaction.on_commit(partial(notify_requests_opened, [opened]))
    return Opened(opened, created=True)


def _refuse_iftoo_large(body: OpenRequest) -> None:
    """RequestRefused 413 (bytes) or 400 (shape) for a JSON field over its limit, before anything is read or
    stored (approvals.external_wire.JsonLimit)."""
    for field, value, limit in (
        ("arguments", body.arguments, ARGUMENTS_LIMIT),
        ("requestedSchema", body.requested_schema, SCHEMA_LIMIT),
    ):
        if value is not None:
            try:
                check_size(value, field, limit)
            except TooLarge as over:
                raise too_large(over) from None


def _known(membership: Membership, body: OpenRequest) -> PendingRequest | None:
    """The tenant's request a retry names: the same when its body is the same; another body is a conflict. Only
    the tenant's own requests count: another tenant's agent may send the same id
    (approvals.external_wire.request_ids)."""
    if body.request_id is None:
        return None
    found = PendingRequest.objects.select_related("agent", "session", "answered_by", "closed_by", "claimed_by")
    ids = request_ids(membership.tenant_id, body.request_id)
    known = found.filter(tenant=membership.tenant_id, id__in=ids).first()
    if known is None:
        return None
    state = (known.engine_state or {}).get("external") or {}
    if state.get("digest") != body.digest():
        detail = f"A request {body.request_id} was opened with another body; a retry sends the same one."
        raise RequestRefused(409, "request_conflict", detail)
    return known


def _fields(version: AgentVersion, body: OpenRequest, request_id: uuid.UUID, asked: AskedTool | None) -> dict[str, Any]:
    """The request's stored fields: those every kind has, then its kind's, checked (`Kind.external_fields`,
    RequestRefused 400); an approval's tool is `asked`, or the one the definition declares under its name."""
    own = KINDS[body.kind].external_fields(version, body, asked)
    state = {"external": {"digest": body.digest()}, **own.pop("engine_state", {})}
    return {
        "call_id": body.tool_call_id or f"call_{request_id.hex}",
        "tool_name": "",
        "arguments": {},
        "message": "",
        "requested_schema": None,
        **own,
        "engine_state": state,
    }


def _checked(
    version: AgentVersion, body: OpenRequest, fields: dict[str, Any], request_id: uuid.UUID, run_id: uuid.UUID
) -> PolicyCheck | None:
    """An approval under the agent's policies passes `pre_tool_call` first, as a hosted call does: its
    arguments become the ones a verdict let through; None without policies."""
    if not KINDS[body.kind].gates_call or version.definition.hooks is None:
        return None
    connections = granted_connections(version.agent.tenant, version)
    call = (fields["tool_name"], fields["call_id"], fields["arguments"])
    try:
        check = async_to_sync(pre_tool_call_check)(version, connections, run_id, _session_key(body, request_id), call)
    except PoliciesUnavailable as error:
        raise RequestRefused(409, "policy_unavailable", str(error)) from None
    fields["arguments"] = check.arguments
    return check


def _session(version: AgentVersion, body: OpenRequest, request_id: uuid.UUID, now: datetime) -> Session:
    """The live session the request goes to: the client's `sessionId` (made on first use), else one of its own."""
    return session_of(version, _session_key(body, request_id), now)


def session_of(version: AgentVersion, key: str, now: datetime) -> Session:
    """The tenant's live session of `key` for the agent (made on first use); RequestRefused 409 when it is another
    agent's."""
    session = Session.objects.live().filter(tenant=version.agent.tenant, key=key).first()
    if session is None:
        return Session.objects.create(tenant=version.agent.tenant, key=key, agent=version.agent, created_at=now)
    if session.agent_id != version.agent.pk:
        raise RequestRefused(409, "session_agent_mismatch", "This session belongs to another agent.")
    return session


def _session_key(body: OpenRequest, request_id: uuid.UUID) -> str:
    return body.session_id or f"external-{request_id}"


def _open(
    version: AgentVersion,
    session: Session,
    *,
    user: Any,
    body: OpenRequest,
    fields: dict[str, Any],
    ids: tuple[uuid.UUID, uuid.UUID],
    check: PolicyCheck | None,
    now: datetime,
) -> PendingRequest:
    """The run, the request and their events, in the caller's transaction (`ids`: the request's and the run's);
    decided at once when a policy denies it, or a rule or the tool's approval mode `never` approves it."""
    agent, definition = version.agent, version.definition
    request_id, run_id = ids
    escalation = check.escalation if check is not None else None
    policy = escalation.wire() if escalation is not None else None
    if escalation is not None:
        fields["engine_state"]["policyKey"] = escalation.key
    run = new_run(
        agent.tenant,
        agent,
        version,
        session,
        user,
        status=RunStatus.RUNNING,
        run_id=run_id,
        previous_run=session.last_run,
        created_at=now,
        records=check.records if check is not None else [],
    )
    run.save(force_insert=True)
    expires_in = body.expires_in or definition.request_deadline_seconds
    routing = definition.routing_for(body.kind, fields["tool_name"], policy)
    pending = PendingRequest(
        id=request_id,
        tenant=agent.tenant,
        agent=agent,
        session=session,
        run=run,
        kind=body.kind,
        approvers=routing.approvers,
        require=routing.require,
        escalation=routing.escalation,
        escalation_at=next_step_at(routing.escalation, now, 0),
        requested_by=user if getattr(user, "is_authenticated", False) else None,
        policy=policy,
        opened_at=now,
        expires_at=now + timedelta(seconds=expires_in) if expires_in else None,
        **fields,
    )
    log = EventLog(run)
    log.record(run_started(run, agent.name, version.number, session.key))
    for verdict in check.events if check is not None else ():
        log.record(verdict)
    denied = check.denied if check is not None else None
    decided_by = None if escalation is not None or denied is not None else _decided_at_once(version, pending)
    if denied is not None:
        _decided(pending, log, now, denied=denied)
    elif decided_by is None:
        pending.save(force_insert=True)
        log.record(KINDS[pending.kind].requested(pending))
        run.status = awaiting_status({pending.kind})
        log.record(RunAwaiting(status=run.status, pendingRequests=[pending.wire()]))
    else:
        _decided(pending, log, now, rule=decided_by if isinstance(decided_by, Rule) else None)
    if run.status != RunStatus.COMPLETED:
        run.finished_at = now
    run.save(update_fields=["status", "finished_at"])
    session.last_run, session.updated_at = run, now
    session.save(update_fields=["last_run", "updated_at"])
    log.flush()
    return pending


def _decided(
    pending: PendingRequest,
    log: EventLog,
    now: datetime,
    *,
    rule: Rule | None = None,
    denied: PolicyAsk | None = None,
) -> None:
    """An approval nobody is asked for, as a hosted turn records it (agents.engine.permissions.decided): a policy
    denied it (`denied`), else a rule (at the version that matched, for its receipt) or the tool's mode `never`
    (no rule) approved it. Its run completes."""
    run = pending.run
    rule_id = str(rule.id) if rule is not None else None
    answer: dict[str, Any] = {"requestId": str(pending.id), "approved": denied is None}
    result: Approved | DeniedByHook
    if denied is not None:
        message = denied.message or denied.reason
        answer |= {"reason": message, "deniedBy": "policy", "binding": denied.binding}
        actor = Actor.policy(denied.binding, run.version.number)
        result = DeniedByHook(kind="denied-by-permission-request-hook", message=message)
    else:
        answer["ruleId"] = rule_id
        if rule is not None:
            answer["ruleVersion"] = rule.version  # what `rule:<id>@<version>` of its receipt names
        actor = Actor.rule(rule_id, rule.version) if rule is not None else Actor.approval_mode()
        result = Approved(kind="approved")
    # Opened and decided at once, in one transaction: nobody saw it open, so nothing is announced.
    pending.save(force_insert=True)
    decide(pending, Decision(actor, answer, carried_in=run), now, announce=False)
    asked = KINDS[pending.kind].requested(pending)
    assert isinstance(asked, PermissionRequested)
    log.record(asked)
    log.record(
        PermissionCompleted(
            requestId=str(pending.id), toolCallId=pending.call_id, result=result, decisionSource="host_policy"
        )
    )
    log.record(
        RequestAnswered(
            requestId=str(pending.id),
            kind=pending.kind,
            toolCallId=pending.call_id,
            toolName=pending.tool_name,
            ruleId=rule_id,
            arguments=pending.arguments,
            policy=denied,
        )
    )
    run.status, run.finished_at = RunStatus.COMPLETED, now
    log.record(RunCompleted(output=None))


def _decided_at_once(version: AgentVersion, pending: PendingRequest) -> Rule | str | None:
    """Who decides an approval without asking: a remembered rule in force in the request's session, or "" for a
    tool in mode `never`; None when a person is asked."""
    if not KINDS[pending.kind].gates_call:
        return None
    mode = pending.approval_mode_in({t.name: t.approval for t in version.definition.tools})
    if mode == "never":
        return ""
    if mode != "always":
        return None
    rule: Rule | None = first_matching(
        active_rules(version.agent, version, pending.session), pending.tool_name, pending.arguments
    )
    return rule
