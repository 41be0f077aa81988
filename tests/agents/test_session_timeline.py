"""A session on the console's pages (SPEC section 9, issue 14 items 2, 3 and 7): the run page shows the session's
turns as a timeline, forks as branches linked both ways; the trial page offers to continue a waiting run on
another version and to answer an earlier turn differently, which forks the session."""

import json
import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.definitions import DefinitionContent
from agents.models import Agent, Checkpoint
from tests.conftest import Persona
from tests.helpers import ASSISTANT, call_line, drain_queued, make_agent, run_ok, run_queued

COLOR = call_line("ask_user", {"question": "Which colour?", "choices": ["red", "blue"]})
NAME = call_line("ask_user", {"question": "What is your name?"})


@pytest.fixture
def asker(admin) -> Agent:
    return make_agent(admin, tools=[*ASSISTANT["tools"], {"name": "ask_user"}])


def ask(persona: Persona, session: str = "s1", message: str = COLOR) -> dict[str, Any]:
    asked = run_ok(persona, {"message": message, "sessionId": session})
    assert asked["status"] == "awaiting_input", asked
    return asked


def respond(persona: Persona, asked: dict[str, Any], index: int = 0, **answer: Any) -> dict[str, Any]:
    body = {"requestId": asked["pendingRequests"][index]["requestId"], **answer}
    response = persona.api("POST", f"/api/runs/{asked['runId']}/responses", body)
    assert response.status_code == 200, response.content
    outcome = response.json()
    assert outcome["status"] == "accepted", outcome
    return outcome


def checkpoint_of(run_id: str) -> Checkpoint:
    return Checkpoint.objects.get(run_id=run_id)


def page(persona: Persona, path: str) -> str:
    response = persona.client.get(path)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def timeline_items(html: str) -> list[str]:
    """The items of the run page's session timeline, oldest first: its turns (each with its events, what it
    asked and its branches) and the gaps between them."""
    found = re.search(r'<ol class="session-runs">(.*)</ol>\s*</section>', html, re.DOTALL)
    assert found, html
    return [item for item in re.split(r'(?=<li class="(?:session-turn|gap)\b)', found.group(1)) if item.strip()]


def turns_of(html: str) -> list[str]:
    """The turns of the run page's session timeline, oldest first."""
    return [item for item in timeline_items(html) if item.startswith('<li class="session-turn')]


@pytest.fixture
def forked(operator, asker) -> dict[str, Any]:
    """Session s1 asks "Which colour?" and goes on with "red"; then the question is answered "blue" at its
    checkpoint, which forks s1. The runs: asked, red (s1), blue (the fork), and the fork's key."""
    asked = ask(operator)
    red = run_queued(respond(operator, asked, text="red")["continuationRunId"])
    outcome = respond(operator, asked, text="blue", checkpointId=str(checkpoint_of(asked["runId"]).id))
    blue = run_queued(outcome["continuationRunId"])
    assert (red.output, blue.output) == ("ask_user: red", "ask_user: blue")
    return {"asked": asked["runId"], "red": str(red.id), "blue": str(blue.id), "fork": outcome["sessionId"]}


# --- the run page --------------------------------------------------------------------------------------------


def test_it_lists_the_turns_of_the_session_oldest_first_with_the_current_one_marked(operator, reader, asker):
    said = run_ok(operator, {"message": "hello", "sessionId": "s1"})
    asked = ask(operator)
    red = run_queued(respond(operator, asked, text="red")["continuationRunId"])

    turns = turns_of(page(reader, f"/runs/{asked['runId']}/"))

    assert len(turns) == 3
    assert "Turn 1" in turns[0] and f'href="/runs/{said["runId"]}/"' in turns[0] and "hello" in turns[0]
    assert "Turn 2" in turns[1] and 'aria-current="true"' in turns[1] and "this run" in turns[1]
    assert "awaiting an answer" in turns[1] and "v1" in turns[1]
    assert "asked <code>ask_user</code>: “Which colour?”" in turns[1]
    assert "Turn 3" in turns[2] and f'href="/runs/{red.id}/"' in turns[2] and "answers only" in turns[2]
    assert "aria-current" not in turns[0] + turns[2]
    assert "asked" not in turns[0] + turns[2]


