"""What an audit entry is and how it reads: who decided what, when and why.

An entry is one of seven facts, each stored elsewhere (its `source`):
- an answer: a PendingRequest with an answer (who = `answered_by`, when = `answered_at`; an external agent's
  request decided at once by its tool's mode `never` or a policy has no one, and says `via`);
- a terminal closing: a request closed expired, cancelled or abandoned (who = who cancelled it, else "system";
  when = `closed_at`);
  recorded apart from a human "no", so a request answered and then closed gives two entries;
- a rule decision: a `request.answered` event naming the rule that approved the call (`ruleId`; no request);
- a policy verdict other than allow (deny, transform, escalate, warn; enforced or shadow): its `policy.verdict`
  event, with the binding, the interception point, the reason and, at a tool point, the tool and its arguments.
  An escalation is two entries: the verdict, and the operator's answer that lifted or confirmed it.
- an undo: an answer given in the console and taken back in its undo window (a HeldAnswer undone; who = who
  undid it, when = `settled_at`); the request stayed pending.
- an approval toward a quorum that did not decide it (SPEC section 14): its `request.approval_recorded` event
  (who = the last approval's giver); the one that decides is the answer's entry, listing every approval.
- a revocation: a rule revoked by hand, on the rules page or by `DELETE /api/rules/{id}` (who = `revoked_by`,
  when = `revoked_at`, which = the rule); no request nor run.

Here: the sources, the key that orders entries (`EntryKey`), the decisions (`DecisionFilter`), `AuditEntry` with
its words for the page and its wire shape for the exports. `approvals.audit_rows` builds entries from the stored
rows; `approvals.audit_queries` finds which ones match.
"""

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models
from django.urls import reverse

from approvals.kinds import KINDS
from approvals.models import RequestStatus

ANSWER, CLOSING, RULE, POLICY, UNDO, REVOCATION = "answer", "closing", "rule", "policy", "undo", "revocation"
APPROVAL = "approval"  # an approval toward a quorum that did not decide it (SPEC section 14)

# A page or an export chunk is a list of these: (when, id of the request or event, source).
EntryKey = tuple[datetime, uuid.UUID, str]


class DecisionFilter(models.TextChoices):
    """The kinds of decision the audit can be narrowed to."""

    APPROVED = "approved", "approved"
    DENIED = "denied", "denied"
    RULE = "rule", "approved by rule"
    EXPIRED = "expired", "expired"
    CANCELLED = "cancelled", "cancelled"
    ABANDONED = "abandoned", "abandoned"
    INPUT = "input", "input answer"
    TOOL_RESULT = "tool_result", "tool result"
    UNDONE = "undone", "undone"
    REVOKED = "revoked", "rule revoked"
    POLICY = "policy", "any policy verdict"
    POLICY_DENY = "policy-deny", "denied by policy"
    POLICY_TRANSFORM = "policy-transform", "rewritten by policy"
    POLICY_ESCALATE = "policy-escalate", "escalated by policy"
    POLICY_SHADOW = "policy-shadow", "policy in shadow mode"


