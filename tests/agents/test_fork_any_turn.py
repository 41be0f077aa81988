"""Fork from any earlier turn (SPEC section 9, issue 14 item 7): "Fork from here" on an ended turn of a session
that is not its latest makes a new session from that turn's checkpoint, whether the turn asked anything or
not; the next message in it continues from there, and the original session is untouched."""

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from agents.checkpoints import conversation_at, fork_origin
from agents.models import Agent, Checkpoint, Event, Run, Session
from approvals.models import PendingRequest, RequestStatus
from tests.conftest import Persona
from tests.helpers import ASSISTANT, EMAIL, call_line, make_agent, run_ok, run_queued, snapshot

GET_TIME = call_line("get_time")


@pytest.fixture
def assistant(admin) -> Agent:
    return make_agent(admin)


@pytest.fixture
def turns(operator, assistant) -> list[str]:
    """Session s1: three turns that ask nothing, each calling get_time (the scripted model numbers a call
    after the calls in its history: call_1, call_2, call_3). Their run ids, oldest first."""
    ran = [run_ok(operator, {"message": f"{GET_TIME}\nturn {n}", "sessionId": "s1"}) for n in (1, 2, 3)]
    assert [r["status"] for r in ran] == ["completed"] * 3
    assert [call_ids(r["runId"]) for r in ran] == [["call_1"], ["call_2"], ["call_3"]]
    return [r["runId"] for r in ran]


def call_ids(run_id: str) -> list[str]:
    starts = Event.objects.filter(run_id=run_id, type="tool.execution_start").order_by("sequence")
    return [event.data["toolCallId"] for event in starts]


def prompts(session: Session) -> list[str]:
    """The user messages of the session's conversation, oldest first."""
    messages = (session.conversation or {}).get("messages", [])
    parts = [part for message in messages for part in message["parts"] if part.get("part_kind") == "user-prompt"]
    return ["\n".join(part["content"]) for part in parts]  # a prompt is stored as a list of texts


def fork_at(persona: Persona, run_id: str) -> Session:
    """Fork from the turn `run_id` as `persona` does with the button: to the trial page of the new session."""
    response = persona.client.post(f"/runs/{run_id}/fork/")
    assert response.status_code == 302, response.content
    url = urlsplit(response["Location"])
    query = parse_qs(url.query)
    assert url.path == "/trial/" and query["agent"] == ["assistant"], response["Location"]
    return Session.objects.get(key=query["session"][0])


def without(state: dict[str, Any], session: Session) -> dict[str, Any]:
    """`state` (of `snapshot()`) without the rows of `session`: its row, runs, their events and its checkpoints."""
    runs = set(Run.objects.filter(session=session).values_list("id", flat=True))
    return {
        **state,
        "agents.Session": [row for row in state["agents.Session"] if row["id"] != session.id],
        "agents.Run": [row for row in state["agents.Run"] if row["id"] not in runs],
        "agents.Event": [row for row in state["agents.Event"] if row["run_id"] not in runs],
        "agents.Checkpoint": [row for row in state["agents.Checkpoint"] if row["session_id"] != session.id],
        "approvals.PendingRequest": [
            row for row in state["approvals.PendingRequest"] if row["session_id"] != session.id
        ],
    }


def refused(persona: Persona, run_id: str) -> str:
    """The run page's error after a fork refused by what the turn is (not who asks)."""
    response = persona.client.post(f"/runs/{run_id}/fork/", follow=True)
    assert response.status_code == 200
    assert response.redirect_chain == [(f"/runs/{run_id}/", 302)]
    found = re.search(r'<li class="error">(.*?)</li>', response.content.decode())
    assert found, response.content.decode()
    return found.group(1)


