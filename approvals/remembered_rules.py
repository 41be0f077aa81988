"""Remembered rules: when one approves a tool call without asking."""

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.db.models.fields.json import KT
from django.utils import timezone
from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
)

from agents.definitions import DefinitionContent, WireModel
from agents.models import Agent, Session
from agents.queries import picked
from agents.request_kinds import RequestKind
from agents.rule_matching import Condition, RememberedUntil, Scope, arguments_hash, json_kind
from approvals.models import UNSETTLED, PendingRequest, Rule
from approvals.receipts import Receipt
from console.models import Membership
from console.sql import Prepared


def decisions_since(tenant: Any, since: datetime) -> dict[str, int]:
    """How many calls each of the tenant's rules decided since `since`, its versions together: its receipts
    (`answeredBy` "rule:<id>@<version>"), counted in one grouped query."""
    decided = (
        Receipt.objects.filter(tenant=tenant, at__gte=since, body__decisionSource="rule")
        .values(by=KT("body__answeredBy"))
        .annotate(count=Count("id"))
    )
    counts: dict[str, int] = {}
    for row in decided:
        rule_id = str(row["by"]).removeprefix("rule:").rpartition("@")[0]
        counts[rule_id] = counts.get(rule_id, 0) + row["count"]
    return counts


def _in_force(agent: int, now: datetime, session: int | None = None) -> QuerySet[Rule]:
    scope = Q(session__isnull=True) | Q(session=session) if session is not None else Q(session__isnull=True)
    unexpired = Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    return Rule.objects.filter(scope, unexpired, agent=agent, revoked_at__isnull=True)


# Every turn that consults rules reads them (issue 56): compiled once, for a session and for none.
_IN_FORCE = Prepared(_in_force, agent=int, now=datetime, session=int)
_IN_FORCE_ALWAYS = Prepared(_in_force, agent=int, now=datetime)


def rules_in_force(agent: Agent, session: Session | None) -> list[Rule]:
    """The rules a call of `agent` in `session` may be approved by: neither revoked nor expired, and remembered
    "always" or in this very session (a sessionless turn: "always" ones only)."""
    if session is None:
        return _IN_FORCE_ALWAYS.all(agent=agent.pk, now=timezone.now())
    return _IN_FORCE.all(agent=agent.pk, now=timezone.now(), session=session.pk)


# --- a rule remembered "always" from an approval, said before it is made -------------------------------

# The open requests a confirmation offers to approve too, at most (each is a posted field: Django takes 1,000).
MATCHES_ANSWERED = 100
# The open requests of the tool read to find the matches, at most (the oldest).
MATCHES_COUNTED = 1000


def default_expiry(now: datetime | None = None) -> datetime | None:
    """Until when a rule remembered "always" holds when its answer names no `expiresAt`: `RULE_DEFAULT_EXPIRY`
    from now, or None (never) when the setting is empty."""
    period = settings.RULE_DEFAULT_EXPIRY
    return None if period is None else (now or timezone.now()) + period


def rule_owner(pending: PendingRequest) -> str:
    """The agent whose rule an approval of `pending` remembers: the sub-agent that asked, else the run's agent."""
    asker = pending.asker
    return asker[0] if asker is not None else pending.agent.name


@dataclass(frozen=True)
class AlwaysCovers:
    """What the rule an approval remembers "always" would cover, shown before it is made (the inbox card's and
    the trial page's confirmation): the agent whose rule it is, the tool, the exact arguments (None: any),
    until when (None: never), and the other open requests it matches now that the member may answer
    (`matching`: the oldest MATCHES_ANSWERED; `counted` of them in all)."""

    agent: str
    tool_name: str
    arguments: dict[str, Any] | None
    expires_at: datetime | None
    matching: list[PendingRequest]
    counted: int

    @property
    def digest(self) -> str:
        """What the rule covers, as a confirmation posts it back: a change since (edited arguments) asks again."""
        covered = [self.agent, self.tool_name, arguments_hash(self.arguments) if self.arguments is not None else ""]
        return hashlib.sha256(json.dumps(covered).encode()).hexdigest()[:32]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, indent=2, ensure_ascii=False)


def always_covers(
    membership: Membership,
    pending: PendingRequest,
    *,
    override: dict[str, Any] | None = None,
    only_these: bool = False,
    expires_at: datetime | None = None,
) -> AlwaysCovers:
    """What approving `pending` (with the arguments `override`, if edited) and remembering "always" would make:
    narrowed to the approved arguments when `only_these`, as the approval kind makes it; until `expires_at`, else
    the default expiry."""
    approved = override if override is not None else pending.arguments
    arguments = approved if only_these else None
    owner = rule_owner(pending)
    found = open_matches(membership, pending, owner, arguments)
    return AlwaysCovers(
        owner, pending.tool_name, arguments, expires_at or default_expiry(), found[:MATCHES_ANSWERED], len(found)
    )