@dataclass
class AuditEntry:
    """One decision as the audit shows and exports it.

    `reason` is the operator's own reason for an answer, and the system's explanation for a closing or
    a rule decision. `rule_id` is the rule that decided (rule decisions) or the one an approval with
    `remember` created.
    """

    when: datetime
    source: str
    decision: str
    who: str | None
    reason: str | None
    via: str
    request_id: str | None
    request_kind: str
    tool_name: str
    arguments: Any
    run_id: str
    agent: str
    session_id: str | None
    override_arguments: Any = None
    remembered: bool = False
    rule_id: str | None = None
    result: Any = None
    error_message: str | None = None
    action: str | None = None
    content: Any = None
    # The policy escalation the request stood for, or the policy of a verdict: {binding, reason, message}.
    policy: Any = None
    # For a policy's verdict or escalation: the interception point, whether it was enforced (not shadow mode),
    # and the definition version that declared the policy.
    point: str | None = None
    enforced: bool | None = None
    version: int | None = None
    # SPEC section 14: the away member a delegate answered for, and a quorum's approvals that decided it.
    on_behalf_of: str | None = None
    approvals: Any = None
    # How the person who answered signed in (the receipt's `authMethod`); None for the system, a rule, a policy.
    auth_method: str | None = None

    @property
    def label(self) -> str:
        """The decision in words, as the page shows it."""
        if self.source == POLICY:
            verbs = POLICY_VERBS if self.enforced else SHADOW_VERBS
            return verbs.get(self.decision, self.decision)
        if self.policy is not None and self.decision in ("approved", "denied"):
            verb = "lifted" if self.decision == "approved" else "confirmed"
            return f"{verb} the deny of policy {self.policy.get('binding')}"
        if self.decision == "approved":
            edited = " with edited arguments" if self.override_arguments is not None else ""
            remembered = " and remembered" if self.remembered else ""
            return f"approved{edited}{remembered}"
        return DECISION_LABELS.get(self.decision, self.decision)

    @property
    def request_kind_label(self) -> str:
        """The kind's one name; none for a verdict at a point that is not a tool's (a message, a turn)."""
        return KINDS[self.request_kind].label.lower() if self.request_kind else ""

    @property
    def via_label(self) -> str:
        """How the answer came: the inbox page, the respond API, or the next run request."""
        return VIA_LABELS.get(self.via, f"via {self.via}") if self.via else ""

    @property
    def is_edited(self) -> bool:
        return self.override_arguments is not None

    @property
    def details(self) -> list[tuple[str, str]]:
        """What the request carried and what the answer gave, as (label, readable text) pairs."""
        shown = []
        if self.policy is not None and self.source == POLICY:
            # The page's "why" is the policy's message; its reason (often a code) is kept here.
            if self.policy.get("message") and self.policy.get("reason"):
                shown.append(("Policy's reason", self.policy["reason"]))
        elif self.policy is not None:
            shown.append(
                ("Policy", f"{self.policy.get('binding')}: {self.policy.get('message') or self.policy.get('reason')}")
            )
        if self.is_edited:
            shown += [("Asked", _readable(self.arguments)), ("Approved as", _readable(self.override_arguments))]
        elif self.arguments is not None:
            shown.append(("Arguments", _readable(self.arguments)))
        if self.decision == "tool-result":
            shown.append(("Result", _readable(self.result)))
        if self.error_message:
            shown.append(("Error", self.error_message))
        if self.content is not None:
            shown.append(("Content", _readable(self.content)))
        return shown

    @property
    def policy_name(self) -> str | None:
        """The binding, with the definition version that declared it when known (as receipts name it)."""
        binding = self.policy.get("binding") if isinstance(self.policy, dict) else None
        if binding is None and self.policy is None:
            return None
        name = binding or "a policy"
        return f"{name}@{self.version}" if self.version is not None else name

    @property
    def rule_url(self) -> str | None:
        return f"{reverse('rules')}#rule-{self.rule_id}" if self.rule_id else None

    @property
    def run_url(self) -> str | None:
        # A revocation is no run's.
        return reverse("run", args=[self.run_id]) if self.run_id else None

    def wire(self) -> dict[str, Any]:
        """The entry as the JSON export gives it (camelCase keys, ISO 8601 time)."""
        return {
            "when": self.when.isoformat(),
            "who": self.who,
            "actor": "system"
            if self.who == "system"
            else {
                ANSWER: "user",
                CLOSING: "system",
                RULE: "rule",
                POLICY: "policy",
                UNDO: "user",
                REVOCATION: "user",
                APPROVAL: "user",
            }[self.source],
            "decision": self.decision,
            "reason": self.reason,
            "via": self.via or None,
            "requestId": self.request_id,
            "requestKind": self.request_kind,
            "toolName": self.tool_name,
            "arguments": self.arguments,
            "overrideArguments": self.override_arguments,
            "remembered": self.remembered,
            "ruleId": self.rule_id,
            "result": self.result,
            "errorMessage": self.error_message,
            "action": self.action,
            "content": self.content,
            "policy": self.policy,
            "policyBinding": self.policy.get("binding") if isinstance(self.policy, dict) else None,
            "point": self.point,
            "enforced": self.enforced,
            "agentVersion": self.version,
            "onBehalfOf": self.on_behalf_of,
            "authMethod": self.auth_method,
            "approvals": self.approvals,
            "runId": self.run_id or None,
            "agent": self.agent,
            "sessionId": self.session_id,
        }


def _readable(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


VIA_LABELS = {
    "inbox": "in the inbox",
    "trial": "on the trial page",
    "api": "via the respond API",
    "run": "with the next run request",
}

# A policy verdict's decision (`policy-<verdict>`), enforced and in shadow mode.
POLICY_VERBS = {
    "policy-deny": "denied by policy",
    "policy-transform": "rewritten by policy",
    "policy-escalate": "escalated by policy",
    "policy-warn": "warned by policy",
}
SHADOW_VERBS = {
    "policy-deny": "policy would have denied",
    "policy-transform": "policy would have rewritten",
    "policy-escalate": "policy would have escalated",
    "policy-warn": "policy would have warned",
}

# The kinds' decisions (each kind lists its own), a rule's, and the closings'.
DECISION_LABELS = {
    **{decision: label for kind in KINDS.values() for decision, label in kind.decisions.items()},
    "approved-by-rule": "approved by rule",
    "approval-recorded": "approved, more approvals needed",
    DecisionFilter.UNDONE: "undone",
    DecisionFilter.REVOKED: "revoked a rule",
    RequestStatus.EXPIRED: "expired",
    RequestStatus.CANCELLED: "cancelled",
    RequestStatus.ABANDONED: "abandoned",
}
