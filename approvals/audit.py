"""The audit of decisions: who decided what, when and why, newest first.

An entry is one of six facts, each stored elsewhere:
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
- a revocation: a rule revoked by hand, on the rules page or by `DELETE /api/rules/{id}` (who = `revoked_by`,
  when = `revoked_at`, which = the rule); no request nor run.

Filters narrow every branch alike: agent, tool, policy binding and a text search in the arguments (a LIKE over
their JSON text, in the database, per tenant). The six are merged in the database (UNION ALL of their keys,
ordered by time), so a page or an export
chunk costs the same few queries whatever its size: one for the keys, then one per kind of row to load.
"""

import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.db import models
from django.db.models import F, Q, QuerySet, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.urls import reverse

from agents.events import EventType
from agents.models import Event
from approvals.kinds import KINDS
from approvals.models import TERMINAL, HeldAnswer, HeldState, PendingRequest, RequestKind, RequestStatus, Rule
from console.models import Tenant

ANSWER, CLOSING, RULE, POLICY, UNDO, REVOCATION = "answer", "closing", "rule", "policy", "undo", "revocation"

# A page or an export chunk is a list of these: (when, id of the request or event, source).
EntryKey = tuple[datetime, uuid.UUID, str]
KEY_COLUMNS = ("entry_when", "entry_id", "entry_source")

EXPORT_CHUNK = 500


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


# The filters that pick policy verdicts, as the `policy.verdict` events they match.
POLICY_FILTERS = {
    DecisionFilter.POLICY: Q(),
    DecisionFilter.POLICY_DENY: Q(data__decision="deny"),
    DecisionFilter.POLICY_TRANSFORM: Q(data__decision="transform"),
    DecisionFilter.POLICY_ESCALATE: Q(data__decision="escalate"),
    DecisionFilter.POLICY_SHADOW: Q(data__enforced=False),
}


@dataclass(frozen=True)
class Criteria:
    """What the audit is narrowed to; empty values mean "any".

    `who` is a username, "system" (terminal closings), "rule" / "rule <id>" (rule decisions) or "policy" /
    "policy <binding>" (policy verdicts). `policy` is a binding: its verdicts and the answers to its escalations.
    `search` is text the call's arguments contain.
    """

    agent: str = ""
    decision: str = ""
    who: str = ""
    tool: str = ""
    policy: str = ""
    search: str = ""
    date_from: date | None = None
    date_to: date | None = None


CLOSING_REASONS = {
    RequestStatus.EXPIRED: "Nobody answered before the deadline.",
    RequestStatus.CANCELLED: "The run or its session was cancelled.",
    RequestStatus.ABANDONED: "The session moved on without answering.",
}
AGENT_DELETED = "The agent was deleted."
SESSION_DELETED = "The session was deleted."


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
        return str(RequestKind(self.request_kind).label).lower() if self.request_kind else ""

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
            else {ANSWER: "user", CLOSING: "system", RULE: "rule", POLICY: "policy", UNDO: "user", REVOCATION: "user"}[
                self.source
            ],
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
    DecisionFilter.UNDONE: "undone",
    DecisionFilter.REVOKED: "revoked a rule",
    RequestStatus.EXPIRED: "expired",
    RequestStatus.CANCELLED: "cancelled",
    RequestStatus.ABANDONED: "abandoned",
}


def _keys(queryset: QuerySet[Any], when: Any, source: str) -> QuerySet[Any]:
    # Every branch of the union selects the same three columns, by the same names, in the same order.
    return (
        queryset.order_by()
        .annotate(entry_when=when, entry_id=F("id"), entry_source=Value(source, output_field=models.CharField()))
        .values_list(*KEY_COLUMNS)
    )


def _mentions(text: Any, search: str) -> Q:
    """`text` (the arguments' JSON as text) contains `search`, as typed or as JSON escapes it (quotes,
    non-ASCII: SQLite keeps `\u00e9` where PostgreSQL's jsonb gives `é`)."""
    escaped = json.dumps(search)[1:-1]
    found = Q(arguments_text__icontains=search)
    return found | Q(arguments_text__icontains=escaped) if escaped != search else found


def _narrowed(rows: QuerySet[Any], criteria: Criteria) -> QuerySet[Any]:
    """Requests or rules (each has an agent, a tool name and arguments) narrowed by agent, tool and argument
    search."""
    if criteria.agent:
        rows = rows.filter(agent__name=criteria.agent)
    if criteria.tool:
        rows = rows.filter(tool_name=criteria.tool)
    if criteria.search:
        rows = rows.annotate(arguments_text=Cast("arguments", models.TextField()))
        rows = rows.filter(_mentions("arguments_text", criteria.search))
    return rows


