"""Audit entries built from the rows their keys name: requests, events, held answers and rules, loaded a
kind at a time, so a page or an export chunk costs the same few queries whatever its size."""

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agents.events import EventType
from agents.models import Event
from agents.request_kinds import RequestKind
from approvals.audit_entries import (
    ANSWER,
    APPROVAL,
    CLOSING,
    POLICY,
    REVOCATION,
    RULE,
    UNDO,
    AuditEntry,
    DecisionFilter,
    EntryKey,
)
from approvals.kinds import KINDS
from approvals.models import HeldAnswer, PendingRequest, RequestStatus, Rule
from console.models import Tenant

CLOSING_REASONS = {
    RequestStatus.EXPIRED: "Nobody answered before the deadline.",
    RequestStatus.CANCELLED: "The run or its session was cancelled.",
    RequestStatus.ABANDONED: "The session moved on without answering.",
}
AGENT_DELETED = "The agent was deleted."
SESSION_DELETED = "The session was deleted."


def entries(tenant: Tenant, keys: Sequence[EntryKey]) -> list[AuditEntry]:
    """The entries of `keys`, in their order, with a fixed number of queries whatever their number."""
    request_ids = [entry_id for _, entry_id, source in keys if source in (ANSWER, CLOSING)]
    event_ids = [entry_id for _, entry_id, source in keys if source in (RULE, POLICY, APPROVAL)]
    requests = PendingRequest.objects.select_related(
        "agent", "session", "answered_by", "answered_for", "closed_by", "run__version"
    ).in_bulk(request_ids)
    events = Event.objects.select_related("run__agent", "run__session", "run__version").in_bulk(event_ids)
    undo_ids = [entry_id for _, entry_id, source in keys if source == UNDO]
    undos = HeldAnswer.objects.select_related(
        "membership__user", "request__agent", "request__session", "request__run__version"
    ).in_bulk(undo_ids)
    revoked = Rule.objects.select_related("agent", "session", "revoked_by").in_bulk(
        [entry_id for _, entry_id, source in keys if source == REVOCATION]
    )
    remembered: dict[uuid.UUID | None, str] = {
        rule.created_from_id: str(rule.id)
        for rule in Rule.objects.filter(tenant=tenant, created_from__in=request_ids).only("id", "created_from")
    }
    deciding = _rules_of(tenant, [event for event in events.values() if event.type == EventType.REQUEST_ANSWERED])
    found: list[AuditEntry] = []
    for when, entry_id, source in keys:
        if source == APPROVAL and entry_id in events:
            found.append(_approval_entry(events[entry_id]))
        elif source == RULE and entry_id in events:
            found.append(_rule_entry(events[entry_id], deciding))
        elif source == POLICY and entry_id in events:
            found.append(_policy_entry(events[entry_id]))
        elif source == ANSWER and entry_id in requests:
            found.append(_answer_entry(requests[entry_id], remembered))
        elif source == CLOSING and entry_id in requests:
            found.append(_closing_entry(requests[entry_id], when))
        elif source == UNDO and entry_id in undos:
            found.append(_undo_entry(undos[entry_id]))
        elif source == REVOCATION and entry_id in revoked:
            found.append(_revocation_entry(revoked[entry_id]))
    return found


def _rules_of(tenant: Tenant, events: Any) -> dict[str, Rule]:
    ids = set()
    for event in events:
        try:
            ids.add(uuid.UUID(str(event.data["ruleId"])))
        except (KeyError, TypeError, ValueError):
            continue
    if not ids:
        return {}
    rules = Rule.objects.select_related("created_by").filter(tenant=tenant, id__in=ids)
    return {str(rule.id): rule for rule in rules}


def _base(pending: PendingRequest) -> dict[str, Any]:
    return {
        "request_id": str(pending.id),
        "request_kind": pending.kind,
        "tool_name": pending.tool_name,
        "arguments": pending.arguments,
        "run_id": str(pending.run_id),
        "agent": pending.agent.name,
        "session_id": pending.session.key,
    }


def _policy_of(pending: PendingRequest) -> dict[str, Any]:
    """A policy escalation's request: its policy, point (a call's or the held answer's) and version."""
    if pending.policy is None:
        return {}
    point = "pre_tool_call" if pending.tool_name else "output"
    return {"policy": pending.policy, "point": point, "enforced": True, "version": pending.run.version.number}


def _answer_entry(pending: PendingRequest, remembered: dict[uuid.UUID | None, str]) -> AuditEntry:
    answer = pending.answer if isinstance(pending.answer, dict) else {}
    decision, details = KINDS[pending.kind].audit(answer, remembered.get(pending.id))
    assert pending.answered_at is not None
    return AuditEntry(
        when=pending.answered_at,
        source=ANSWER,
        decision=decision,
        # Decided at once for an external agent (its tool's mode `never`, a policy): nobody was asked.
        who=pending.answered_by.username if pending.answered_by else "system",
        reason=answer.get("reason") or None,
        via=pending.answered_via,
        on_behalf_of=pending.answered_for.username if pending.answered_for else None,
        auth_method=pending.answered_auth or None,
        approvals=answer.get("approvals"),
        **_policy_of(pending),
        **_base(pending),
        **details,
    )