def test_a_fork_shows_as_a_branch_linked_both_ways(operator, forked):
    original = turns_of(page(operator, f"/runs/{forked['red']}/"))

    # The branch hangs at the turn it was forked from, and goes to the fork's latest run.
    assert f'branch: <a href="/runs/{forked["blue"]}/">session <code>{forked["fork"]}</code></a>' in original[0]
    assert "branch:" not in original[1]
    # The fork's first run follows the run that asked, but in the fork: no "next run" of this session.
    asked_page = page(operator, f"/runs/{forked['asked']}/")
    assert f'<a href="/runs/{forked["red"]}/" rel="next">Next run →</a>' in asked_page
    assert f'href="/runs/{forked["blue"]}/" rel="next"' not in asked_page

    fork_page = page(operator, f"/runs/{forked['blue']}/")
    assert f'Forked from session <code>s1</code> at <a href="/runs/{forked["asked"]}/">turn 1</a>' in fork_page
    # The fork's timeline holds its own turns only.
    [turn] = turns_of(fork_page)
    assert 'aria-current="true"' in turn and "Turn 1" in turn
    assert "Forked from" not in page(operator, f"/runs/{forked['red']}/")


def test_a_fork_without_a_run_of_its_own_yet_links_to_its_runs(operator, asker):
    asked = run_ok(operator, {"message": f"{COLOR}\n{NAME}", "sessionId": "s1"})
    assert len(asked["pendingRequests"]) == 2
    respond(operator, asked, 0, text="red")
    run_queued(respond(operator, asked, 1, text="Ada")["continuationRunId"])
    # One of the two answered again: the fork waits for the other before its continuation runs.
    outcome = respond(operator, asked, 0, text="blue", checkpointId=str(checkpoint_of(asked["runId"]).id))
    assert outcome["continuationRunId"] is None

    first = turns_of(page(operator, f"/runs/{asked['runId']}/"))[0]

    assert f'<a href="/runs/?session={outcome["sessionId"]}">session <code>{outcome["sessionId"]}</code></a>' in first
    assert "(no run yet)" in first


def test_it_hides_another_tenants_runs_and_their_timeline(outsider, forked):
    make_agent(outsider, tools=[{"name": "ask_user"}])
    ask(outsider)  # the outsider has a session s1 of its own
    for name in ("asked", "red", "blue"):
        response = outsider.client.get(f"/runs/{forked[name]}/")
        assert response.status_code == 404
        assert forked["fork"] not in response.content.decode()


