"""What a rule or a policy would have done (SPEC section 13), and the rules suggested by repeated approvals.

A preview replays a candidate over an agent's last N closed approval requests (answered, expired, cancelled or
abandoned; newest decided first) and counts what it would have said of each. It writes nothing: no request, no
rule, no event, no run, no receipt (tests/approvals/test_previews.py compares the whole database before and
after). Its callers: `POST /api/rules/preview`, `POST /api/agents/{name}/policy-preview`
(approvals/api/preview_routes.py), the rules page's and the policy editor's Preview buttons and the rules page's
suggestions.

What a candidate says of one past call:
- a **rule** approves a call of its tool whose arguments it matches (`agents.rule_matching.rule_matches` on the
  arguments the tool ran with: the answer's `overrideArguments`, else the request's), and otherwise asks; a rule
  never denies, and never lifts a policy's escalation (a request that stood for one: ask);
- a **policy** declaration (its bindings at `pre_tool_call`, on the arguments the request was opened with, as an
  external agent's call is checked before its request opens: approvals/actions/interceptions.py) denies on a
  deny (a fail-closed one too: a policy over its sandbox budget), asks on an escalation, and on allow, warn or
  transform leaves the call to the tool's approval mode: "no objection" is not an approval, so the call still
  asks a person (`ask`), unless the tool's mode is `never` (`approved`). A declaration in shadow mode
  (`evaluate_only`) is previewed as if enforced: what it would do once enforced. Declarations binding an
  `airlock.webhook` are refused (`PreviewRefused`): a preview would POST past calls' arguments to an
  installation's webhook, which is a side effect and a disclosure no preview should make.

A disagreement is a call the candidate approves that was denied (by a person or a policy) or closed unanswered
(expired, cancelled, abandoned), or a call it denies that was approved; `ask` never disagrees.
"""

import copy
import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from asgiref.sync import async_to_sync
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone
from pydantic import ValidationError

from agents.definition_checks import error_map
from agents.definitions import DefinitionContent, PoliciesRefused
from agents.models import Agent, AgentVersion
from agents.payloads import Payload
from agents.policies import CompilesThrottled, PolicyBlocked, PolicyScope, compile_problems, webhook_connections
from agents.rule_matching import arguments_hash, first_matching, rule_matches
from approvals.kinds import GATING
from approvals.models import OPEN, PendingRequest, Rule
from approvals.receipts import result_kind
from approvals.remembered_rules import RuleIn, rule_refusal
from console.models import Tenant

LIMIT, MAX_LIMIT = 200, 10_000
# A policy preview runs every past call through the policy sandbox (each evaluation under the sandbox's own
# budget); past this many seconds in all it stops and says how far it got (`truncated`).
POLICY_SECONDS = 10.0
APPROVED = frozenset({"approved", "approved-for-session"})
# Who decided without a person (approvals/actions/external.py): such answers are not "approved by people".
NOT_A_PERSON = ("rule", "policy", "never")
SUGGEST_AFTER, SUGGEST_DAYS, SUGGESTIONS, SUGGEST_SCAN = 5, 30, 10, 5_000

Candidate = Literal["approved", "denied", "ask"]


