"""An escalation and the `airlock-inbox` resolver that answers it with the operator's decision, and the bounds
kept of a verdict's strings."""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_hooks import (
    Verdict,
)
from agent_hooks.approval import ApprovalOutcome, ApprovalRequest, ApprovalResolution

RESOLVER = "airlock-inbox"
# What the agent is told of an escalation an operator denied without giving a reason.
OPERATOR_DENIED = "The operator denied it."


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


@dataclass
class AskedEscalation:
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


class InboxResolver:
    """`airlock-inbox`: answers an escalation with the operator's decision when one is known for its
    context (`decisions`: stable key -> approved; `refusals`: the reason an operator gave for a denial, which is
    what the agent is told), else leaves it unresolved and notes it in `asked`."""

    def __init__(self, decisions: Mapping[str, bool], refusals: Mapping[str, str] | None = None) -> None:
        self.decisions = decisions
        self.refusals = refusals or {}
        self.asked: dict[str, AskedEscalation] = {}

    def resolve(self, request: ApprovalRequest) -> ApprovalResolution:
        key = stable_key(request.context)
        decided = self.decisions.get(key)
        identity = request.context_identity
        if decided is None:
            point = request.interception_point.value
            verdict = request.verdict
            self.asked[key] = AskedEscalation(key, point, None, verdict.reason, verdict.message)
            return ApprovalResolution(outcome=ApprovalOutcome.UNRESOLVED, context_identity=identity)
        if decided:
            return ApprovalResolution(
                outcome=ApprovalOutcome.APPROVE, context_identity=identity, verdict=Verdict.allow()
            )
        reason = request.verdict.reason or "denied"
        message = capped(self.refusals.get(key), MESSAGE_LIMIT) or OPERATOR_DENIED
        verdict = Verdict.deny(reason=reason, message=message)
        return ApprovalResolution(outcome=ApprovalOutcome.REJECT, context_identity=identity, verdict=verdict)