def _closing_entry(pending: PendingRequest, when: datetime) -> AuditEntry:
    reason = CLOSING_REASONS.get(RequestStatus(pending.status))
    deleted_at = pending.agent.deleted_at
    # No session moves on once its agent is deleted: an abandoning from then on is the deletion's.
    if pending.status == RequestStatus.ABANDONED and deleted_at is not None and when >= deleted_at:
        reason = AGENT_DELETED
    elif pending.status == RequestStatus.ABANDONED and pending.session.deleted_at is not None:
        reason = SESSION_DELETED
    return AuditEntry(
        when=when,
        source=CLOSING,
        decision=pending.status,
        who=pending.closed_by.username if pending.closed_by else "system",
        reason=reason,
        via="",
        **_policy_of(pending),
        **_base(pending),
    )


def _undo_entry(held: HeldAnswer) -> AuditEntry:
    pending = held.request
    given = KINDS[pending.kind].verb(held.response)
    assert held.settled_at is not None
    return AuditEntry(
        when=held.settled_at,
        source=UNDO,
        decision=DecisionFilter.UNDONE,
        who=held.membership.user.username,
        reason=f"{given.capitalize()} and undone before it applied; nothing ran and the request stayed pending.",
        via=held.via,
        auth_method=held.auth_method or None,
        **_base(pending),
    )


def _rule_entry(event: Event, rules: dict[str, Rule]) -> AuditEntry:
    data = event.data if isinstance(event.data, dict) else {}
    rule_id = str(data.get("ruleId") or "") or None
    rule = rules.get(rule_id or "")
    reason = "A remembered rule approved the call"
    if rule is not None and rule.created_by is not None:
        reason += f" (remembered by {rule.created_by.username} on {rule.created_at:%Y-%m-%d})"
    return AuditEntry(
        when=event.timestamp,
        source=RULE,
        decision="approved-by-rule",
        who=f"rule {rule_id}" if rule_id else "rule",
        reason=reason + ".",
        via="",
        request_id=None,
        request_kind=RequestKind.APPROVAL,
        tool_name=str(data.get("toolName") or ""),
        arguments=data.get("arguments"),
        run_id=str(event.run_id),
        agent=event.run.agent.name,
        session_id=event.run.session.key if event.run.session else None,
        rule_id=rule_id,
    )


def _approval_entry(event: Event) -> AuditEntry:
    """An approval toward a quorum that did not decide it: its giver, and how the count stood."""
    data = event.data if isinstance(event.data, dict) else {}
    given = data.get("approvals") or [{}]
    latest = given[-1]
    return AuditEntry(
        when=event.timestamp,
        source=APPROVAL,
        decision="approval-recorded",
        who=data.get("by") or latest.get("by"),
        reason=f"{len(given)} of {data.get('required')} approvals"
        + (f", waiting for {' and '.join(data['waitingFor'])}" if data.get("waitingFor") else ""),
        via="",
        request_id=data.get("requestId"),
        request_kind=RequestKind.APPROVAL,
        tool_name=str(data.get("toolName") or ""),
        arguments=None,
        run_id=str(event.run_id),
        agent=event.run.agent.name,
        session_id=event.run.session.key if event.run.session else None,
        on_behalf_of=latest.get("onBehalfOf"),
        auth_method=latest.get("authMethod"),
        approvals=given,
    )


def _policy_entry(event: Event) -> AuditEntry:
    data = event.data if isinstance(event.data, dict) else {}
    binding = data.get("binding")
    said = {"binding": binding, "reason": data.get("reason"), "message": data.get("message")}
    return AuditEntry(
        when=event.timestamp,
        source=POLICY,
        decision=f"policy-{data.get('decision')}",
        who=f"policy {binding}" if binding else "policy",
        reason=data.get("message") or data.get("reason"),
        via="",
        request_id=None,
        # A verdict at a tool point is about a call; elsewhere about the turn (its input, model call, output).
        request_kind=RequestKind.APPROVAL if data.get("toolName") else "",
        tool_name=str(data.get("toolName") or ""),
        arguments=data.get("arguments"),
        run_id=str(event.run_id),
        agent=event.run.agent.name,
        session_id=event.run.session.key if event.run.session else None,
        policy=said,
        point=str(data.get("point") or "") or None,
        enforced=bool(data.get("enforced", True)),
        version=event.run.version.number,
    )


def _revocation_entry(rule: Rule) -> AuditEntry:
    assert rule.revoked_at is not None
    return AuditEntry(
        when=rule.revoked_at,
        source=REVOCATION,
        decision=DecisionFilter.REVOKED,
        who=rule.revoked_by.username if rule.revoked_by else None,
        reason=f"Revoked rule {rule.id} (version {rule.version}): the calls it approved ask again.",
        via="",
        request_id=None,
        request_kind=RequestKind.APPROVAL,
        tool_name=rule.tool_name,
        arguments=rule.arguments,
        run_id="",
        agent=rule.agent.name,
        session_id=rule.session.key if rule.session else None,
        rule_id=str(rule.id),
    )