def test_it_forks_a_turn_that_asked_nothing_and_the_next_message_sees_only_that_turns_history(operator, turns):
    first = Checkpoint.objects.get(run_id=turns[0])

    fork = fork_at(operator, turns[0])

    original = Session.objects.get(key="s1", deleted_at=None)
    assert (fork.forked_from_session, fork.forked_from_checkpoint) == (original, first)
    assert fork.conversation == conversation_at(first)
    assert str(fork.last_run_id) == turns[0]
    assert not PendingRequest.objects.filter(session=fork).exists()

    after = run_ok(operator, {"message": f"{GET_TIME}\nin the fork", "sessionId": fork.key})

    # One call in its history (turn 1's), not three: the model numbers it call_2, as turn 2 once did.
    assert after["status"] == "completed" and call_ids(after["runId"]) == ["call_2"]
    assert after["output"].startswith("get_time: ")
    fork.refresh_from_db()
    assert prompts(fork) == [f"{GET_TIME}\nturn 1", f"{GET_TIME}\nin the fork"]
    assert str(Run.objects.get(id=after["runId"]).previous_run_id) == turns[0]


def test_the_original_session_is_untouched_by_the_fork_and_by_what_runs_in_it(operator, turns):
    before = snapshot()

    fork = fork_at(operator, turns[1])
    assert without(snapshot(), fork) == before

    run_ok(operator, {"message": "hello", "sessionId": fork.key})
    run_ok(operator, {"message": "again", "sessionId": fork.key})

    assert without(snapshot(), fork) == before
    fork.refresh_from_db()
    assert prompts(fork) == [f"{GET_TIME}\nturn 1", f"{GET_TIME}\nturn 2", "hello", "again"]


def test_every_fork_from_a_turn_is_a_session_of_its_own(operator, turns):
    one, two = fork_at(operator, turns[0]), fork_at(operator, turns[0])

    assert one.key != two.key
    assert one.forked_from_checkpoint_id == two.forked_from_checkpoint_id


def test_the_next_message_in_the_fork_runs_on_the_current_version(operator, admin, turns):
    response = admin.api("PUT", "/api/agents/assistant", {**ASSISTANT, "instructions": "Version two."})
    assert response.status_code == 200, response.content
    fork = fork_at(operator, turns[0])

    after = run_ok(operator, {"message": "echo instructions", "sessionId": fork.key})

    assert after["output"] == "Version two."
    assert Run.objects.get(id=after["runId"]).version.number == 2


def test_a_fork_of_a_turn_that_asked_copies_the_requests_open_there(operator, assistant):
    asked = run_ok(operator, {"message": call_line("send_email", EMAIL), "sessionId": "s1"})
    assert asked["status"] == "awaiting_approval"
    body = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    outcome = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()
    assert run_queued(outcome["continuationRunId"]).status == "completed"
    [original] = PendingRequest.objects.filter(session__key="s1")
    assert original.status == RequestStatus.ANSWERED

    fork = fork_at(operator, asked["runId"])

    [copy] = PendingRequest.objects.filter(session=fork)
    assert copy.id != original.id
    assert (copy.status, copy.answer, copy.run_id) == (RequestStatus.PENDING, None, original.run_id)
    assert (copy.tool_name, copy.arguments) == ("send_email", original.arguments)
    # The fork waits on it on the trial page; answered there, it goes on in the fork.
    assert "Hello" in operator.client.get(f"/trial/?agent=assistant&session={fork.key}").content.decode()
    original.refresh_from_db()
    assert original.status == RequestStatus.ANSWERED


def test_the_run_page_offers_fork_from_here_on_every_ended_turn_but_the_latest(operator, admin, reader, turns):
    page = operator.client.get(f"/runs/{turns[2]}/").content.decode()

    actions = re.findall(r'<form method="post" action="(/runs/[^"]+/fork/)"', page)
    assert actions == [f"/runs/{turns[0]}/fork/", f"/runs/{turns[1]}/fork/"]
    assert "Fork from here" in admin.client.get(f"/runs/{turns[0]}/").content.decode()
    assert "Fork from here" not in reader.client.get(f"/runs/{turns[0]}/").content.decode()


