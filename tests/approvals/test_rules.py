"""When a remembered rule approves a call: the arguments hash and the argument conditions."""

from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from agents.rule_matching import arguments_hash, first_matching, rule_matches

CALL = {"to": "ada@example.com", "amount": 40, "tags": ["a", "b"], "urgent": False}


@dataclass
class FakeRule:
    tool_name: str
    arguments_hash: str = ""
    conditions: list[dict[str, Any]] = field(default_factory=list)


def condition(argument: str, operator: str, value: Any) -> dict[str, Any]:
    return {"argument": argument, "operator": operator, "value": value}


def test_it_hashes_arguments_regardless_of_key_order():
    assert arguments_hash({"a": 1, "b": [1, 2]}) == arguments_hash({"b": [1, 2], "a": 1})
    assert arguments_hash({"a": 1}) != arguments_hash({"a": 2})
    assert arguments_hash({"a": [1, 2]}) != arguments_hash({"a": [2, 1]})
    assert arguments_hash({"a": "ü"}) == arguments_hash({"a": "\u00fc"})
    assert len(arguments_hash({})) == 64


def test_it_matches_any_call_without_narrowing():
    assert rule_matches("", [], CALL)
    assert rule_matches("", [], {})


def test_it_matches_only_the_hashed_arguments():
    digest = arguments_hash(CALL)

    assert rule_matches(digest, [], dict(reversed(list(CALL.items()))))
    assert not rule_matches(digest, [], {**CALL, "amount": 41})
    assert not rule_matches(digest, [], {**CALL, "extra": None})


@pytest.mark.parametrize(
    ("operator", "value", "holds"),
    [
        ("equals", 40, True),
        ("equals", 41, False),
        ("not_equals", 41, True),
        ("not_equals", 40, False),
        ("lt", 41, True),
        ("lt", 40, False),
        ("lte", 40, True),
        ("lte", 39, False),
        ("gt", 39, True),
        ("gt", 40, False),
        ("gte", 40, True),
        ("gte", 41, False),
        ("in", [10, 40], True),
        ("in", [10, 20], False),
        ("not_in", [10, 20], True),
        ("not_in", [10, 40], False),
    ],
)
def test_it_evaluates_each_operator(operator, value, holds):
    assert rule_matches("", [condition("amount", operator, value)], CALL) is holds


def test_it_treats_whole_and_decimal_numbers_alike():
    assert rule_matches("", [condition("amount", "equals", 40.0)], CALL)
    assert rule_matches("", [condition("amount", "in", [40.0])], CALL)
    assert rule_matches("", [condition("amount", "lt", 40.5)], CALL)


def test_it_compares_booleans_and_lists_for_equality():
    assert rule_matches("", [condition("urgent", "equals", False)], CALL)
    assert rule_matches("", [condition("urgent", "in", [False])], CALL)
    assert rule_matches("", [condition("tags", "equals", ["a", "b"])], CALL)
    assert not rule_matches("", [condition("tags", "equals", ["b", "a"])], CALL)


def test_it_compares_text_too():
    assert rule_matches("", [condition("to", "equals", "ada@example.com")], CALL)
    assert rule_matches("", [condition("to", "lt", "bob")], CALL)
    assert rule_matches("", [condition("to", "in", ["ada@example.com", "bob@example.com"])], CALL)
    assert not rule_matches("", [condition("to", "not_in", ["ada@example.com"])], CALL)


def test_it_needs_every_condition_to_hold():
    low = condition("amount", "lt", 100)
    to_ada = condition("to", "equals", "ada@example.com")
    to_bob = condition("to", "equals", "bob@example.com")

    assert rule_matches("", [low, to_ada], CALL)
    assert not rule_matches("", [low, to_bob], CALL)
    assert not rule_matches("", [to_bob, low], CALL)


def test_it_needs_the_hash_and_the_conditions_together():
    digest = arguments_hash(CALL)

    assert rule_matches(digest, [condition("amount", "lt", 100)], CALL)
    assert not rule_matches(digest, [condition("amount", "gt", 100)], CALL)


@pytest.mark.parametrize(
    "narrowing",
    [
        pytest.param(condition("missing", "equals", None), id="missing argument"),
        pytest.param(condition("missing", "not_equals", 1), id="missing argument, not_equals"),
        pytest.param(condition("missing", "not_in", [1]), id="missing argument, not_in"),
        pytest.param(condition("amount", "lt", "100"), id="number against text"),
        pytest.param(condition("to", "gte", 3), id="text against number"),
        pytest.param(condition("amount", "in", 40), id="in against a non-list"),
        pytest.param(condition("amount", "not_in", 5), id="not_in against a non-list"),
        pytest.param(condition("tags", "lt", None), id="list against null"),
        pytest.param(condition("amount", "not_equals", "41"), id="not_equals, number against text"),
        pytest.param(condition("amount", "equals", "40"), id="equals, number against text"),
        pytest.param(condition("urgent", "equals", 0), id="boolean against number"),
        pytest.param(condition("urgent", "lt", 1), id="boolean ordered against number"),
        pytest.param(condition("urgent", "in", [0, 1]), id="boolean in numbers"),
        pytest.param(condition("amount", "not_in", ["40"]), id="number not_in texts"),
        pytest.param(condition("to", "in", "ada@example.com, bob@example.com"), id="in against text"),
        pytest.param(condition("to", "not_in", "eve@example.com"), id="not_in against text"),
        pytest.param(condition("tags", "gt", ["a"]), id="lists ordered"),
    ],
)
def test_it_asks_when_a_condition_cannot_be_evaluated(narrowing):
    assert not rule_matches("", [narrowing], CALL)
    assert not rule_matches("", [condition("amount", "equals", 40), narrowing], CALL)


def test_it_refuses_an_unknown_operator():
    with pytest.raises(ValidationError):
        rule_matches("", [condition("amount", "approximately", 40)], CALL)


def test_it_finds_the_first_rule_for_the_tool_that_matches():
    other_tool = FakeRule("get_time")
    narrow = FakeRule("send_email", conditions=[condition("amount", "gt", 100)])
    broad = FakeRule("send_email")
    also = FakeRule("send_email")

    assert first_matching([other_tool, narrow, broad, also], "send_email", CALL) is broad
    assert first_matching([other_tool, narrow], "send_email", CALL) is None
    assert first_matching([], "send_email", CALL) is None
