"""What a rule or a policy would have done (SPEC section 13): `POST /api/rules/preview` and `POST
/api/agents/{name}/policy-preview` (admins). Both answer `{evaluated, wouldApprove, wouldDeny, wouldAsk,
disagreements: [{requestId, decided, candidate}], truncated}` and change nothing (approvals/previews.py)."""

from typing import Any

from ninja import Router
from pydantic import Field

from agents.definitions import WireModel
from agents.getters import get_agent_for
from approvals.previews import (
    LIMIT,
    MAX_LIMIT,
    PreviewRefused,
    checked_hooks,
    checked_rule,
    preview_policies,
    preview_rule,
)
from approvals.remembered_rules import RuleIn, RuleRefused
from console.api import ApiError, Problem, require_role
from console.tenancy import ConsoleRequest

router = Router(tags=["previews"])


class RulePreviewIn(RuleIn):
    """A candidate rule, exactly as `POST /api/rules` takes it, and how many past requests to replay."""

    limit: int = Field(default=LIMIT, ge=1, le=MAX_LIMIT)


class PolicyPreviewIn(WireModel):
    """A candidate `hooks` declaration (as in an agent definition; null: no policies)."""

    hooks: dict[str, Any] | None
    limit: int = Field(default=LIMIT, ge=1, le=MAX_LIMIT)


def _refused(refused: RuleRefused | PreviewRefused) -> ApiError:
    errors = [{"field": field, "message": message} for field, message in getattr(refused, "errors", {}).items()]
    errors = errors or [{"field": refused.field, "message": refused.detail}]
    return ApiError(refused.status, refused.code, refused.detail, errors=errors)


@router.post("/rules/preview", response={200: dict, 404: Problem})
def preview_a_rule(request: ConsoleRequest, payload: RulePreviewIn) -> dict[str, Any]:
    """What the rule would have done to the agent's last `limit` closed approval requests: it approves the
    calls it matches (on the arguments they ran with) and asks for the rest; nothing is saved."""
    membership = require_role(request, "admin")
    try:
        agent = checked_rule(membership.tenant, payload)
    except (RuleRefused, PreviewRefused) as refused:
        raise _refused(refused) from None
    return preview_rule(agent, payload, payload.limit).wire()


@router.post("/agents/{name}/policy-preview", response={200: dict, 429: Problem})
def preview_a_policy(request: ConsoleRequest, name: str, payload: PolicyPreviewIn) -> dict[str, Any]:
    """What the declaration's policies would have done at `pre_tool_call` to the agent's last `limit` closed
    approval requests (a deny denies, an escalation asks, an allow leaves the call to its approval mode), within
    a time budget (`truncated: true` when it stopped early); checked as saving the agent checks it. A declaration
    binding a policy webhook is refused (400 `webhook_not_previewed`): previews send past calls nowhere."""
    require_role(request, "admin")
    agent = get_agent_for(request, name)
    try:
        checked_hooks(agent, payload.hooks)
    except PreviewRefused as refused:
        raise _refused(refused) from None
    return preview_policies(agent, payload.hooks, payload.limit).wire()
