"""Every request kind has every piece a page, the inbox, an external agent or a receipt reads of it
(docs/architecture.md, "A new request kind"): a kind without one fails here, not on the first card of that kind.
Where a piece is optional, the test names the kinds that have it on purpose."""

import json
import uuid
from typing import Any, get_args

import pytest
from django.template import TemplateDoesNotExist
from django.template.loader import get_template
from django.utils import timezone

from agents.models import AgentVersion, Run
from approvals.audit_entries import DecisionFilter
from approvals.external_wire import OpenKind, RequestRefused, decision
from approvals.kinds import KINDS, Kind
from approvals.kinds.answer_form import AnswerForm
from approvals.models import PendingRequest, RequestStatus
from approvals.receipts import result_kind
from approvals.responses import Response

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
    assert issubclass(kind.form, AnswerForm)
    assert [other.form for other in KINDS.values()].count(kind.form) == 1, "one form per kind"


# The kinds an external agent may open (SPEC section 12): each says its stored fields (`Kind.external_fields`).
OPENED_OUTSIDE = {"approval", "question", "input", "plan"}
# The kinds whose request holds a tool call until a yes (`Kind.gates_call`): policies, rules and modes decide an
# external agent's unasked, and it reports the approved call's outcome.
GATING = {"approval"}
# The kinds whose answer is more than "answered" in a word (`Kind.verb`): approved or denied.
SAY_YES_OR_NO = {"approval"}


def _overrides(kind: Kind, piece: str) -> bool:
    return getattr(type(kind), piece) is not getattr(Kind, piece)


def test_it_opens_outside_the_kinds_the_wire_takes() -> None:
    assert set(get_args(OpenKind)) == OPENED_OUTSIDE


@pytest.mark.parametrize("name", list(KINDS))
def test_it_says_whether_an_external_agent_opens_it(name: str) -> None:
    kind = KINDS[name]
    assert _overrides(kind, "external_fields") == (name in OPENED_OUTSIDE)
    if name not in OPENED_OUTSIDE:
        with pytest.raises(RequestRefused) as refused:
            kind.external_fields(None, None, None)  # type: ignore[arg-type]
        assert (refused.value.status, refused.value.errors) == (
            400,
            {"kind": f"an external agent cannot open a request of kind {name}"},
        )


@pytest.mark.parametrize("name", list(KINDS))
def test_it_says_whether_it_gates_a_call_and_how_its_answer_is_said(name: str) -> None:
    kind = KINDS[name]
    assert kind.gates_call == (name in GATING)
    assert _overrides(kind, "verb") == (name in SAY_YES_OR_NO)
    said = {kind.verb({"approved": True}), kind.verb({"approved": False})}
    assert said == ({"approved", "denied"} if name in SAY_YES_OR_NO else {"answered"})


# What an answer of each kind means on its receipt and in the decision its agent reads: said below the kinds
# (`approvals.receipts.result_kind`, `approvals.external_wire.decision`: the decisions' door and the long polls'
# wake sit under `approvals.kinds`), so a new kind fails here until it says which it is, and there if none.
MEANS: dict[str, tuple[dict[str, Any], str, bool]] = {
    "approval": ({"approved": True, "reason": "fine"}, "approved", True),
    "plan": ({"approved": False, "text": "Fewer steps"}, "denied-interactively-by-user", False),
    "continuation": ({"approved": True}, "approved", True),
    "input": ({"action": "decline", "content": None}, "decline", False),
    "question": ({"text": "Monday"}, "answered", True),
    "client_tool": ({"outcome": "completed", "result": 4}, "answered", False),
}


@pytest.mark.parametrize("name", list(KINDS))
def test_its_answer_means_one_thing_on_its_receipt_and_to_its_agent(name: str) -> None:
    assert name in MEANS, f"say what an answer of {name} means on its receipt (approvals.receipts.result_kind)"
    answer, result, approved = MEANS[name]
    assert result_kind(name, RequestStatus.ANSWERED, answer) == result
    now = timezone.now()
    pending = PendingRequest(kind=name, answer=answer, status=RequestStatus.ANSWERED, opened_at=now, answered_at=now)
    pending.receipt_id = None  # as `with_receipt_ids` reads it: no query
    decided = decision(pending)
    assert decided is not None
    assert (decided["result"]["kind"], decided["approved"]) == (result, approved)


# How an AG-UI client answers each kind: through an interrupt (`Kind.interrupt_reason`, with `interrupt_message` when
# the request carries no message), or, a frontend tool's call, by a tool message (no reason). Every kind is one.
INTERRUPTS = {"approval", "question", "input", "plan", "continuation"}
TOOL_MESSAGES = {"client_tool"}
# The kinds a resume entry's `status: "cancelled"` answers with a no (`Kind.cancel_answer`); the others refuse it.
CANCELLABLE = {"approval", "input", "plan", "continuation"}


