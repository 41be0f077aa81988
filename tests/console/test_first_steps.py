"""The dashboard leads a newcomer (issue 50, item 8): a first-steps panel (try an agent, answer in the inbox, write a
rule, connect an external agent), each step a link to where it is done and ticked from the tenant's own doings (not
the demo's seeded history), shown to operators and admins until every step is done or the member hides it; read in
one query, scoped to the tenant."""

import json
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agents.models import Agent, AgentVersion
from agents.starter_policy import starter_hooks
from approvals.models import PendingRequest
from console.models import Membership, Tenant
from console.views.dashboard_pages import progress
from tests.conftest import Persona, make_persona
from tests.helpers import EMAIL, call_line, make_agent

SEND = call_line("send_email", EMAIL)


def page(persona: Persona) -> str:
    response = persona.client.get("/")
    assert response.status_code == 200
    return response.content.decode()


def panel(persona: Persona) -> str | None:
    """The first-steps panel of the persona's dashboard, or None when there is none."""
    found = re.search(r'<section class="panel next-step first-steps".*?</section>', page(persona), re.S)
    return found.group() if found else None


def steps(persona: Persona) -> dict[str, tuple[bool, str, bool]]:
    """Each step of the panel by title: whether it is ticked, where its link goes, whether it is the button."""
    shown = panel(persona)
    assert shown is not None
    items = re.findall(r'<li class="first-step( done| next)?">(.*?)</li>', shown, re.S)
    found = {}
    for state, item in items:
        title = re.search(r"<strong>(.+?)</strong>", item)
        link = re.search(r'<a( class="button")? href="([^"]+)">', item)
        assert title is not None and link is not None, item
        assert ("done</span>" in item) is (state == " done")
        found[title.group(1)] = (state == " done", link.group(2), bool(link.group(1)))
    return found


def trial_turn(persona: Persona, message: str = "hello", session: str = "trial-0a1b2c3d4e5f") -> dict[str, Any]:
    """A turn as the trial page sends it: the run API with the browser's session, in a session the page named."""
    response = persona.client.post(
        "/api/agents/assistant/runs", json.dumps({"message": message, "sessionId": session}), "application/json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def answer_in_inbox(persona: Persona, asked: dict[str, Any], **fields: str) -> None:
    request_id = asked["pendingRequests"][0]["requestId"]
    answered = persona.client.post(f"/inbox/{request_id}/answer/", {"decision": "approve", **fields})
    assert answered.status_code == 302, answered.content
    assert PendingRequest.objects.get(id=request_id).answered_via == "inbox"


def test_it_ticks_each_step_as_the_tenant_does_it_until_the_panel_goes(admin, operator):
    make_agent(admin)
    assert steps(operator) == {
        "Try an agent": (False, "/trial/", True),
        "Answer in the inbox": (False, "/inbox/", False),
        "Write a rule": (False, "/rules/", False),
        "Connect an external agent": (False, "/tokens/", False),
    }
    assert "0 of 4 done" in (panel(operator) or "")

    asked = trial_turn(operator, SEND)
    assert steps(operator)["Try an agent"] == (True, "/trial/", False)
    assert steps(operator)["Answer in the inbox"] == (False, "/inbox/", True)

    answer_in_inbox(operator, asked)
    assert steps(admin)["Answer in the inbox"][0] is True
    assert steps(admin)["Write a rule"] == (False, "/rules/", True)

    answer_in_inbox(operator, trial_turn(operator, SEND, "trial-ffeeddccbbaa"), remember="session")
    assert steps(operator)["Write a rule"][0] is True
    assert "3 of 4 done" in (panel(operator) or "")

    # An external agent's requests come with a member's token: its first use connects one.
    assert admin.api("GET", "/api/agents").status_code == 200
    assert panel(operator) is None and panel(admin) is None
    assert "No runs yet" not in page(operator)


def save_policy(persona: Persona, agent: Agent, note: str = "a policy for mail") -> None:
    """The starter policy given to `agent` in a new version, as the policy editor saves it."""
    content = agent.current.definition.model_copy(update={"hooks": starter_hooks("enforce")})
    agent.append_version(content, persona.user, note=note)


def test_a_policy_saved_in_an_agent_s_new_version_is_a_rule_written(admin):
    agent = make_agent(admin)
    assert progress(admin.tenant)["policy"] is False
    save_policy(admin, agent, note="seed_demo: the starter policy in shadow mode")  # as seed_demo upgrades its own
    assert progress(admin.tenant)["policy"] is False
    save_policy(admin, agent)
    assert progress(admin.tenant)["policy"] is True
    assert steps(admin)["Write a rule"][0] is True


@pytest.fixture
def seeded(db, monkeypatch, django_capture_on_commit_callbacks) -> tuple[Tenant, Persona]:
    """The demo as `make run` seeds it (its history answered in the inbox by its operator, agents with policies, an
    external agent with a waiting request), and its operator."""
    monkeypatch.setenv("DEMO_PASSWORD", "demo-password-1")
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_demo", stdout=StringIO(), stderr=StringIO())
    demo = Tenant.objects.get(slug="demo")
    membership = Membership.objects.get(tenant=demo, user__username="operator")
    client = Client()
    client.force_login(membership.user)
    return demo, Persona(membership.user, membership, client, "")


def test_the_demo_s_seeded_history_ticks_no_step(seeded):
    demo, operator = seeded
    assert PendingRequest.objects.filter(tenant=demo, answered_via="inbox").exists()
    assert AgentVersion.objects.filter(agent__tenant=demo).exclude(content__hooks=None).exists()
    done = progress(demo)
    assert done == {"ran": True, "tried": False, "answered": False, "rule": False, "policy": False, "connected": False}
    assert [ticked for ticked, *_ in steps(operator).values()] == [False] * 4


def test_what_another_tenant_did_ticks_nothing_here(admin, operator, outsider):
    make_agent(admin)
    save_policy(outsider, make_agent(outsider))
    answer_in_inbox(outsider, trial_turn(outsider, SEND), remember="session")
    assert outsider.api("GET", "/api/agents").status_code == 200
    assert all(progress(outsider.tenant).values())
    assert not any(progress(operator.tenant).values())
    assert panel(outsider) is None
    assert [ticked for ticked, *_ in steps(operator).values()] == [False] * 4


def test_a_member_hides_the_panel_for_themselves_only(admin, operator, globex):
    make_agent(admin)
    elsewhere = Membership.objects.create(user=operator.user, tenant=globex, role="operator")
    hidden = operator.client.post("/first-steps/hide/")
    assert hidden.status_code == 302 and hidden["Location"] == "/"
    assert panel(operator) is None
    assert "No runs yet" in page(operator)  # hidden, the older hint still says what to do first
    assert panel(admin) is not None
    elsewhere.refresh_from_db()
    assert elsewhere.first_steps_hidden_at is None
    at = Membership.objects.get(pk=operator.membership.pk).first_steps_hidden_at
    assert at is not None
    assert operator.client.post("/first-steps/hide/").status_code == 302
    assert Membership.objects.get(pk=operator.membership.pk).first_steps_hidden_at == at


def test_hiding_takes_a_post_with_its_csrf_token(admin, operator):
    make_agent(admin)
    assert operator.client.get("/first-steps/hide/").status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator.user)
    assert strict.post("/first-steps/hide/").status_code == 403
    assert Client().post("/first-steps/hide/")["Location"].startswith("/login/")
    assert Membership.objects.get(pk=operator.membership.pk).first_steps_hidden_at is None
    # The panel's own form carries the token: posted as the browser posts it, it hides the panel.
    shown = strict.get("/").content.decode()
    token = re.search(
        r'action="/first-steps/hide/"><input type="hidden" name="csrfmiddlewaretoken" value="([^"]+)"', shown
    )
    assert token is not None
    assert strict.post("/first-steps/hide/", {"csrfmiddlewaretoken": token.group(1)}).status_code == 302
    assert Membership.objects.get(pk=operator.membership.pk).first_steps_hidden_at is not None