def test_the_run_page_asks_as_many_queries_for_one_turn_as_for_many_with_forks(operator, asker):
    """No query per turn or per fork: the session's runs, their requests and its forks are read at once."""

    def queries(run_id: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            turns_of(page(operator, f"/runs/{run_id}/"))
        return len(captured)

    short = ask(operator, "short")
    for _ in range(3):
        asked = ask(operator, "long")
        run_queued(respond(operator, asked, text="red")["continuationRunId"])
        at = str(checkpoint_of(asked["runId"]).id)
        run_queued(respond(operator, asked, text="blue", checkpointId=at)["continuationRunId"])
    latest = ask(operator, "long")

    assert len(turns_of(page(operator, f"/runs/{latest['runId']}/"))) == 7
    assert queries(latest["runId"]) == queries(short["runId"]) <= 13


# --- the trial page ------------------------------------------------------------------------------------------


def articles(html: str) -> dict[str, str]:
    """The trial page's turns by run id (and the fork's waiting requests as "waiting")."""
    found = {}
    for article in re.findall(r"<article .*?</article>", html, re.DOTALL):
        run = re.search(r'data-run="([^"]+)"', article)
        found[run.group(1) if run else "waiting"] = article
    return found


def trial(persona: Persona, session: str) -> str:
    return page(persona, f"/trial/?agent=assistant&session={session}")


def test_the_trial_page_offers_to_answer_an_earlier_turn_that_asked_differently(operator, asker):
    said = run_ok(operator, {"message": "hello", "sessionId": "s1"})
    asked = ask(operator)
    red = run_queued(respond(operator, asked, text="red")["continuationRunId"])
    request_id = asked["pendingRequests"][0]["requestId"]

    turns = articles(trial(operator, "s1"))

    fork = turns[asked["runId"]]
    assert "<summary>Answer differently (fork)</summary>" in fork
    assert f'<input type="hidden" name="checkpoint" value="{checkpoint_of(asked["runId"]).id}">' in fork
    assert f'data-request-id="{request_id}"' in fork and f'action="/inbox/{request_id}/answer/"' in fork
    assert '<button name="choice" value="red" aria-keyshortcuts="1">' in fork and 'value="blue"' in fork
    assert "Asked <code>ask_user</code>: “Which colour?” · answered" in fork
    # The turn that asked nothing cannot be forked (the API forks only through an answer), nor the latest.
    assert "data-fork" not in turns[said["runId"]] + turns[str(red.id)]
    assert "Waiting for your answer" not in "".join(turns.values())  # nothing waits


def test_the_fork_trial_page_shows_its_own_turns_and_where_it_came_from(operator, forked):
    html = trial(operator, forked["fork"])

    assert (
        f'Forked from session <a href="?agent=assistant&session=s1#turn-{forked["asked"]}"><code>s1</code></a>'
        " at turn 1" in html
    )
    assert list(articles(html)) == [forked["blue"]]
    assert "ask_user: blue" in html and "Answered <code>ask_user</code>: “blue”" in html
    assert "ask_user: red" not in html
    original = trial(operator, "s1")
    assert "ask_user: red" in original and "ask_user: blue" not in original and "Forked from" not in original


def test_the_fork_trial_page_asks_what_was_left_open_where_it_started(operator, asker):
    asked = run_ok(operator, {"message": f"{COLOR}\n{NAME}", "sessionId": "s1"})
    respond(operator, asked, 0, text="red")
    run_queued(respond(operator, asked, 1, text="Ada")["continuationRunId"])
    outcome = respond(operator, asked, 0, text="blue", checkpointId=str(checkpoint_of(asked["runId"]).id))

    waiting = articles(trial(operator, outcome["sessionId"]))["waiting"]

    assert "What is your name?" in waiting and "Which colour?" not in waiting
    [copy] = re.findall(r'data-request-id="([^"]+)"', waiting)
    assert copy != asked["pendingRequests"][1]["requestId"]  # the fork's copy, not the original
    assert f'action="/inbox/{copy}/answer/"' in waiting
    # Its widget answers the copy as the inbox does, which starts the fork's continuation.
    answer = {"text": "Grace", "decision": "answer"}
    answered = operator.client.post(f"/inbox/{copy}/answer/", answer, HTTP_HX_REQUEST="true")
    assert answered.status_code == 200 and answered.content == b""
    drain_queued()
    assert "ask_user: blue<br>ask_user: Grace" in trial(operator, outcome["sessionId"])
    assert "fork-waiting" not in trial(operator, outcome["sessionId"])


def test_the_trial_page_offers_to_continue_on_the_current_version_once_the_agent_was_edited(admin, operator, asker):
    asked = ask(operator)
    assert "Continue on" not in trial(operator, "s1")

    asker.append_version(DefinitionContent.model_validate({**asker.current.content, "instructions": "v2"}), admin.user)
    waiting = articles(trial(operator, "s1"))[asked["runId"]]

    select = re.search(r'<select id="continue-on-[^"]+" name="definition_version">(.*?)</select>', waiting, re.DOTALL)
    assert select, waiting
    assert re.findall(r"<option.*?</option>", select.group(1)) == [
        '<option value="2">v2 (current)</option>',
        '<option value="1" selected>v1 (as it ran)</option>',
    ]


def test_a_fork_of_a_turn_of_an_older_version_may_continue_on_another(admin, operator, forked, asker):
    asker.append_version(DefinitionContent.model_validate({**asker.current.content, "instructions": "v2"}), admin.user)

    fork = articles(trial(operator, "s1"))[forked["asked"]]

    assert 'name="definition_version"' in fork and '<option value="2">v2 (current)</option>' in fork


def test_the_trial_page_asks_as_many_queries_for_one_turn_as_for_many(operator, asker):
    def queries(session: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            trial(operator, session)
        return len(captured)

    ask(operator, "short")
    for _ in range(3):
        asked = ask(operator, "long")
        run_queued(respond(operator, asked, text="red")["continuationRunId"])
    ask(operator, "long")

    assert len(articles(trial(operator, "long"))) == 7
    assert queries("long") == queries("short")


def test_the_trial_page_shows_nothing_of_another_tenants_session(outsider, forked):
    Agent.create(outsider.tenant, DefinitionContent.model_validate({"name": "assistant"}), outsider.user)

    html = trial(outsider, "s1")

    assert articles(html) == {} and "Which colour?" not in html and "Forked from" not in html
    fork = trial(outsider, forked["fork"])
    assert articles(fork) == {} and "ask_user: blue" not in fork and "Forked from" not in fork


# --- the run page's one timeline of the session (issue 16, item 2) -------------------------------------------


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def summary_of(turn: str) -> str:
    found = re.search(r"<summary[^>]*>(.*?)</summary>", turn, re.DOTALL)
    assert found, turn
    return text(found.group(1))


def test_every_turn_is_folded_with_its_events_and_the_run_viewed_is_open(operator, asker):
    said = run_ok(operator, {"message": "hello", "sessionId": "s1"})
    asked = ask(operator)
    run_queued(respond(operator, asked, text="red")["continuationRunId"])

    first, viewed, last = turns_of(page(operator, f"/runs/{asked['runId']}/"))

    assert "<details open>" in viewed and "<details>" in first and "<details>" in last
    turn_one = r"Turn 1 \d\d:\d\d:\d\d completed [0-9.]+ m?s 1 model call · 0 tool calls v1 hello"
    assert re.fullmatch(turn_one, summary_of(first))
    assert re.fullmatch(r"Turn 2 .* awaiting an answer .* 1 model call · 0 tool calls v1 this run", summary_of(viewed))
    assert re.fullmatch(r"Turn 3 .* completed .* · 1 tool call v1 answers only", summary_of(last)), "ask_user ran"
    # Inside, the events (the run viewed keeps its anchors) with the time since the one before, and the total.
    assert 'id="event-1"' in viewed and 'id="turn-1-event-1"' in first and 'id="event-1"' not in first + last
    since = re.findall(r'<span class="since" title="since the event before">\+([0-9.]+ m?s)</span>', first)
    assert len(since) == len(re.findall(r'<li class="event ', first)) > 3
    assert re.search(r"Turn total: <strong>[0-9.]+ m?s</strong>", first)
    assert f'<a href="/runs/{said["runId"]}/" title="hello">Open this run</a>' in first


def test_the_wait_between_a_turn_that_asked_and_its_continuation_is_a_gap_naming_who_answered(operator, asker):
    run_ok(operator, {"message": "hello", "sessionId": "s1"})
    asked = ask(operator)
    red = run_queued(respond(operator, asked, text="red")["continuationRunId"])
    still = ask(operator)

    items = [text(item) for item in timeline_items(page(operator, f"/runs/{red.id}/"))]

    gaps = [item for item in items if not item.startswith("Turn")]
    assert len(items) == 8 and len(gaps) == 4
    assert re.fullmatch(r"[0-9.]+ m?s later", gaps[0])
    assert re.fullmatch(r"waited [0-9.]+ m?s for otto", gaps[1])
    assert re.fullmatch(r"[0-9.]+ m?s later", gaps[2])
    assert re.fullmatch(r"waiting [0-9.]+ m?s so far", gaps[3]), "the last turn still waits"
    respond(operator, still, text="blue")
    assert "so far" not in page(operator, f"/runs/{red.id}/")


def test_a_run_without_a_session_is_a_timeline_of_one_turn(operator, asker):
    one_off = run_ok(operator, {"message": "hello"})

    html = page(operator, f"/runs/{one_off['runId']}/")

    [turn] = turns_of(html)
    assert "<h2>Timeline</h2>" in html and "<details open>" in turn and 'id="event-1"' in turn
    assert not [item for item in timeline_items(html) if item.startswith('<li class="gap')]


def test_turns_far_from_the_run_viewed_link_to_their_own_page(operator, asker, monkeypatch):
    monkeypatch.setattr("agents.views.timeline_pages.TURNS_AROUND", 1)
    runs = [run_ok(operator, {"message": f"turn {n}", "sessionId": "s1"})["runId"] for n in range(4)]

    turns = turns_of(page(operator, f"/runs/{runs[0]}/"))

    assert ["event-1" in turn for turn in turns] == [True, True, False, False]
    assert f'its events are on <a href="/runs/{runs[3]}/#timeline">its own page</a>' in turns[3]
    assert "1 model call" in summary_of(turns[3])


def test_a_sub_agents_events_stay_nested_in_their_turn(admin, operator):
    researcher = {"name": "researcher", "tools": [{"name": "get_time"}], "clientTools": [], "parameters": []}
    researcher["instructions"] = ""
    make_agent(admin, **researcher, instructionsByCulture={})
    make_agent(admin, subAgents=["researcher"])
    task = json.dumps({"task": call_line("get_time")})
    delegated = run_ok(operator, {"message": f"call researcher {task}", "sessionId": "s1"})
    later = run_ok(operator, {"message": "thanks", "sessionId": "s1"})

    first, _ = turns_of(page(operator, f"/runs/{later['runId']}/"))

    nested = re.findall(r'<li class="event ev-[\w-]+ nested" id="turn-1-event-\d+">.*?</li>', first, re.DOTALL)
    assert nested and all('<span class="subagent" title="An event of the sub-agent researcher">' in e for e in nested)
    assert "<code>get_time</code>" in "".join(nested)
    assert 'id="event-' not in first and delegated["status"] == "completed"