class PreviewRefused(Exception):
    """A candidate that cannot be previewed (nothing was evaluated); `status`, `code`, `detail` are the HTTP
    answer, `field` the input it is about (wire name)."""

    def __init__(self, status: int, code: str, field: str, detail: str, errors: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.field, self.detail = status, code, field, detail
        self.errors = errors or {field: detail}


@dataclass(frozen=True)
class Disagreement:
    request_id: str
    decided: str  # the section 10 result kind of what happened
    candidate: Candidate


@dataclass
class Preview:
    """What a candidate would have done to the last `requested` closed approval requests; `truncated` when the
    time budget stopped it after `evaluated` of them."""

    requested: int
    evaluated: int = 0
    would: Counter[str] = field(default_factory=Counter)
    disagreements: list[Disagreement] = field(default_factory=list)
    truncated: bool = False

    def count(self, request_id: Any, decided: str, candidate: Candidate) -> None:
        self.evaluated += 1
        self.would[candidate] += 1
        approves_a_refusal = candidate == "approved" and decided not in APPROVED
        if approves_a_refusal or (candidate == "denied" and decided in APPROVED):
            self.disagreements.append(Disagreement(str(request_id), decided, candidate))

    @property
    def approved_refused(self) -> int:
        """Of the calls it would have approved, how many were denied or closed unanswered."""
        return sum(1 for d in self.disagreements if d.candidate == "approved")

    @property
    def denied_approved(self) -> int:
        """Of the calls it would have denied, how many were approved."""
        return sum(1 for d in self.disagreements if d.candidate == "denied")

    def said(self, verb: Literal["approved", "denied"]) -> str:
        """The preview in a sentence, about what the candidate `verb`s (a rule approves, a policy denies):
        "Would have approved 37 of the last 200; a person denied 2 of those." """
        counted = self.would[verb]
        sentence = f"Would have {verb} {counted} of the last {self.evaluated}"
        if self.truncated:
            sentence += f" (the preview stopped at its time budget, before the other {self.requested - self.evaluated})"
        against = Counter(d.decided for d in self.disagreements if d.candidate == verb)
        if verb == "denied":
            approved = sum(against.values())
            if not approved:
                return sentence + "."
            return sentence + f"; {approved} of those {'was' if approved == 1 else 'were'} approved."
        parts = [
            f"{said} {against[kind]} of those"
            for kind, said in (
                ("denied-interactively-by-user", "a person denied"),
                ("denied-by-permission-request-hook", "a policy denied"),
            )
            if against[kind]
        ]
        if against["cancelled"]:
            parts.append(f"{against['cancelled']} closed unanswered")
        return sentence + ("; " + ", ".join(parts) if parts else "") + "."

    def wire(self) -> dict[str, Any]:
        return {
            "evaluated": self.evaluated,
            "wouldApprove": self.would["approved"],
            "wouldDeny": self.would["denied"],
            "wouldAsk": self.would["ask"],
            "disagreements": [
                {"requestId": d.request_id, "decided": d.decided, "candidate": d.candidate} for d in self.disagreements
            ],
            "truncated": self.truncated,
        }


def closed_requests(agent: Agent, limit: int) -> QuerySet[PendingRequest]:
    """The agent's last `limit` closed requests that held a tool call until a yes (`GATING`: approvals), the last
    decided first."""
    found = PendingRequest.objects.filter(agent=agent, kind__in=GATING).exclude(tool_name="").exclude(OPEN)
    found = found.annotate(decided_at=Coalesce("answered_at", "closed_at", "opened_at"))
    fields = ("id", "kind", "status", "answer", "tool_name", "call_id", "arguments", "policy", "engine_state")
    return found.only(*fields).order_by("-decided_at", "-id")[:limit]


def _decided_as(pending: PendingRequest) -> str:
    return result_kind(pending.kind, pending.status, pending.answer)


def ran_with(pending: PendingRequest) -> dict[str, Any]:
    """The arguments the tool ran (or would have run) with: the operator's edit, else the request's."""
    override = (pending.answer or {}).get("overrideArguments")
    return override if isinstance(override, dict) else (pending.arguments or {})


# --- rules ---------------------------------------------------------------------------------------------------


def live_agent(tenant: Tenant, name: str) -> Agent:
    agent = Agent.objects.live().filter(tenant=tenant, name=name).first()
    if agent is None:
        raise PreviewRefused(404, "agent_not_found", "agent", f"No agent named {name!r} in this tenant.")
    return agent


def checked_rule(tenant: Tenant, wanted: RuleIn) -> Agent:
    """The agent of a candidate rule, checked as saving it checks it (RuleRefused, or PreviewRefused 404)."""
    agent = live_agent(tenant, wanted.agent)
    refused = rule_refusal(agent.current.definition, wanted)
    if refused is not None:
        raise refused
    return agent


def preview_rule(agent: Agent, wanted: RuleIn, limit: int = LIMIT) -> Preview:
    """What the rule `wanted` (checked: `checked_rule`) would have done to the agent's last `limit` closed calls."""
    digest = arguments_hash(wanted.arguments) if wanted.arguments is not None else ""
    conditions = [condition.model_dump(mode="json") for condition in wanted.conditions]
    preview = Preview(requested=limit)
    for pending in closed_requests(agent, limit).iterator(chunk_size=500):
        matches = pending.tool_name == wanted.tool_name and not pending.policy
        approves = matches and rule_matches(digest, conditions, ran_with(pending))
        preview.count(pending.id, _decided_as(pending), "approved" if approves else "ask")
    return preview


# --- policies ------------------------------------------------------------------------------------------------


def checked_hooks(agent: Agent, hooks: dict[str, Any] | None) -> None:
    """Check a candidate declaration for the agent as saving the agent with it would (the loader, the
    manifests, the tools its manifests name: PreviewRefused 400 `invalid_hooks`; its policies compiled:
    `agents.definitions.PoliciesRefused`, 400 or 429), and refuse one that binds a policy webhook."""
    content = agent.current.definition
    try:
        DefinitionContent.model_validate({**content.wire(), "hooks": hooks})
    except ValidationError as error:
        errors = error_map(error)
        detail = "The definition's hooks cannot be loaded."
        code = "invalid_hooks" if any(path.split(".")[0] == "hooks" for path in errors) else "invalid_request"
        raise PreviewRefused(400, code, "hooks", detail, errors) from None
    if hooks is None:
        return
    refuse_webhooks(hooks)
    try:
        uncompiled = compile_problems(hooks, str(agent.tenant_id))
    except CompilesThrottled as throttled:
        raise PoliciesRefused({"hooks": str(throttled)}, throttled.retry_after) from None
    if uncompiled:
        raise PoliciesRefused({"hooks": "; ".join(uncompiled)})


def refuse_webhooks(hooks: Any) -> None:
    """A declaration binding a policy webhook is not previewed (see the module's docstring)."""
    bound = webhook_connections(hooks)
    if bound:
        index, name = bound[0]
        detail = (
            f"The declaration binds the policy webhook {name!r} (bindings/{index}): a preview would send the "
            "arguments of past calls to it, so declarations with an airlock.webhook binding are not previewed."
        )
        raise PreviewRefused(400, "webhook_not_previewed", f"hooks.bindings.{index}", detail)


@dataclass(frozen=True)
class _Call:
    request_id: Any
    decided: str
    tool_name: str
    call_id: str
    arguments: dict[str, Any]
    mode: str  # the tool's approval mode when it was asked


def preview_policies(
    agent: Agent, hooks: dict[str, Any] | None, limit: int = LIMIT, seconds: float = POLICY_SECONDS
) -> Preview:
    """What the declaration `hooks` (checked as saving checks it, and binding no webhook: `refuse_webhooks`)
    would have done at `pre_tool_call` to the agent's last `limit` closed calls, within `seconds` in all."""
    modes = {tool.name: str(tool.approval) for tool in agent.current.definition.tools}
    calls = [
        _Call(p.id, _decided_as(p), p.tool_name, p.call_id, p.arguments or {}, p.approval_mode_in(modes))
        for p in closed_requests(agent, limit).iterator(chunk_size=500)
    ]
    preview = Preview(requested=limit)
    if hooks is None:
        for call in calls:
            preview.count(call.request_id, call.decided, _allowed(call))
        return preview
    hooks = copy.deepcopy(hooks)
    hooks.setdefault("configuration", {})["mode"] = "enforce"
    async_to_sync(_evaluate)(agent, hooks, calls, preview, time.monotonic() + seconds)
    return preview


def _allowed(call: _Call) -> Candidate:
    return "approved" if call.mode == "never" else "ask"


async def _evaluate(agent: Agent, hooks: dict[str, Any], calls: list[_Call], preview: Preview, deadline: float) -> None:
    records: list[dict[str, Any]] = []

    async def ignore(payload: Payload) -> None:
        pass

    scope = PolicyScope("preview", None, str(agent.tenant_id), records)
    policies = scope.policies(
        hooks, connections={}, decisions={}, agent=agent.name, version=agent.current_version + 1, emit=ignore
    )
    assert policies is not None
    for call in calls:
        if time.monotonic() >= deadline:
            preview.truncated = True
            return
        context = policies.builder.pre_tool_call(
            call_id=call.call_id, name=call.tool_name, args=copy.deepcopy(call.arguments)
        )
        try:
            await policies.check(context)
        except PolicyBlocked as blocked:
            candidate: Candidate = "ask" if blocked.escalation is not None else "denied"
        else:
            candidate = _allowed(call)
        records.clear()
        preview.count(call.request_id, call.decided, candidate)


# --- suggestions ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    """A rule people keep approving by hand: `approvals` approvals of exactly `arguments` in the window."""

    agent: str
    tool_name: str
    arguments: dict[str, Any]
    approvals: int
    preview: Preview

    @property
    def said(self) -> str:
        return self.preview.said("approved")

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)


