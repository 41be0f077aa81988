"""The runs list and a run page in Chromium (issue 16, honest states): a row per session that unfolds its runs,
and the session's turns on one timeline; at 1366 and 390 px wide nothing scrolls sideways and axe-core finds no
serious or critical violation, with the folded parts open too."""

import json
import time
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import pytest
from playwright.sync_api import Page, expect

from tests.browser.axe import violations
from tests.browser.conftest import Server
from tests.processes.cluster import Api

pytestmark = pytest.mark.browser


def wait_until_finished(api: Api, run_id: str) -> dict[str, Any]:
    """The run once the server's queue worker ran it."""
    for _ in range(100):
        run = api.ok("GET", f"/api/runs/{run_id}")
        if run["status"] not in ("queued", "running"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} still {run['status']}")


@pytest.fixture(scope="module")
def story(server: Server, acme_team: dict[str, str]) -> dict[str, str]:
    """A session that asked, was answered by otto and went on; one still waiting; one run without a session."""
    ada, otto = Api(server.url, acme_team["ada"]), Api(server.url, acme_team["otto"])
    agent = f"teller-{uuid4().hex[:6]}"
    tools = [{"name": "send_email", "approval": "always"}, {"name": "get_time"}]
    ada.ok("POST", "/api/agents", {"name": agent, "tools": tools})
    runs = f"/api/agents/{agent}/runs"
    session = f"a-rather-long-session-key-{uuid4().hex}"
    ada.ok("POST", runs, {"message": "call get_time", "sessionId": session})
    email = {"to": "finance@example.com", "subject": "Report", "body": "An unbroken-" + "word" * 30}
    asked = ada.ok("POST", runs, {"message": f"call send_email {json.dumps(email)}", "sessionId": session})
    answer = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    outcome = otto.ok("POST", f"/api/runs/{asked['runId']}/responses", answer)
    wait_until_finished(ada, outcome["continuationRunId"])
    last = ada.ok("POST", runs, {"message": "thanks, " + "that is all " * 12, "sessionId": session})
    ada.ok("POST", runs, {"message": f"call send_email {json.dumps(email)}", "sessionId": uuid4().hex})
    ada.ok("POST", runs, {"message": "no session for this one"})
    return {"asked": asked["runId"], "last": last["runId"], "session": session, "agent": agent}


@pytest.mark.parametrize("width", [1366, 390])
def test_the_runs_list_and_the_run_page_fit_and_pass_axe(
    width: int,
    story: dict[str, str],
    sign_in: Callable[[str], Page],
    axe_source: str,
) -> None:
    page = sign_in("ada")
    page.set_viewport_size({"width": width, "height": 900})

    page.goto(f"/runs/?agent={story['agent']}")  # other tests' runs share the server
    row = page.locator("tbody.session-group", has_text=story["session"][:20])
    expect(row.locator("td.turns")).to_have_text("4")
    row.locator("summary").click()
    expect(row.locator(".session-run-list li")).to_have_count(4)
    expect(row.locator(".session-run-list")).to_contain_text("answered by otto")
    expect(page.locator("td.status", has_text="waits on approval of send_email")).to_have_count(1)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert violations(page, axe_source) == []

    page.goto(f"/runs/{story['asked']}/")
    turns = page.locator("#timeline li.session-turn")
    expect(turns).to_have_count(4)
    expect(turns.nth(1).locator("details")).to_have_attribute("open", "")
    expect(turns.nth(2).locator("details")).not_to_have_attribute("open", "")
    expect(page.locator("#timeline li.gap.waited")).to_contain_text("for otto")
    turns.nth(2).locator("summary").click()
    expect(turns.nth(2).locator(".timeline .event").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert violations(page, axe_source) == []


def test_the_run_page_of_a_waiting_run_follows_its_session(
    server: Server, acme_team: dict[str, str], sign_in: Callable[[str], Page]
) -> None:
    """Issue 16, item 1: the run page of a waiting run shows the answer and the continuation when someone
    answers elsewhere (here the respond API, as another operator would), without a reload."""
    ada, otto = Api(server.url, acme_team["ada"]), Api(server.url, acme_team["otto"])
    agent = f"follower-{uuid4().hex[:6]}"
    ada.ok("POST", "/api/agents", {"name": agent, "tools": [{"name": "send_email", "approval": "always"}]})
    email = {"to": "ops@example.com", "subject": "Live", "body": "Follow me."}
    message = {"message": f"call send_email {json.dumps(email)}", "sessionId": uuid4().hex}
    asked = ada.ok("POST", f"/api/agents/{agent}/runs", message)
    page = sign_in("ada")
    page.goto(f"/runs/{asked['runId']}/")
    expect(page.locator("#run-headline .pill")).to_have_text("awaiting approval")
    expect(page.locator(".session-runs > li.session-turn")).to_have_count(1)
    page.locator("#turn-1 > details > summary").click()  # the reader folds the turn they look at

    answer = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    otto.ok("POST", f"/api/runs/{asked['runId']}/responses", answer)

    expect(page.locator(".session-runs > li.session-turn")).to_have_count(2)
    expect(page.locator("#turn-2 .pill")).to_have_text("completed")
    expect(page.locator("#run-headline")).to_contain_text("answered by otto")
    expect(page.locator("#run-requests")).to_contain_text("otto")  # the table of its requests too
    expect(page.locator("#run-requests")).not_to_contain_text("pending")
    expect(page.locator("#turn-1 > details")).not_to_have_attribute("open", "")  # folded as the reader left it


def test_a_replayed_run_page_follows_the_replay_to_its_end(
    server: Server, acme_team: dict[str, str], sign_in: Callable[[str], Page]
) -> None:
    """A replay has no session: its page follows the run's own stream and shows it finished without a reload
    (it used to stay at "running" with only run.started)."""
    ada = Api(server.url, acme_team["ada"])
    agent = f"replayer-{uuid4().hex[:6]}"
    ada.ok("POST", "/api/agents", {"name": agent, "tools": [{"name": "get_time"}]})
    original = ada.ok("POST", f"/api/agents/{agent}/runs", {"message": "call get_time"})
    page = sign_in("ada")
    page.goto(f"/runs/{original['runId']}/")

    page.get_by_role("button", name="Replay", exact=True).click()

    expect(page.locator("#replay-title")).to_contain_text("Replay of")
    expect(page.locator("#run-headline .pill")).to_have_text("completed", timeout=15000)
    expect(page.locator("#timeline")).to_contain_text("run.completed")
