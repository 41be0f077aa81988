"""The request kinds a person answers in words or with a yes (SPEC section 9): `question` (`ask_user`),
`plan` (`propose_plan`) and `continuation` (a run at its `maxModelCalls`), answered through the respond
API, the next turn's `answers` and the inbox; each refusal changes nothing."""

import re
from typing import Any

import pytest

from agents.models import Run, RunStatus
from approvals.kinds.input import form_problems
from approvals.models import PendingRequest, RequestStatus
from tests.helpers import assert_problem, call_line, make_agent, run, run_ok, run_queued, snapshot, stored_events

TOOLS = [{"name": "ask_user"}, {"name": "propose_plan"}, {"name": "get_time"}]
COLOR = call_line("ask_user", {"question": "Which colour?", "choices": ["red", "blue"]})
FREE = call_line("ask_user", {"question": "What is your name?"})
PLAN = call_line("propose_plan", {"steps": ["Read the logs", "Restart the worker"]})


@pytest.fixture
def agent(admin) -> Any:
    return make_agent(admin, tools=TOOLS, maxModelCalls=2)


def ask(persona: Any, message: str, session: str = "s1") -> dict[str, Any]:
    return run_ok(persona, {"message": message, "sessionId": session})


def respond(persona: Any, asked: dict[str, Any], **answer: Any) -> dict[str, Any]:
    body = {"requestId": asked["pendingRequests"][0]["requestId"], **answer}
    response = persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)
    assert response.status_code == 200, response.content
    return response.json()


def events(run_id: Any, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in stored_events(str(run_id)) if e.type == kind]


# ---- question ---------------------------------------------------------------------------------------------


def test_a_question_waits_for_a_person_and_the_model_reads_the_choice(agent, operator):
    asked = ask(operator, COLOR)

    assert asked["status"] == "awaiting_input"
    [request] = asked["pendingRequests"]
    assert (request["kind"], request["toolName"], request["message"]) == ("question", "ask_user", "Which colour?")
    assert request["arguments"]["choices"] == ["red", "blue"]
    # SPEC section 9: the question, its choices and whether free text is allowed, on the request itself.
    assert (request["question"], request["choices"], request["allowFreeform"]) == (
        "Which colour?",
        ["red", "blue"],
        False,
    )
    assert events(asked["runId"], "user_input.requested")[0]["requestId"] == request["requestId"]

    outcome = respond(operator, asked, text="blue")
    continued = run_queued(outcome["continuationRunId"])

    assert (continued.status, continued.output) == (RunStatus.COMPLETED, "ask_user: blue")
    [completed] = events(continued.id, "user_input.completed")
    assert completed == {"requestId": request["requestId"], "answer": "blue", "wasFreeform": False}
    [answered] = events(continued.id, "request.answered")
    assert (answered["kind"], answered["answeredBy"]) == ("question", "otto")


def test_free_text_answers_a_question_without_choices(agent, operator):
    asked = ask(operator, FREE)
    continued = run_queued(respond(operator, asked, text="Ada Lovelace")["continuationRunId"])
    assert continued.output == "ask_user: Ada Lovelace"


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ({"text": "green"}, "invalid_response"),  # not a choice, and free text is not allowed
        ({"approved": True}, "response_type_mismatch"),
        ({"json": 3}, "response_type_mismatch"),
        ({"text": "   "}, "invalid_response"),
    ],
)
def test_a_question_refuses_what_does_not_answer_it(agent, operator, answer, status):
    asked = ask(operator, COLOR)
    before = snapshot()

    assert respond(operator, asked, **answer)["status"] == status
    assert snapshot() == before


def test_a_question_takes_its_answer_as_json_and_on_the_next_turn(agent, operator):
    asked = ask(operator, COLOR)
    request_id = asked["pendingRequests"][0]["requestId"]

    result = run_ok(operator, {"sessionId": "s1", "answers": [{"requestId": request_id, "json": "red"}]})

    assert (result["status"], result["output"]) == ("completed", "ask_user: red")


def test_the_next_turn_refuses_an_answer_of_the_wrong_kind(agent, operator):
    asked = ask(operator, COLOR)
    request_id = asked["pendingRequests"][0]["requestId"]
    before = snapshot()

    response = run(operator, {"sessionId": "s1", "answers": [{"requestId": request_id, "approved": True}]})

    assert_problem(response, 400, "response_type_mismatch")
    assert snapshot() == before


