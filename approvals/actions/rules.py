"""Remembered rules made and revoked by hand: the rules page's "New rule" form and Revoke button,
`POST /api/rules` and `DELETE /api/rules/{id}` (admins; the routes check the role first). A rule remembered
with an approval is made where the turn carries that answer (`approvals.kinds`)."""

from typing import Any

from django.utils import timezone

from agents.models import Agent
from approvals.models import Rule
from approvals.rules import RuleIn, RuleRefused, arguments_hash, refusal
from console.models import Membership


def remember_rule(membership: Membership, user: Any, wanted: RuleIn) -> Rule:
    """Store a rule made by hand in the member's tenant; raises RuleRefused (and stores nothing) when it
    cannot be made under the agent's current definition."""
    tenant = membership.tenant
    agent = Agent.objects.live().filter(tenant=tenant, name=wanted.agent).first()
    if agent is None:
        raise RuleRefused(404, "agent_not_found", "agent", f"No agent named {wanted.agent!r} in this tenant.")
    refused = refusal(agent.current.definition, wanted)
    if refused is not None:
        raise refused
    return Rule.objects.create(
        tenant=tenant,
        agent=agent,
        tool_name=wanted.tool_name,
        arguments_hash=arguments_hash(wanted.arguments) if wanted.arguments is not None else "",
        arguments=wanted.arguments,
        conditions=[condition.model_dump(mode="json") for condition in wanted.conditions],
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )


def revoke_rule(rule: Rule) -> None:
    """Calls the rule approved ask again. Revoking a revoked rule keeps the first revocation time."""
    now = timezone.now()
    if Rule.objects.filter(pk=rule.pk, revoked_at__isnull=True).update(revoked_at=now):
        rule.revoked_at = now
