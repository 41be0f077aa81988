"""Which audit entries match: the criteria, the six branches' keys and their union, the export's walk.

Filters narrow every branch alike: agent, tool, policy binding and a text search in the arguments (a LIKE over
their JSON text, in the database, per tenant). The six sources (`approvals.audit_entries`) are merged in the
database (UNION ALL of their keys, ordered by time), so a page or an export chunk costs the same few queries
whatever its size: one for the keys, then one per kind of row to load (`approvals.audit_rows.entries`).
"""

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.db import models
from django.db.models import F, Q, QuerySet, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from agents.events import EventType
from agents.models import Event
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
from approvals.audit_rows import entries
from approvals.kinds import KINDS
from approvals.models import TERMINAL, HeldAnswer, HeldState, PendingRequest, Rule
from console.models import Tenant

KEY_COLUMNS = ("entry_when", "entry_id", "entry_source")

EXPORT_CHUNK = 500

# The decisions the audit narrows answers to, each listing answers of one kind (`Kind.audit_filters`).
ANSWER_FILTERS = {
    decision: Q(kind=name, **lookups)
    for name, kind in KINDS.items()
    for decision, lookups in kind.audit_filters.items()
}

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
    requests = PendingRequest.objects.filter(tenant=tenant, answer__isnull=False, answered_at__isnull=False)
    # An external agent's request a rule decided at once is the rule's entry (its `request.answered` event).
    requests = requests.exclude(answered_via="rule")
    if criteria.decision:
        if criteria.decision not in ANSWER_FILTERS:
            return None
        requests = requests.filter(ANSWER_FILTERS[DecisionFilter(criteria.decision)])
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


def _approvals(tenant: Tenant, criteria: Criteria) -> QuerySet[Any] | None:
    """Approvals toward a quorum that did not decide it (SPEC section 14): shown with every decision, or asked for
    by who gave them."""
    if criteria.decision or criteria.policy:
        return None
    events = Event.objects.filter(run__tenant=tenant, type=EventType.REQUEST_APPROVAL_RECORDED)
    if criteria.who:
        events = events.filter(data__by=criteria.who)
    return _keys(_narrowed_events(events, criteria), F("timestamp"), APPROVAL)


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
        (_approvals, APPROVAL),
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