def open_matches(
    membership: Membership, pending: PendingRequest, owner: str, arguments: dict[str, Any] | None
) -> list[PendingRequest]:
    """The other open approval requests of the member's tenant, oldest first, that a rule of `owner` for
    `pending`'s tool (for exactly `arguments`, or any) approves, and which the member may answer now. Left out,
    as a rule would leave them or an answer could not be given: a policy's escalation, a tool that asks every
    time, a request needing more than one approval, one past its deadline, one whose answer is held for Undo."""
    now = timezone.now()
    candidates = (
        PendingRequest.objects.open()
        .answerable_by(membership)
        .filter(tenant=membership.tenant_id, kind=RequestKind.APPROVAL, tool_name=pending.tool_name)
        .filter(policy__isnull=True, require__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .exclude(pk=pending.pk)
        .exclude(held_answers__state__in=UNSETTLED)
        .select_related("agent", "session", "run__version")
        .order_by("opened_at", "id")
    )
    if pending.asker is None:
        candidates = candidates.filter(agent=pending.agent_id)
    wanted = arguments_hash(arguments) if arguments is not None else None
    return [
        candidate
        for candidate in candidates[:MATCHES_COUNTED]
        if rule_owner(candidate) == owner
        and candidate.approval_mode != "every_time"
        and (wanted is None or arguments_hash(candidate.arguments) == wanted)
    ]


# --- rules made by hand (the console's form and `POST /api/rules`) ---------------------------------

_COMPARISONS = ("lt", "lte", "gt", "gte")
# What a rule made by hand may hold: a rule is read by people (the rules page) and checked on every call.
CONDITIONS, VALUE_LENGTH, ARGUMENTS_LENGTH = 50, 2_000, 100_000
SYMBOLS = {
    "equals": "=",
    "not_equals": "!=",
    "lt": "<",
    "lte": "<=",
    "gt": ">",
    "gte": ">=",
    "in": "in",
    "not_in": "not in",
}


class ConditionIn(Condition):
    """A condition as a person writes it: refuses the ones that could never decide anything."""

    argument: str = Field(min_length=1, max_length=200)

    # A field validator (not a model one) so the error points at "conditions.N.value".
    @field_validator("value")
    @classmethod
    def _value_fits_operator(cls, value: Any, info: ValidationInfo) -> Any:
        operator = info.data.get("operator")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("give a finite number")
        if len(json.dumps(value)) > VALUE_LENGTH:
            raise ValueError(f"a value is at most {VALUE_LENGTH:,} characters long (as JSON)")
        if operator in ("in", "not_in"):
            if not isinstance(value, list) or not value:
                raise ValueError(f'`{operator}` needs a non-empty list of values, like ["EUR", "USD"]')
            if len({json_kind(item) for item in value}) > 1:
                raise ValueError("the values of the list must all be of one JSON type")
        elif operator in _COMPARISONS and json_kind(value) not in ("number", "string"):
            raise ValueError(f"`{operator}` compares numbers or strings; {json.dumps(value)} is neither")
        return value


class RuleIn(WireModel):
    """A rule made by hand: for one agent's tool, optionally narrowed to exact arguments or to conditions."""

    agent: str = Field(min_length=1, max_length=63)
    tool_name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] | None = None
    conditions: list[ConditionIn] = Field(default_factory=list, max_length=CONDITIONS)
    expires_at: RememberedUntil = None

    @field_validator("arguments")
    @classmethod
    def _arguments_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _arguments_fit(value)