def suggestions(tenant: Tenant, now: datetime | None = None) -> list[Suggestion]:
    """Rules proposed from repeated approvals: one agent's call of one tool with the same arguments (the same
    `arguments_hash`) approved by people at least SUGGEST_AFTER times in the last SUGGEST_DAYS days, denied by
    nobody in that time, that no active rule approves already and a rule could be made for now; the most
    approved first, at most SUGGESTIONS, each with its preview. Reads the last SUGGEST_SCAN answers of the
    window, then the rules and the current versions of the agents concerned, then one query per preview."""
    since = (now or timezone.now()) - timedelta(days=SUGGEST_DAYS)
    answered = (
        PendingRequest.objects.filter(
            tenant=tenant, kind__in=GATING, agent__deleted_at__isnull=True, answered_at__gte=since
        )
        .exclude(tool_name="")
        .exclude(answer__isnull=True)
        .order_by("-answered_at")
        .values_list("agent_id", "tool_name", "arguments", "answer", "answered_via")[:SUGGEST_SCAN]
    )
    approved: Counter[tuple[Any, str, str]] = Counter()
    denied: set[tuple[Any, str, str]] = set()
    arguments: dict[tuple[Any, str, str], dict[str, Any]] = {}
    for agent_id, tool_name, asked, given, via in answered:
        answer: dict[str, Any] = given or {}
        override = answer.get("overrideArguments")
        ran = override if isinstance(override, dict) else (asked or {})
        key = (agent_id, tool_name, arguments_hash(ran))
        if not answer.get("approved"):
            denied.add(key)
        elif via not in NOT_A_PERSON:
            approved[key] += 1
            arguments.setdefault(key, ran)
    wanted = [key for key, n in approved.most_common() if n >= SUGGEST_AFTER and key not in denied]
    if not wanted:
        return []
    agent_ids = {key[0] for key in wanted}
    rules = _active_rules(tenant, agent_ids)
    agents = {agent.pk: agent for agent in Agent.objects.live().filter(tenant=tenant, pk__in=agent_ids)}
    definitions = {
        version.agent_id: version.definition
        for version in AgentVersion.objects.filter(agent__in=agents.values(), number=F("agent__current_version"))
    }
    found: list[Suggestion] = []
    for key in wanted:
        agent = agents.get(key[0])
        if agent is None or first_matching(rules.get(agent.pk, ()), key[1], arguments[key]) is not None:
            continue
        rule = RuleIn(agent=agent.name, tool_name=key[1], arguments=arguments[key])
        if rule_refusal(definitions[agent.pk], rule) is not None:
            continue
        found.append(Suggestion(agent.name, key[1], arguments[key], approved[key], preview_rule(agent, rule)))
        if len(found) == SUGGESTIONS:
            break
    return found


def _active_rules(tenant: Tenant, agent_ids: Iterable[Any]) -> dict[Any, list[Rule]]:
    """The rules in force for every session (not revoked, not expired, remembered "always"): a suggestion they
    cover would change nothing, where one a session rule covers still asks in every other session."""
    by_agent: dict[Any, list[Rule]] = {}
    unexpired = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    in_force = Rule.objects.filter(unexpired, tenant=tenant, agent_id__in=agent_ids, session__isnull=True)
    for rule in in_force.filter(revoked_at__isnull=True):
        by_agent.setdefault(rule.agent_id, []).append(rule)
    return by_agent
