"""What a remembered rule matches (SPEC section 13), without the database: the arguments' hash, the conditions and
how they hold, the first rule of a list that approves a call; and how an answer says `remember`. The engine's gate
matches the rules a turn is given with `first_matching`; `approvals.remembered_rules` keeps the rules' table and
forms."""

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Literal

from django.utils import timezone
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic.json_schema import WithJsonSchema

from console.moments import Moment

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


# An answer's or a rule's `expiresAt`: an ISO datetime with its offset, one the database stores, still ahead.
RememberedUntil = Annotated[Moment | None, AfterValidator(in_the_future)]


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


def json_kind(value: Any) -> str:
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
    kind = json_kind(actual)
    if condition.operator in ("in", "not_in"):
        if not isinstance(expected, list) or any(json_kind(item) != kind for item in expected):
            raise _Undecidable
        found = actual in expected
        return found if condition.operator == "in" else not found
    if json_kind(expected) != kind:
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


def first_matching(rules: Iterable[Any], tool_name: str, arguments: dict[str, Any]) -> Any | None:
    """The first active rule (objects with tool_name, arguments_hash, conditions) that approves the call."""
    for rule in rules:
        if rule.tool_name == tool_name and rule_matches(rule.arguments_hash, rule.conditions, arguments):
            return rule
    return None