def test_the_trial_page_offers_fork_from_here_on_every_earlier_turn(operator, turns):
    page = operator.client.get("/trial/?agent=assistant&session=s1").content.decode()

    actions = re.findall(r'<form method="post" action="(/runs/[^"]+/fork/)" class="fork-turn">', page)
    assert actions == [f"/runs/{turns[0]}/fork/", f"/runs/{turns[1]}/fork/"]
    fork = fork_at(operator, turns[1])
    run_ok(operator, {"message": "hello", "sessionId": fork.key})
    in_the_fork = operator.client.get(f"/trial/?agent=assistant&session={fork.key}").content.decode()
    assert "You said: hello" in in_the_fork and 'class="fork-turn"' not in in_the_fork  # its one turn is its latest


def test_the_fork_shows_as_a_branch_on_the_run_page_and_the_trial_page(operator, turns):
    fork = fork_at(operator, turns[0])
    after = run_ok(operator, {"message": "hello", "sessionId": fork.key})

    assert fork_origin(fork) is not None and fork_origin(fork).turn == 1
    original = operator.client.get(f"/runs/{turns[2]}/").content.decode()
    assert f'branch: <a href="/runs/{after["runId"]}/">session <code>{fork.key}</code></a>' in original
    branched = operator.client.get(f"/runs/{after['runId']}/").content.decode()
    assert f'Forked from session <code>s1</code> at <a href="/runs/{turns[0]}/">turn 1</a>' in branched
    trial = operator.client.get(f"/trial/?agent=assistant&session={fork.key}").content.decode()
    assert "Forked from session" in trial and "s1" in trial


def test_a_reader_gets_403_and_another_tenant_404_and_nothing_is_made(reader, outsider, turns):
    before = snapshot()

    assert reader.client.post(f"/runs/{turns[0]}/fork/").status_code == 403
    assert outsider.client.post(f"/runs/{turns[0]}/fork/").status_code == 404

    assert snapshot() == before


def test_it_refuses_a_post_without_its_csrf_token(operator, turns):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator.user)
    before = snapshot()

    assert client.post(f"/runs/{turns[0]}/fork/").status_code == 403

    assert snapshot() == before
    # With the token the page gave it, the same browser forks.
    page = client.get(f"/runs/{turns[0]}/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    assert client.post(f"/runs/{turns[0]}/fork/", {"csrfmiddlewaretoken": token.group(1)}).status_code == 302
    assert Session.objects.filter(forked_from_session__key="s1").count() == 1


def test_it_forks_nothing_from_the_latest_turn(operator, turns):
    before = snapshot()

    assert "latest turn" in refused(operator, turns[2])
    assert snapshot() == before


def test_it_forks_nothing_from_a_turn_that_has_not_ended_or_has_no_session(operator, turns):
    sessionless = run_ok(operator, {"message": "hello"})
    later = {"message": "later", "sessionId": "s1"}
    queued = operator.api("POST", "/api/agents/assistant/runs", later, HTTP_PREFER="respond-async")
    assert queued.status_code == 202, queued.content
    before = snapshot()

    assert "has not ended in a session" in refused(operator, sessionless["runId"])
    assert "has not ended in a session" in refused(operator, queued.json()["runId"])
    assert operator.client.post("/runs/00000000-0000-0000-0000-000000000000/fork/").status_code == 404
    assert snapshot() == before


def test_it_forks_nothing_of_a_deleted_session_or_agent(operator, admin, turns):
    assert operator.api("DELETE", "/api/sessions/s1").status_code == 204
    assert "Fork from here" not in operator.client.get(f"/runs/{turns[2]}/").content.decode()
    before = snapshot()

    assert "was deleted" in refused(operator, turns[0])
    assert snapshot() == before

    run_ok(operator, {"message": "a new s1", "sessionId": "s1"})
    run_ok(operator, {"message": "its second turn", "sessionId": "s1"})
    [renewed] = Run.objects.filter(session__key="s1", session__deleted_at=None, message="a new s1")
    assert admin.api("DELETE", "/api/agents/assistant").status_code == 204
    before = snapshot()

    assert "was deleted" in refused(operator, str(renewed.id))
    assert snapshot() == before
