"""The request kinds are named once (agents/request_kinds.py); everything that lists them reads that list or
answers for every name in it: the stored choices, the registry, the forms, the card partials, a definition's
routing, the engine's calls, the audit's labels."""

from pathlib import Path
from typing import get_args, get_type_hints

from django.conf import settings
from django.utils.html import escape

from agents.definitions import KindRouting
from agents.engine import PendingCall
from agents.request_kinds import REQUEST_KINDS, RequestKind, kind_choices
from approvals.audit_entries import DECISION_LABELS
from approvals.kinds import KINDS
from approvals.models import PendingRequest


def test_every_list_of_kinds_is_the_one_list():
    assert tuple(RequestKind) == REQUEST_KINDS
    assert PendingRequest._meta.get_field("kind").choices == kind_choices()
    assert sorted(KINDS) == sorted(REQUEST_KINDS)
    assert [kind.waits for kind in KINDS.values()] == sorted({kind.waits for kind in KINDS.values()})
    assert KindRouting.model_json_schema()["properties"]["kind"]["enum"] == list(REQUEST_KINDS)
    assert get_args(get_type_hints(PendingCall)["kind"]) == REQUEST_KINDS


def test_every_kind_has_its_card_partial_and_labels_its_decisions():
    partials = Path(settings.BASE_DIR) / "templates" / "approvals" / "kinds"
    for name, kind in KINDS.items():
        assert kind.name == name
        assert (partials / f"{name}.html").is_file(), name
        assert kind.decisions and all(DECISION_LABELS[decision] == label for decision, label in kind.decisions.items())


def test_every_page_calls_a_kind_by_its_one_name(admin):
    """The card's pill, the Kind filter and the run page read the kind's label from one place (issue 31:
    a question was "Awaiting Input" on one page and "Question" on another)."""
    names = {kind.name: kind.label for kind in KINDS.values()}
    assert names == dict(kind_choices())
    assert names["question"] == "Question" and names["continuation"] == "Go on?"
    inbox = admin.client.get("/inbox/").content.decode()
    for value, label in kind_choices():
        assert f'<option value="{value}">{escape(label)}</option>' in inbox
