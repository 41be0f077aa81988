"""The remembered-rule routes of the JSON API: list, create by hand, revoke."""

import uuid
from typing import Any

from ninja import Query, Router, Status

from approvals import actions
from approvals.getters import get_rule_for
from approvals.models import Rule
from approvals.rules import RuleIn, RuleRefused, remembered_arguments, tenant_rules
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
    }


class RuleFilters(Paging):
    agent: str | None = None
    tool: str | None = None
    includeRevoked: bool = False


@router.get("/rules", response=dict)
def list_rules(request: ConsoleRequest, filters: Query[RuleFilters]) -> dict[str, Any]:
    """The remembered rules, newest first; revoked ones only with `includeRevoked=true`."""
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
        errors = [{"field": refused.field, "message": refused.detail}]
        raise ApiError(refused.status, refused.code, refused.detail, errors=errors) from None
    return Status(201, rule_wire(rule))


@router.delete("/rules/{rule_id}", response={204: None})
def revoke_rule(request: ConsoleRequest, rule_id: uuid.UUID) -> Status[None]:
    """Revoke a rule: calls it approved ask again. Revoking a revoked rule changes nothing."""
    require_role(request, "admin")
    rule = get_rule_for(request, rule_id)
    actions.revoke_rule(rule)
    return Status(204, None)
