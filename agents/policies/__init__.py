"""Policies on the engine: the eight interception points of AGENT-HOOKS-0.1 (SPEC section 8).

A definition's `hooks` (an `agent-hooks-declaration/1.0` document) becomes one emitter per turn, built by
the agent-hooks SDK's loader with Airlock's registry: the kinds `airlock.acs` (Rego/Cedar policies run by
agent-control-spec in the policy sandbox, agents/policy_sandbox.py) and `airlock.webhook` (a policy webhook
connection), and the approval resolver `airlock-inbox` (an escalation becomes an inbox request; the operator's
answer decides it next turn).

`TurnPolicies.check` emits one context and returns the target to go on with (transformed where a verdict
said so); a deny raises `PolicyBlocked`. The engine (agents/engine/turn.py, gate.py, seams.py) calls it at each point:
`agent_startup`, `input` and `agent_shutdown` around the turn, `pre_model_call`/`post_model_call`/`output`
in `PolicyCapability`, `pre_tool_call`/`post_tool_call` in the tool gate. This module knows nothing of the
database: the caller resolves connections and hands in the operator's decisions.

The package, one module per concern: `points` (the eight points, declared once), `escalations` (the
`airlock-inbox` resolver), `acs` and `webhooks` (the two binding kinds), `declarations` (what saving a definition
checks), `samples` (the contexts the Try panel and the check at save evaluate), `turn_policies` (`TurnPolicies`,
`PolicyScope`, `PolicyBlocked`). This module only re-exports.
"""

from agents.policies.acs import (
    ALLOW,
    BUDGET_EXCEEDED,
    COMPILE_QUOTA,
    MANIFEST_MAX,
    SOURCES_MAX,
    WORKER_FAILED,
    AcsBinding,
    AcsSources,
    CompileQuota,
    CompilesThrottled,
    ManifestRefused,
    SampleFailure,
    acs_binding,
    acs_sources,
    safe_manifest,
)
from agents.policies.declarations import (
    SURFACE,
    compile_problems,
    declaration_problems,
    registry,
    unlisted_tools,
    webhook_connections,
)
from agents.policies.escalations import (
    MESSAGE_LIMIT,
    REASON_LIMIT,
    RESOLVER,
    AskedEscalation,
    InboxResolver,
    capped,
    stable_key,
)
from agents.policies.points import INTERCEPTION_POINTS, LIFTABLE, POINTS, Deny, Point
from agents.policies.samples import (
    SAMPLE_EMAIL,
    SAMPLE_MESSAGE,
    SampleAgent,
    sample_context,
    save_samples,
    try_builder,
)
from agents.policies.turn_policies import FRAMEWORK, Emit, PolicyBlocked, PolicyScope, TurnPolicies
from agents.policies.webhooks import VERDICT_LIMIT, VerdictTooLarge, WebhookBinding, webhook_binding, webhook_config

__all__ = [
    "ALLOW",
    "BUDGET_EXCEEDED",
    "COMPILE_QUOTA",
    "FRAMEWORK",
    "INTERCEPTION_POINTS",
    "LIFTABLE",
    "MANIFEST_MAX",
    "MESSAGE_LIMIT",
    "POINTS",
    "REASON_LIMIT",
    "RESOLVER",
    "SAMPLE_EMAIL",
    "SAMPLE_MESSAGE",
    "SOURCES_MAX",
    "SURFACE",
    "VERDICT_LIMIT",
    "WORKER_FAILED",
    "AcsBinding",
    "AcsSources",
    "AskedEscalation",
    "CompileQuota",
    "CompilesThrottled",
    "Deny",
    "Emit",
    "InboxResolver",
    "ManifestRefused",
    "Point",
    "PolicyBlocked",
    "PolicyScope",
    "SampleAgent",
    "SampleFailure",
    "TurnPolicies",
    "VerdictTooLarge",
    "WebhookBinding",
    "acs_binding",
    "acs_sources",
    "capped",
    "compile_problems",
    "declaration_problems",
    "registry",
    "safe_manifest",
    "sample_context",
    "save_samples",
    "stable_key",
    "try_builder",
    "unlisted_tools",
    "webhook_binding",
    "webhook_config",
    "webhook_connections",
]