def _arguments_fit(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(json.dumps(value)) > ARGUMENTS_LENGTH:
        raise ValueError(f"the arguments are at most {ARGUMENTS_LENGTH:,} characters long (as JSON)")
    return value


class RuleEdit(WireModel):
    """An edit of a rule (`PATCH /api/rules/{id}`, the rules page's Edit form): only the fields given change.
    `arguments` (an object, or null for any arguments) and `conditions` replace the rule's narrowing; `expiresAt`
    (null: never); `scope` "always" widens a session rule to every session, "session" needs `sessionId`."""

    arguments: dict[str, Any] | None = None
    conditions: list[ConditionIn] | None = Field(default=None, max_length=CONDITIONS)
    expires_at: RememberedUntil = None
    scope: Scope | None = None
    session_id: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("arguments")
    @classmethod
    def _arguments_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _arguments_fit(value)


class RuleRefused(Exception):
    """A well-formed rule that cannot be made; `field` is the input it is about (wire name)."""

    def __init__(self, status: int, code: str, field: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.field, self.detail = status, code, field, detail


def tool_approval(definition: DefinitionContent, tool_name: str) -> str:
    """How a call of `tool_name` is approved under a definition: a server tool's
    mode, "client" for a client tool, an MCP server's mode when one may provide the tool, else "unknown".

    The MCP servers' tool names are not known without starting them: a server may provide any name
    (any name starting with `<toolPrefix>_` when it sets a prefix). One that asks "always" wins. A gateway's tool
    is its server's, in the mode the gateway sets for it (SPEC section 15)."""
    if definition.gateway:
        fronted = definition.fronting(tool_name)
        return fronted[0].approval_of(fronted[1]) if fronted is not None else "unknown"
    for tool in definition.tools:
        if tool.name == tool_name:
            return str(tool.approval)
    if any(tool.name == tool_name for tool in definition.client_tools):
        return "client"
    modes = {
        server.approval
        for server in definition.mcp_servers
        if not server.tool_prefix or tool_name.startswith(f"{server.tool_prefix}_")
    }
    for mode in ("always", "every_time", "never"):
        if mode in modes:
            return mode
    return "unknown"


def rule_refusal(definition: DefinitionContent, wanted: RuleIn) -> RuleRefused | None:
    """Why a rule for `wanted` would be pointless or wrong under the agent's current definition."""
    if wanted.arguments is not None and wanted.conditions:
        detail = "Give exact `arguments` or `conditions`, not both."
        return RuleRefused(400, "arguments_and_conditions", "conditions", detail)
    name, agent = wanted.tool_name, wanted.agent
    match tool_approval(definition, name):
        case "always":
            return None
        case "every_time":
            detail = f"{name} asks every time; rules never apply to it."
            return RuleRefused(400, "remember_refused", "toolName", detail)
        case "never":
            detail = f"{name} runs without asking for approval; a rule would change nothing."
            if not definition.gateway and all(tool.name != name for tool in definition.tools):
                # Only an MCP server's tool could be named so (its list is the server's): say which it would be.
                detail = (
                    f"{agent!r} has no server tool {name!r}, and the MCP servers that could offer a tool of that "
                    "name run their tools without asking for approval; a rule would change nothing."
                )
            return RuleRefused(400, "tool_never_asks", "toolName", detail)
        case "client":
            detail = f"{name} is a client tool: the caller runs it, no approval is asked."
            return RuleRefused(400, "tool_never_asks", "toolName", detail)
    detail = f"The current version of {agent!r} has no tool {name!r} that asks for approval."
    return RuleRefused(400, "unknown_tool", "toolName", detail)


def tenant_rules(
    tenant: Any, *, agent: str | None = None, tool: str | None = None, revoked: bool = True
) -> QuerySet[Rule]:
    """The tenant's rules of agents not deleted (a deleted agent's rules can never apply again), those of
    `agent` and for `tool` when named; without `revoked`, only the rules still in force: neither revoked nor
    expired (the rules page's filters and `GET /api/rules`'; both kinds of ended rule are kept for the record)."""
    rules = Rule.objects.select_related("agent", "created_by", "created_from", "session", "edited_by").filter(
        tenant=tenant, agent__deleted_at__isnull=True
    )
    if not revoked:
        unexpired = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        rules = rules.filter(unexpired, revoked_at__isnull=True)
    return picked(rules, agent__name=agent, tool_name=tool)


def remembered_arguments(rule: Rule) -> dict[str, Any] | None:
    """The exact arguments a rule approves when it was remembered from a request: those the operator
    approved (their override, else the request's)."""
    if rule.arguments is not None:
        return rule.arguments
    pending = rule.created_from
    if not rule.arguments_hash or pending is None:
        return None
    override = (pending.answer or {}).get("overrideArguments")
    for candidate in (override, pending.arguments):
        if isinstance(candidate, dict) and arguments_hash(candidate) == rule.arguments_hash:
            return candidate
    return None


def _shown(value: Any) -> str:
    """A condition's value for reading: strings bare, lists in brackets, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def describe_conditions(conditions: list[dict[str, Any]]) -> str:
    """Conditions as one line, like `amount < 100 and currency in [EUR, USD]`."""
    return " and ".join(
        f"{c.get('argument')} {SYMBOLS.get(c.get('operator', ''), c.get('operator'))} {_shown(c.get('value'))}"
        for c in conditions
    )
