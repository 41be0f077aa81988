"""The remembered-rule routes of the JSON API: list, create by hand, edit (a new version), revoke."""

import uuid
from typing import Any

from ninja import Query, Router, Status

from approvals import actions
from approvals.getters import get_rule_for
from approvals.models import Rule
from approvals.remembered_rules import RuleEdit, RuleIn, RuleRefused, remembered_arguments, tenant_rules
from console.api import ApiError, Paging, Problem, page_of, require_role
from console.tenancy import ConsoleRequest

router = Router(tags=["rules"])


def rule_wire(rule: Rule) -> dict[str, Any]:
    return {
        "ruleId": str(rule.id),
        "agent": rule.agent.name,
        "toolName": rule.tool_name,
        "argumentsHash": rule.arguments_hash or None,
        "arguments": remembered_arguments(rule),
        "conditions": rule.conditions,
        "createdBy": rule.created_by.username if rule.created_by else None,
        "createdFromRequestId": str(rule.created_from_id) if rule.created_from_id else None,
        "createdFromRunId": str(rule.created_from.run_id) if rule.created_from else None,
        "createdAt": rule.created_at.isoformat(),
        "revokedAt": rule.revoked_at.isoformat() if rule.revoked_at else None,
        "scope": rule.scope,
        "sessionId": rule.session.key if rule.session else None,
        "expiresAt": rule.expires_at.isoformat() if rule.expires_at else None,
        "version": rule.version,
        "editedBy": rule.edited_by.username if rule.edited_by else None,
        "editedAt": rule.edited_at.isoformat() if rule.edited_at else None,
    }


class RuleFilters(Paging):
    agent: str | None = None
    tool: str | None = None
    includeRevoked: bool = False


@router.get("/rules", response=dict)
def list_rules(request: ConsoleRequest, filters: Query[RuleFilters]) -> dict[str, Any]:
    """The rules in force, newest first; with `includeRevoked=true` also the ended ones, revoked or expired
    (both are kept for the record)."""
    rules = tenant_rules(request.tenant, agent=filters.agent, tool=filters.tool, revoked=filters.includeRevoked)
    return page_of(rules.order_by("-created_at", "-id"), filters.limit, filters.offset, rule_wire)


@router.post("/rules", response={201: dict, 404: Problem})
def create_rule_by_hand(request: ConsoleRequest, payload: RuleIn) -> Status[dict[str, Any]]:
    """A rule for a tool of the agent's current version that asks with mode "always"; `arguments`
    narrows it to exactly those arguments, `conditions` to calls where every condition holds."""
    membership = require_role(request, "admin")
    try:
        rule = actions.remember_rule(membership, request.user, payload)
    except RuleRefused as refused:
        raise _problem(refused) from None
    return Status(201, rule_wire(rule))


@router.patch("/rules/{rule_id}", response={200: dict, 404: Problem, 409: Problem})
def edit_rule(request: ConsoleRequest, rule_id: uuid.UUID, payload: RuleEdit) -> dict[str, Any]:
    """Edit a rule: its next `version`, from the fields given (`arguments`, `conditions`, `expiresAt`, `scope`
    with `sessionId`); what the version before said is kept. A revoked rule is not edited (409)."""
    require_role(request, "admin")
    rule = get_rule_for(request, rule_id)
    try:
        edited = actions.do_edit_rule(request.user, rule, payload)
    except RuleRefused as refused:
        raise _problem(refused) from None
    return rule_wire(edited)


def _problem(refused: RuleRefused) -> ApiError:
    errors = [{"field": refused.field, "message": refused.detail}]
    return ApiError(refused.status, refused.code, refused.detail, errors=errors)


@router.delete("/rules/{rule_id}", response={204: None})
def revoke_rule(request: ConsoleRequest, rule_id: uuid.UUID) -> Status[None]:
    """Revoke a rule: calls it approved ask again. Revoking a revoked rule changes nothing."""
    require_role(request, "admin")
    rule = get_rule_for(request, rule_id)
    actions.do_revoke_rule(request.user, rule)
    return Status(204, None)