def test_the_inbox_answers_a_question_with_a_choice_button(agent, operator):
    asked = ask(operator, COLOR)
    request_id = asked["pendingRequests"][0]["requestId"]
    page = operator.client.get("/inbox/").content.decode()
    assert 'name="choice" value="red"' in page and 'name="choice" value="blue"' in page

    response = operator.client.post(f"/inbox/{request_id}/answer/", {"choice": "red"})

    assert response.status_code in (200, 302)
    assert PendingRequest.objects.get(id=request_id).answer["text"] == "red"


@pytest.mark.parametrize(
    ("arguments", "choices", "freeform"),
    [
        ({"choices": ["red", "blue"]}, ["red", "blue"], False),
        ({"choices": ["red", "blue"], "allow_freeform": True}, ["red", "blue"], True),
        ({}, [], True),
    ],
)
def test_a_question_shows_its_choices_on_the_request_the_card_and_the_trial_turn(
    agent, operator, arguments, choices, freeform
):
    """SPEC section 9: `pendingRequests[]` of kind question carries `question`, `choices` and `allowFreeform`; the
    inbox card and the trial page's widget offer exactly those."""
    asked = ask(operator, call_line("ask_user", {"question": "Which colour?", **arguments}))
    [request] = asked["pendingRequests"]
    assert (request["question"], request["choices"], request["allowFreeform"]) == ("Which colour?", choices, freeform)
    assert operator.api("GET", f"/api/requests/{request['requestId']}").json()["choices"] == choices

    for page in (
        operator.client.get("/inbox/").content.decode(),
        operator.client.get(f"/trial/turns/{asked['runId']}/").content.decode(),
    ):
        assert [c for c in ("red", "blue") if f'name="choice" value="{c}"' in page] == choices
        assert (f'id="text-{request["requestId"]}"' in page) is freeform


# ---- plan ---------------------------------------------------------------------------------------------------


def test_an_approved_plan_goes_ahead(agent, operator):
    asked = ask(operator, PLAN)

    assert asked["status"] == "awaiting_approval"
    [request] = asked["pendingRequests"]
    assert request["kind"] == "plan" and request["arguments"]["steps"] == ["Read the logs", "Restart the worker"]
    continued = run_queued(respond(operator, asked, approved=True)["continuationRunId"])
    assert continued.output == "propose_plan: approved"


def test_a_plan_sent_back_carries_the_guidance(agent, operator):
    asked = ask(operator, PLAN)
    continued = run_queued(respond(operator, asked, approved=False, text="Check the disk first")["continuationRunId"])
    assert continued.output == "propose_plan: revise: Check the disk first"
    [completed] = events(continued.id, "exit_plan_mode.completed")
    assert (completed["approved"], completed["feedback"]) == (False, "Check the disk first")
    assert "selectedAction" not in completed  # sent back: no action taken


def test_a_plan_sent_back_needs_guidance(agent, operator):
    asked = ask(operator, PLAN)
    before = snapshot()
    assert respond(operator, asked, approved=False)["status"] == "invalid_response"
    assert snapshot() == before


def test_the_inbox_says_once_what_a_plan_sent_back_needs(agent, operator):
    asked = ask(operator, PLAN)
    request_id = asked["pendingRequests"][0]["requestId"]
    before = snapshot()

    refused = operator.client.post(f"/inbox/{request_id}/answer/", {"decision": "revise"}, HTTP_HX_REQUEST="true")

    html = refused.content.decode()
    assert html.count("Say what to revise.") == 1
    assert re.search(r'data-error-for="text">Say what to revise.<', html)
    assert re.search(r"data-card-error>Check the highlighted field.<", html)
    assert snapshot() == before


# ---- continuation -------------------------------------------------------------------------------------------


def test_a_run_at_its_model_call_limit_asks_to_go_on(agent, operator):
    # Two model calls allowed: the first asks for get_time, the second for it again, the third would answer.
    asked = ask(operator, call_line("get_time"))
    assert asked["status"] == "completed"  # two calls were enough

    limited = make_agent(operator, name="short", tools=TOOLS, maxModelCalls=1)
    asked = run_ok(operator, {"message": call_line("get_time"), "sessionId": "s2"}, agent=limited.name)

    assert asked["status"] == "awaiting_approval"
    [request] = asked["pendingRequests"]
    assert (request["kind"], request["toolName"]) == ("continuation", None)
    assert request["arguments"] == {"maxModelCalls": 1, "usedModelCalls": 1}
    assert events(asked["runId"], "session_limits_exhausted.requested")

    continued = run_queued(respond(operator, asked, approved=True)["continuationRunId"])

    assert continued.status == RunStatus.COMPLETED
    assert continued.output.startswith("get_time: ")
    [completed] = events(continued.id, "session_limits_exhausted.completed")
    assert completed["response"] == {"action": "add", "additionalAiCredits": 1}