@pytest.mark.parametrize("name", list(KINDS))
def test_it_says_how_an_agui_client_answers_it(name: str) -> None:
    kind = KINDS[name]
    assert name in INTERRUPTS ^ TOOL_MESSAGES, f"say whether an AG-UI client answers {name} by an interrupt"
    assert (kind.interrupt_reason is not None) == (name in INTERRUPTS)
    assert bool(kind.interrupt_message) == (name in INTERRUPTS)
    assert "{" not in kind.interrupt_message.format(agent="helper", tool="send_email")
    assert (kind.cancel_answer is not None) == (name in CANCELLABLE)
    if kind.cancel_answer is not None:
        cancelled = Response.model_validate({**kind.cancel_answer, "requestId": str(uuid.uuid4())})
        assert cancelled.model_fields_set - {"request_id"} <= kind.fields, "a cancel the kind takes"


# What each kind's AG-UI interrupt shows of its request besides its kind, run and tool (`Kind.interrupt_facts`), and
# the respond fields its `responseSchema` narrows to the request (`Kind.narrowed`). A tool message's kind has neither.
INTERRUPT_SHOWS: dict[str, tuple[set[str], set[str]]] = {
    "approval": ({"arguments"}, {"overrideArguments"}),
    "plan": ({"arguments"}, set()),
    "question": ({"choices"}, {"text"}),
    "input": (set(), {"content"}),
    "continuation": (set(), set()),
}
# The kinds about no call of the model's (`Kind.about_call`): their interrupt has no `toolCallId`.
ABOUT_NO_CALL = {"continuation"}


@pytest.mark.parametrize("name", list(KINDS))
def test_its_interrupt_shows_what_this_request_asks(name: str) -> None:
    kind = KINDS[name]
    assert (name in INTERRUPT_SHOWS) == (name in INTERRUPTS), f"say what the AG-UI interrupt of {name} shows"
    facts, narrowed = INTERRUPT_SHOWS.get(name, (set(), set()))
    assert _overrides(kind, "interrupt_facts") == bool(facts)
    assert _overrides(kind, "narrowed") == bool(narrowed)
    assert kind.about_call == (name not in ABOUT_NO_CALL)
    version = AgentVersion(content={"name": "helper", "instructions": "Help.", "tools": [{"name": "send_email"}]})
    pending = PendingRequest(
        kind=name,
        run=Run(version=version),
        tool_name="send_email",
        arguments={"to": "a@example.com", "choices": ["red", "blue"]},
        requested_schema={"type": "object", "properties": {"day": {"type": "string"}}},
    )
    assert set(kind.interrupt_facts(pending)) == facts
    properties: dict[str, Any] = {Response.model_fields[field].alias or field: {} for field in kind.fields}
    given = kind.narrowed(pending, properties)
    assert list(given) == list(properties), "narrowed in place: no field added, none moved"
    assert {field for field in properties if given[field] != properties[field]} == narrowed


def test_its_interrupt_reasons_are_the_protocols() -> None:
    reasons = [kind.interrupt_reason for kind in KINDS.values() if kind.interrupt_reason is not None]
    assert sorted(reasons) == ["continuation", "input", "plan", "question", "tool_approval"]


# The kinds one yes or no answers (`Kind.selectable`): a batch, an escalation's step and a Slack click.
YES_OR_NO = {"approval"}
# The kinds whose card may offer "don't ask again" (`Kind.remembers`), with the partials its choice posts back.
REMEMBERS = {"approval"}


@pytest.mark.parametrize("name", list(KINDS))
def test_it_says_whether_a_yes_or_no_answers_it_and_whether_it_remembers(name: str) -> None:
    kind = KINDS[name]
    assert kind.selectable == (name in YES_OR_NO)
    if kind.selectable:
        assert {"approved", "reason"} <= kind.fields, "what a batch, an escalation and a Slack click send"
    assert _overrides(kind, "remembers") == (name in REMEMBERS)
    if name not in REMEMBERS:
        assert not kind.remembers(PendingRequest(kind=name))
    for part in ("remember", "buttons") if name in REMEMBERS else ():
        get_template(f"{kind.template}#{part}")


# The audit's decision filters that list answers, by the kind whose answers each lists (`Kind.audit_filters`).
AUDIT_FILTERS = {"approval": {"approved", "denied"}, "input": {"input"}, "client_tool": {"tool_result"}}


@pytest.mark.parametrize("name", list(KINDS))
def test_it_names_the_audit_filters_that_list_its_answers(name: str) -> None:
    assert set(KINDS[name].audit_filters) == AUDIT_FILTERS.get(name, set())
    assert set(KINDS[name].audit_filters) <= set(DecisionFilter.values)


def test_each_audit_filter_lists_one_kind() -> None:
    named = [decision for kind in KINDS.values() for decision in kind.audit_filters]
    assert len(named) == len(set(named))
