"""Every request kind has every piece a page or the inbox reads of it (docs/architecture.md, "A new request kind"):
a kind without one fails here, not on the first card of that kind."""

import json

import pytest
from django.template import TemplateDoesNotExist
from django.template.loader import get_template

from approvals.forms import AnswerForm
from approvals.kinds import KINDS, Kind

KEYS = {"a", "d", "e", "needs", "enter"}


@pytest.mark.parametrize("name", list(KINDS))
def test_it_has_every_partial_of_its_template(name: str) -> None:
    kind = KINDS[name]
    missing = []
    for part in Kind.PARTIALS:
        try:
            get_template(f"{kind.template}#{part}")
        except TemplateDoesNotExist:
            missing.append(part)
    assert missing == [], f"{kind.template} lacks the partials {missing}"


@pytest.mark.parametrize("name", list(KINDS))
def test_it_declares_the_inbox_keys(name: str) -> None:
    keys = KINDS[name].keys
    assert keys.get("a"), "`a` answers every kind"
    assert set(keys) <= KEYS
    assert json.loads(KINDS[name].keys_json) == keys
    for field in keys.get("enter", {}):
        assert field in (keys.get("d"), keys.get("e")), f"Enter in {field!r}, a field no key reaches"


@pytest.mark.parametrize("name", list(KINDS))
def test_it_has_a_label_an_ask_and_a_form(name: str) -> None:
    kind = KINDS[name]
    assert kind.label and kind.asks and kind.takes and kind.decisions
    assert [form.kind for form in AnswerForm.__subclasses__()].count(kind.name) == 1