def test_stopping_at_the_limit_ends_the_run_with_what_it_has(admin, operator):
    make_agent(admin, name="short", tools=TOOLS, maxModelCalls=1)
    asked = run_ok(operator, {"message": f"hello\n{call_line('get_time')}", "sessionId": "s2"}, agent="short")

    continued = run_queued(respond(operator, asked, approved=False)["continuationRunId"])

    assert (continued.status, continued.output) == (RunStatus.COMPLETED, "You said: hello")
    again = run_ok(operator, {"message": "next", "sessionId": "s2"}, agent="short")
    assert again["status"] in ("completed", "awaiting_approval")


def test_max_model_calls_is_checked_on_save(admin):
    body = {"name": "bad", "maxModelCalls": 0}
    assert_problem(admin.api("POST", "/api/agents", body), 400, "invalid_request")
    assert not Run.objects.exists()


def test_a_closed_question_tells_the_model_it_was_not_answered(agent, operator):
    asked = ask(operator, COLOR)
    assert operator.api("POST", f"/api/runs/{asked['runId']}/cancel").status_code == 200
    assert PendingRequest.objects.get().status == RequestStatus.CANCELLED
    result = run_ok(operator, {"message": "hello", "sessionId": "s1"})
    assert result["output"] == "ask_user denied: The request was cancelled.\nYou said: hello"


# ---- caps ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "why"),
    [
        ("ask_user", {"question": "q" * 2001}, "String should have at most 2000 characters"),
        ("ask_user", {"question": "Which?", "choices": [str(n) for n in range(101)]}, "at most 100 items"),
        ("ask_user", {"question": "Which?", "choices": ["red", "b" * 501]}, "at most 500 characters"),
        ("propose_plan", {"steps": [f"step {n}" for n in range(101)]}, "at most 100 items"),
        ("propose_plan", {"steps": ["Read the logs", "s" * 2001]}, "at most 2000 characters"),
    ],
)
def test_it_opens_no_request_for_an_oversized_question_or_plan_and_tells_the_model(
    agent, operator, tool, arguments, why
):
    result = ask(operator, call_line(tool, arguments))

    assert result["status"] == "completed", result
    assert result["pendingRequests"] == []
    assert result["output"].startswith(f"{tool} failed:") and why in result["output"], result["output"]
    assert not PendingRequest.objects.exists()


def test_it_asks_a_question_and_a_plan_at_their_caps(agent, operator):
    choices = ["c" * 500] + [str(n) for n in range(99)]
    steps = ["s" * 2000] + [f"step {n}" for n in range(99)]
    asked = ask(operator, call_line("ask_user", {"question": "q" * 2000, "choices": choices}))
    planned = ask(operator, call_line("propose_plan", {"steps": steps}), session="s2")

    assert asked["pendingRequests"][0]["arguments"]["choices"] == choices
    assert planned["pendingRequests"][0]["arguments"]["steps"] == steps


# ---- input (an MCP server's form): its refusal in the form's words ----------------------------------------

MEETING = {
    "type": "object",
    "properties": {"day": {"type": "string"}, "people": {"type": "integer", "title": "Number of people"}},
    "required": ["day", "people"],
}


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ({}, "Day is required. Number of people is required."),
        ({"day": "Friday"}, "Number of people is required."),
        ({"day": "Friday", "people": "many"}, "Number of people: must be a whole number."),
        ({"day": "Friday", "people": 3}, ""),
    ],
)
def test_it_names_the_input_forms_fields_by_their_labels(content, said):
    assert form_problems(MEETING, content) == said


def test_it_keeps_the_schemas_words_for_what_is_no_field():
    assert form_problems(MEETING, ["Friday"]) == "(content): must be an object"
    closed = {**MEETING, "required": [], "additionalProperties": False}
    assert form_problems(closed, {"room": "Blue"}) == "'room' is not a field of this form."