def _narrowed_requests(requests: QuerySet[PendingRequest], criteria: Criteria) -> QuerySet[PendingRequest]:
    """Requests narrowed by agent, tool, policy and argument search."""
    if criteria.policy:
        requests = requests.filter(policy__binding=criteria.policy)
    return _narrowed(requests, criteria)


def _narrowed_events(events: QuerySet[Event], criteria: Criteria) -> QuerySet[Event]:
    """Events narrowed by agent, tool and argument search (the data's `toolName` and `arguments`)."""
    if criteria.agent:
        events = events.filter(run__agent__name=criteria.agent)
    if criteria.tool:
        events = events.filter(data__toolName=criteria.tool)
    if criteria.search:
        events = events.annotate(arguments_text=KT("data__arguments"))
        events = events.filter(_mentions("arguments_text", criteria.search))
    return events


def _answers(tenant: Tenant, criteria: Criteria) -> QuerySet[Any] | None:
    decision_filters = {
        DecisionFilter.APPROVED: Q(kind=RequestKind.APPROVAL, answer__approved=True),
        DecisionFilter.DENIED: Q(kind=RequestKind.APPROVAL, answer__approved=False),
        DecisionFilter.INPUT: Q(kind=RequestKind.INPUT),
        DecisionFilter.TOOL_RESULT: Q(kind=RequestKind.CLIENT_TOOL),
    }
    requests = PendingRequest.objects.filter(tenant=tenant, answer__isnull=False, answered_at__isnull=False)
    # An external agent's request a rule decided at once is the rule's entry (its `request.answered` event).
    requests = requests.exclude(answered_via="rule")
    if criteria.decision:
        if criteria.decision not in decision_filters:
            return None
        requests = requests.filter(decision_filters[DecisionFilter(criteria.decision)])
    if criteria.who:
        requests = requests.filter(answered_by__username=criteria.who)
    return _keys(_narrowed_requests(requests, criteria), F("answered_at"), ANSWER)


def _closings(tenant: Tenant, criteria: Criteria) -> QuerySet[Any] | None:
    if criteria.decision and criteria.decision not in TERMINAL:
        return None
    statuses = [criteria.decision] if criteria.decision else list(TERMINAL)
    requests = PendingRequest.objects.filter(tenant=tenant, status__in=statuses)
    if criteria.who == "system":
        requests = requests.filter(closed_by=None)
    elif criteria.who:
        requests = requests.filter(closed_by__username=criteria.who)
    # closed_at is set by every closing; a row closed by hand without it still belongs in the audit.
    return _keys(_narrowed_requests(requests, criteria), Coalesce("closed_at", "opened_at"), CLOSING)


def _rule_decisions(tenant: Tenant, criteria: Criteria) -> QuerySet[Any] | None:
    if (criteria.decision and criteria.decision != DecisionFilter.RULE) or criteria.policy:
        return None
    events = Event.objects.filter(run__tenant=tenant, type=EventType.REQUEST_ANSWERED, data__has_key="ruleId")
    if criteria.who:
        word, _, rule_id = criteria.who.partition(" ")
        if word != "rule":
            return None
        if rule_id.strip():
            events = events.filter(data__ruleId=rule_id.strip())
    return _keys(_narrowed_events(events, criteria), F("timestamp"), RULE)


def _policy_verdicts(tenant: Tenant, criteria: Criteria) -> QuerySet[Any] | None:
    if criteria.decision and criteria.decision not in POLICY_FILTERS:
        return None
    # Every stored `policy.verdict` is a verdict other than allow (SPEC section 8).
    events = Event.objects.filter(run__tenant=tenant, type=EventType.POLICY_VERDICT)
    if criteria.decision:
        events = events.filter(POLICY_FILTERS[DecisionFilter(criteria.decision)])
    if criteria.who:
        word, _, binding = criteria.who.partition(" ")
        if word != "policy":
            return None
        if binding.strip():
            events = events.filter(data__binding=binding.strip())
    if criteria.policy:
        events = events.filter(data__binding=criteria.policy)
    return _keys(_narrowed_events(events, criteria), F("timestamp"), POLICY)


KNOWN_SHOWN = 100


def known_names(tenant: Tenant) -> tuple[list[str], list[str]]:
    """The tools and policy bindings the tenant's audit names (for the filters' suggestions), at most
    KNOWN_SHOWN of each, each read by the database as distinct values."""
    verdicts = Event.objects.filter(run__tenant=tenant, type=EventType.POLICY_VERDICT).order_by()
    asked = PendingRequest.objects.filter(tenant=tenant).exclude(tool_name="").order_by()
    tools = set(asked.values_list("tool_name", flat=True).distinct()[:KNOWN_SHOWN])
    tools |= set(verdicts.values_list(KT("data__toolName"), flat=True).distinct()[:KNOWN_SHOWN])
    policies = set(verdicts.values_list(KT("data__binding"), flat=True).distinct()[:KNOWN_SHOWN])
    policies |= set(asked.values_list(KT("policy__binding"), flat=True).distinct()[:KNOWN_SHOWN])
    return sorted(filter(None, tools))[:KNOWN_SHOWN], sorted(filter(None, policies))[:KNOWN_SHOWN]


