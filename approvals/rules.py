"""Remembered rules: when one approves a tool call without asking."""

import hashlib
import json
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Literal

from django.db.models import Count, Q, QuerySet
from django.db.models.fields.json import KT
from django.utils import timezone
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)
from pydantic.json_schema import WithJsonSchema

from agents.definitions import DefinitionContent, WireModel
from agents.models import Agent, Session
from agents.queries import picked
from approvals.models import Rule
from approvals.receipts import Receipt

Scope = Literal["session", "always"]


def _scope_of(value: Any) -> Any:
    """`remember` as it was before scopes: `true` is "always", `false` remembers nothing."""
    if value is True:
        return "always"
    return None if value is False else value


# `remember` on an answer (SPEC section 13): "session", "always", or a boolean (true: "always"); None: nothing.
Remember = Annotated[
    Scope | None,
    BeforeValidator(_scope_of),
    WithJsonSchema({"anyOf": [{"enum": ["session", "always"]}, {"type": "boolean"}, {"type": "null"}]}),
]


def in_the_future(value: datetime | None) -> datetime | None:
    """An `expiresAt` must still be ahead: a rule that expired as it was made would be a silent no-op."""
    if value is not None and value <= timezone.now():
        raise ValueError("give a moment in the future")
    return value


# An answer's or a rule's `expiresAt`: an ISO datetime with its offset, still ahead.
RememberedUntil = Annotated[AwareDatetime | None, AfterValidator(in_the_future)]


Operator = Literal["equals", "not_equals", "lt", "lte", "gt", "gte", "in", "not_in"]


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid")
    argument: str
    operator: Operator
    value: Any


def arguments_hash(arguments: dict[str, Any]) -> str:
    """A stable hash of a call's arguments (key order and whitespace do not matter)."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class _Undecidable(Exception):
    pass


def _json_kind(value: Any) -> str:
    """The JSON type of a value: Python would compare True with 1 and find "a" in "cat"; JSON does not."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _holds(condition: Condition, arguments: dict[str, Any]) -> bool:
    """Whether the condition holds; a missing argument or a type mismatch is undecidable."""
    if condition.argument not in arguments:
        raise _Undecidable
    actual, expected = arguments[condition.argument], condition.value
    kind = _json_kind(actual)
    if condition.operator in ("in", "not_in"):
        if not isinstance(expected, list) or any(_json_kind(item) != kind for item in expected):
            raise _Undecidable
        found = actual in expected
        return found if condition.operator == "in" else not found
    if _json_kind(expected) != kind:
        raise _Undecidable
    match condition.operator:
        case "equals":
            return bool(actual == expected)
        case "not_equals":
            return bool(actual != expected)
    if kind not in ("number", "string"):
        raise _Undecidable
    match condition.operator:
        case "lt":
            return bool(actual < expected)
        case "lte":
            return bool(actual <= expected)
        case "gt":
            return bool(actual > expected)
        case _:
            return bool(actual >= expected)


def rule_matches(arguments_digest: str, conditions: list[dict[str, Any]], arguments: dict[str, Any]) -> bool:
    """All of a rule's narrowing must hold; a condition that cannot be evaluated means "ask"."""
    if arguments_digest and arguments_digest != arguments_hash(arguments):
        return False
    try:
        return all(_holds(Condition.model_validate(c), arguments) for c in conditions)
    except _Undecidable:
        return False


def rule_versions(rule_ids: Iterable[str]) -> dict[str, int]:
    """The version each of the rules is at now (the receipts of the calls they decided name it)."""
    ids = set(rule_ids)
    if not ids:
        return {}
    return {str(pk): version for pk, version in Rule.objects.filter(id__in=ids).values_list("id", "version")}


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


def rules_in_force(agent: Agent, session: Session | None) -> QuerySet[Rule]:
    """The rules a call of `agent` in `session` may be approved by: neither revoked nor expired, and remembered
    "always" or in this very session (a sessionless turn: "always" ones only)."""
    scope = Q(session__isnull=True) | Q(session=session) if session is not None else Q(session__isnull=True)
    unexpired = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    return Rule.objects.filter(scope, unexpired, agent=agent, revoked_at__isnull=True)


def first_matching(rules: Iterable[Any], tool_name: str, arguments: dict[str, Any]) -> Any | None:
    """The first active rule (objects with tool_name, arguments_hash, conditions) that approves the call."""
    for rule in rules:
        if rule.tool_name == tool_name and rule_matches(rule.arguments_hash, rule.conditions, arguments):
            return rule
    return None


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
            if len({_json_kind(item) for item in value}) > 1:
                raise ValueError("the values of the list must all be of one JSON type")
        elif operator in _COMPARISONS and _json_kind(value) not in ("number", "string"):
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
    (any name starting with `<toolPrefix>_` when it sets a prefix). One that asks "always" wins."""
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


def refusal(definition: DefinitionContent, wanted: RuleIn) -> RuleRefused | None:
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