def test_a_reader_gets_no_first_steps(admin, reader):
    make_agent(admin)
    assert panel(reader) is None
    assert "No runs yet" in page(reader)


def test_without_agents_it_asks_for_one_first(admin):
    html = page(admin)
    assert "No agents yet" in html and panel(admin) is None


def queries(persona: Persona) -> int:
    """How many queries the persona's dashboard reads, its first-steps panel shown."""
    with CaptureQueriesContext(connection) as captured:
        assert panel(persona) is not None
    return len(captured)


def test_it_reads_the_steps_in_one_query_however_much_the_tenant_did(admin, operator, django_assert_num_queries):
    make_agent(admin)
    few = queries(operator)
    for n in range(3):
        make_agent(admin, name=f"agent-{n}")
    for n in range(4):
        answer_in_inbox(operator, trial_turn(operator, SEND, f"trial-{n:012d}"), remember="session")
    for n in range(3):
        make_persona(f"bot-{n}", admin.tenant, "operator")
    with django_assert_num_queries(1):
        progress(admin.tenant)
    assert queries(operator) == few


def test_the_external_agent_step_says_where_its_guide_is_and_links_the_api_reference(admin, operator):
    """The console serves no docs/: the step names the guide as a file of Airlock's source (one it has) and links
    what the console does serve, the API's reference."""
    make_agent(admin)
    [step] = re.findall(
        r'<li class="first-step[^"]*">((?:(?!</li>).)*Connect an external agent.*?)</li>', page(operator), re.S
    )
    guide = re.search(r"How, step by step: <code>([^<]+)</code> in Airlock(?:'|&#x27;)s source\.", step)
    assert guide is not None, step
    assert (Path(__file__).resolve().parents[2] / guide[1]).is_file(), guide[1]
    assert '<a href="/api/docs">API reference</a>' in step, step
    assert operator.client.get("/api/docs").status_code == 200
