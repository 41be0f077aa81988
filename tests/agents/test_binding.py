"""What a run binds from its request: parameter values (defaults included), `{{name}}` substitution and
the culture's instructions; and that a continuation repeats them."""

import pytest

from agents.binding import BindingError, bind_parameters, render_instructions, resolve_culture
from agents.definitions import DefinitionContent
from agents.models import Run
from tests.helpers import (
    ASSISTANT,
    EMAIL,
    call_line,
    run,
    run_ok,
    stored_events,
)

CONTENT = DefinitionContent.model_validate(ASSISTANT)


# --- bind_parameters ----------------------------------------------------------------------------


def test_it_binds_defaults_for_values_not_given():
    assert bind_parameters(CONTENT, {}) == {"team": "ops", "signature": "Airlock", "urgent": False}


def test_it_binds_given_values_over_defaults():
    bound = bind_parameters(CONTENT, {"team": "core", "budget": 12.5, "urgent": True})

    assert bound == {"team": "core", "signature": "Airlock", "budget": 12.5, "urgent": True}


def test_it_binds_the_default_for_a_null_value():
    bound = bind_parameters(CONTENT, {"team": None, "budget": None})

    assert bound == {"team": "ops", "signature": "Airlock", "urgent": False}


@pytest.mark.parametrize(
    ("values", "code"),
    [
        ({"teem": "core"}, "unknown_parameter"),
        ({"budget": "12"}, "invalid_parameter"),
        ({"budget": True}, "invalid_parameter"),
        ({"urgent": 1}, "invalid_parameter"),
        ({"team": 3}, "invalid_parameter"),
        ({"signature": ["x"]}, "invalid_parameter"),
    ],
)
def test_it_refuses_values_that_do_not_fit(values, code):
    with pytest.raises(BindingError) as raised:
        bind_parameters(CONTENT, values)

    assert raised.value.code == code


def test_it_refuses_a_required_parameter_without_value_or_default():
    content = DefinitionContent.model_validate(
        {
            "name": "strict",
            "parameters": [{"name": "team", "required": True}, {"name": "lead", "required": True, "default": "ada"}],
        }
    )

    with pytest.raises(BindingError) as raised:
        bind_parameters(content, {})

    assert raised.value.code == "missing_parameter"
    assert "team" in raised.value.detail
    assert bind_parameters(content, {"team": "core"}) == {"team": "core", "lead": "ada"}


# --- render_instructions ------------------------------------------------------------------------


def test_it_fills_placeholders():
    text = render_instructions(
        "Help {{team}} ({{ team }}), budget {{budget}}, urgent {{urgent}}.",
        {
            "team": "core",
            "budget": 12.0,
            "urgent": True,
        },
    )

    assert text == "Help core (core), budget 12, urgent true."


def test_it_substitutes_in_one_pass():
    text = render_instructions("{{a}} and {{b}}", {"a": "{{b}}", "b": "{{a}}"})

    assert text == "{{b}} and {{a}}"


def test_it_leaves_a_placeholder_without_a_value_as_written():
    assert render_instructions("Budget: {{budget}}; {{ not a placeholder }}", {}) == (
        "Budget: {{budget}}; {{ not a placeholder }}"
    )


# --- resolve_culture ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("culture", "instructions"),
    [
        ("tr-TR", "Türkiye: {{team}} ekibi."),
        ("tr-tr", "Türkiye: {{team}} ekibi."),
        ("tr", "Merhaba {{team}} ekibi."),
        ("tr-CY", "Merhaba {{team}} ekibi."),
        ("de-DE", ASSISTANT["instructions"]),
        ("", ASSISTANT["instructions"]),
        (None, ASSISTANT["instructions"]),
    ],
)
def test_it_resolves_the_culture_exact_then_parent_then_default(culture, instructions):
    assert resolve_culture(CONTENT, culture) == instructions


def test_it_walks_up_several_parents():
    content = DefinitionContent.model_validate(
        {"name": "x", "instructions": "default", "instructionsByCulture": {"zh": "中文"}}
    )

    assert resolve_culture(content, "zh-Hant-TW") == "中文"


# --- through the API ----------------------------------------------------------------------------


def test_it_records_the_bound_values_on_the_run(operator, assistant):
    result = run_ok(operator, {"message": "echo instructions", "parameters": {"team": "core", "budget": 3}})

    assert result["parameters"] == {"team": "core", "signature": "Airlock", "budget": 3, "urgent": False}
    assert result["output"] == "You help the core team. Sign as Airlock."
    assert Run.objects.get().parameters == result["parameters"]
    [started] = [e.data for e in stored_events(result["runId"]) if e.type == "run.started"]
    assert started["parameters"] == result["parameters"]


def test_it_binds_defaults_when_no_values_are_sent(operator, assistant):
    result = run_ok(operator, {"message": "echo instructions"})

    assert result["parameters"] == {"team": "ops", "signature": "Airlock", "urgent": False}
    assert result["output"] == "You help the ops team. Sign as Airlock."


def test_it_does_not_substitute_a_value_again(operator, assistant):
    result = run_ok(operator, {"message": "echo instructions", "parameters": {"team": "{{signature}}"}})

    assert result["output"] == "You help the {{signature}} team. Sign as Airlock."


@pytest.mark.parametrize(
    ("culture", "output"),
    [
        ("tr-TR", "Türkiye: ops ekibi."),
        ("tr", "Merhaba ops ekibi."),
        ("tr-CY", "Merhaba ops ekibi."),
        ("de", "You help the ops team. Sign as Airlock."),
    ],
)
def test_it_answers_with_the_instructions_of_the_culture(operator, assistant, culture, output):
    result = run_ok(operator, {"message": "echo instructions", "culture": culture})

    assert result["output"] == output
    assert Run.objects.get().culture == culture


def test_it_ignores_accept_language(operator, assistant):
    response = run(operator, {"message": "echo instructions"}, HTTP_ACCEPT_LANGUAGE="tr-TR,tr;q=0.9")

    assert response.json()["output"] == "You help the ops team. Sign as Airlock."
    assert Run.objects.get().culture == ""


def test_it_repeats_the_bound_values_and_culture_in_a_continuation(operator, assistant):
    first = run_ok(
        operator,
        {
            "message": call_line("send_email", EMAIL),
            "sessionId": "s1",
            "parameters": {"team": "core"},
            "culture": "tr-TR",
        },
    )
    approval = {"requestId": first["pendingRequests"][0]["requestId"], "approved": True}

    continued = run_ok(operator, {"sessionId": "s1", "approvals": [approval]})
    later = run_ok(operator, {"sessionId": "s1", "message": "echo instructions"})

    assert (
        continued["parameters"]
        == first["parameters"]
        == {
            "team": "core",
            "signature": "Airlock",
            "urgent": False,
        }
    )
    assert later["parameters"] == first["parameters"]
    assert later["output"] == "Türkiye: core ekibi."
    assert set(Run.objects.values_list("culture", flat=True)) == {"tr-TR"}
    [started] = [e.data for e in stored_events(continued["runId"]) if e.type == "run.started"]
    assert (started["culture"], started["parameters"]) == ("tr-TR", first["parameters"])


def test_it_binds_new_values_when_a_later_turn_sends_them(operator, assistant):
    run_ok(operator, {"sessionId": "s1", "message": "hi", "parameters": {"team": "core"}, "culture": "tr"})

    result = run_ok(operator, {"sessionId": "s1", "message": "echo instructions", "parameters": {"team": "web"}})

    assert result["output"] == "Merhaba web ekibi."
    assert result["parameters"]["team"] == "web"