def _undos(tenant: Tenant, criteria: Criteria) -> QuerySet[Any] | None:
    if criteria.decision and criteria.decision != DecisionFilter.UNDONE:
        return None
    undone = HeldAnswer.objects.filter(tenant=tenant, state=HeldState.UNDONE, settled_at__isnull=False)
    if criteria.who:
        undone = undone.filter(membership__user__username=criteria.who)
    if criteria.agent:
        undone = undone.filter(request__agent__name=criteria.agent)
    return _keys(undone, F("settled_at"), UNDO)


def _revocations(tenant: Tenant, criteria: Criteria) -> QuerySet[Any] | None:
    if (criteria.decision and criteria.decision != DecisionFilter.REVOKED) or criteria.policy:
        return None
    revoked = Rule.objects.filter(tenant=tenant, revoked_at__isnull=False)
    if criteria.who:
        revoked = revoked.filter(revoked_by__username=criteria.who)
    # A search matches the exact arguments a rule approved; a rule of any arguments or of conditions has none.
    return _keys(_narrowed(revoked, criteria), F("revoked_at"), REVOCATION)


def entry_keys(tenant: Tenant, criteria: Criteria, after: EntryKey | None = None) -> QuerySet[Any]:
    """The keys of the tenant's audit entries matching `criteria`, newest first; only those after the
    key `after` in that order when given (to walk an export chunk by chunk)."""
    branches = []
    for build, source in (
        (_answers, ANSWER),
        (_closings, CLOSING),
        (_rule_decisions, RULE),
        (_policy_verdicts, POLICY),
        (_undos, UNDO),
        (_revocations, REVOCATION),
    ):
        branch = build(tenant, criteria)
        if branch is None:
            continue
        if criteria.date_from:
            branch = branch.filter(entry_when__date__gte=criteria.date_from)
        if criteria.date_to:
            branch = branch.filter(entry_when__date__lte=criteria.date_to)
        if after is not None:
            branch = branch.filter(_after(after, source))
        branches.append(branch)
    if not branches:
        return PendingRequest.objects.none().values_list("id")
    first, *rest = branches
    combined = first.union(*rest, all=True) if rest else first
    return combined.order_by("-entry_when", "-entry_id", "-entry_source")


def _after(key: EntryKey, source: str) -> Q:
    """The rows of a branch of `source` that come after `key` in the order (when, id, source) descending."""
    when, entry_id, key_source = key
    later = Q(entry_when__lt=when) | Q(entry_when=when, entry_id__lt=entry_id)
    # A request answered and then closed gives two keys with the same id; the source breaks the tie.
    if source < key_source:
        later |= Q(entry_when=when, entry_id=entry_id)
    return later


def entries(tenant: Tenant, keys: Sequence[EntryKey]) -> list[AuditEntry]:
    """The entries of `keys`, in their order, with a fixed number of queries whatever their number."""
    request_ids = [entry_id for _, entry_id, source in keys if source in (ANSWER, CLOSING)]
    event_ids = [entry_id for _, entry_id, source in keys if source in (RULE, POLICY)]
    requests = PendingRequest.objects.select_related(
        "agent", "session", "answered_by", "closed_by", "run__version"
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
        if source == RULE and entry_id in events:
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


def iter_entries(tenant: Tenant, criteria: Criteria, chunk_size: int = EXPORT_CHUNK) -> Iterator[AuditEntry]:
    """Every matching entry, newest first, loaded a chunk at a time (an export of a big tenant never
    holds more than one chunk, nor keeps a database cursor open between chunks)."""
    after: EntryKey | None = None
    while True:
        keys = list(entry_keys(tenant, criteria, after)[:chunk_size])
        yield from entries(tenant, keys)
        if len(keys) < chunk_size:
            return
        after = keys[-1]


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
    pending, approved = held.request, held.response.get("approved")
    given = "answered" if pending.kind != RequestKind.APPROVAL else "approved" if approved else "denied"
    assert held.settled_at is not None
    return AuditEntry(
        when=held.settled_at,
        source=UNDO,
        decision=DecisionFilter.UNDONE,
        who=held.membership.user.username,
        reason=f"{given.capitalize()} and undone before it applied; nothing ran and the request stayed pending.",
        via=held.via,
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
