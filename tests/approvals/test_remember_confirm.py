"""Remembering "always" asks first (issue 50, item 7): the confirmation says what the rule will cover (the tool, the
arguments or any, the expiry, the open requests it matches now) and offers to approve those too; nothing is answered
or remembered until it is confirmed as shown. And `RULE_DEFAULT_EXPIRY`, the default expiry of such a rule."""

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.models import ApproverGroup, HeldAnswer, PendingRequest, Rule
from approvals.receipts import Receipt
from console.env import EnvError, env_duration
from tests.approvals.test_previews import approve_times, deployer  # noqa: F401 - `deployer` is a fixture
from tests.conftest import Persona
from tests.helpers import EMAIL, call_line, drain_queued, snapshot

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def make_agent(persona: Persona, name: str = "mailer", approvers: str | None = None) -> Agent:
    tool: dict[str, Any] = {"name": "send_email", "approval": "always"}
    if approvers:
        tool["approvers"] = approvers
    content = DefinitionContent.model_validate({"name": name, "tools": [tool, {"name": "get_time"}]})
    return Agent.create(persona.tenant, content, persona.user)


@pytest.fixture
def mailer(admin: Persona) -> Agent:
    return make_agent(admin)


def ask(persona: Persona, session: str, agent: str = "mailer", **email: str) -> str:
    """A run of `agent` in `session` waiting on its send_email approval: the request's id."""
    body = {"message": call_line("send_email", {**EMAIL, **email}), "sessionId": session}
    response = persona.api("post", f"/api/agents/{agent}/runs", body)
    assert response.status_code == 200, response.content
    return str(response.json()["pendingRequests"][0]["requestId"])


def answer(persona: Persona, rid: str, data: dict[str, Any], htmx: bool = True) -> Any:
    return persona.client.post(f"/inbox/{rid}/answer/", data, **(HTMX if htmx else {}))


def hidden(html: str, name: str) -> list[str]:
    return re.findall(rf'<input type="hidden" name="{name}" value="([^"]*)">', html)


def confirmed(html: str, **more: Any) -> dict[str, Any]:
    """What the confirmation in `html` posts when its button is pressed (the form's remember choice as shown)."""
    return {
        "remember": "always",
        "decision": hidden(html, "decision")[0],
        "always_covers": hidden(html, "always_covers")[0],
        "always": "confirm",
        **more,
    }


def open_ids() -> set[str]:
    return {str(pk) for pk in PendingRequest.objects.open().values_list("id", flat=True)}


def test_it_asks_before_remembering_always_and_says_what_the_rule_covers(operator, mailer):
    rid = ask(operator, "s1")
    same_tool = ask(operator, "s2", to="x@y.co")
    before = snapshot()

    page = answer(operator, rid, {"decision": "approve", "remember": "always"}).content.decode()

    assert "Approve, and from now on let mailer call <code>send_email</code> without asking?" in page
    assert "<strong>any arguments</strong>: whatever <code>to</code>, <code>subject</code>, <code>body</code>" in page
    expiry = re.search(r'Expires</dt><dd>in (.+?), <time datetime="([^"]+)">', page)
    assert expiry is not None and expiry[1] in ("4\xa0weeks, 2\xa0days", "4\xa0weeks, 1\xa0day")
    assert abs(datetime.fromisoformat(expiry[2]) - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)
    assert "1 waiting that you may answer" in page
    assert hidden(page, "matching") == [same_tool]
    assert 'name="always" value="confirm" autofocus' in page
    assert 'name="decision" value="approve">Approve</button>' not in page  # the plain buttons give way
    assert snapshot() == before and not HeldAnswer.objects.exists()


def test_it_asks_on_a_page_of_its_own_without_javascript(operator, mailer):
    rid = ask(operator, "s1")
    back = "/agents/mailer/try/?session=s1"

    page = answer(operator, rid, {"decision": "approve", "remember": "always", "next": back}, htmx=False)

    html = page.content.decode()
    assert page.status_code == 200 and "<h1>Remember “always”?</h1>" in html
    assert hidden(html, "remember") == ["always"] and hidden(html, "next") == [back]
    assert f'href="{back}">Cancel</a>' in html
    assert PendingRequest.objects.get(id=rid).answer is None and not Rule.objects.exists()

    done = answer(operator, rid, confirmed(html, next=back), htmx=False)

    assert done.status_code == 302 and done["Location"] == back
    assert PendingRequest.objects.get(id=rid).answer["remember"] == "always"


def test_confirmed_it_remembers_and_approves_the_open_requests_it_matches_too(operator, mailer, admin):
    rid = ask(operator, "s1")
    same_tool, second = ask(operator, "s2", to="x@y.co"), ask(operator, "s3", to="z@y.co")
    make_agent(admin, name="other")
    elsewhere = ask(operator, "s4", agent="other")  # another agent's rule would be another rule
    page = answer(operator, rid, {"decision": "approve", "remember": "always"}).content.decode()
    assert hidden(page, "matching") == [same_tool, second]

    # Only the requests the confirmation showed: `second` is left out of the post, as if it opened meanwhile.
    answer(operator, rid, confirmed(page, answer_matching="1", matching=[same_tool, "not-an-id", elsewhere]))

    assert open_ids() == {second, elsewhere}
    for request_id in (rid, same_tool):
        done = PendingRequest.objects.get(id=request_id)
        assert (done.answer["approved"], done.answered_by, done.answered_via) == (True, operator.user, "inbox")
        assert Receipt.objects.filter(request_id=request_id, result="approved").count() == 1
    assert PendingRequest.objects.get(id=same_tool).answer["remember"] is None  # one rule, from the card
    drain_queued(2)
    rule = Rule.objects.get()
    assert (rule.agent, rule.tool_name, rule.arguments_hash) == (mailer, "send_email", "")
    assert str(rule.created_from_id) == rid and rule.expires_at is not None
    assert abs(rule.expires_at - (timezone.now() + timedelta(days=30))) < timedelta(minutes=1)


def test_confirmed_without_the_choice_it_leaves_the_matching_ones_waiting(operator, mailer):
    rid, same_tool = ask(operator, "s1"), ask(operator, "s2", to="x@y.co")
    page = answer(operator, rid, {"decision": "approve", "remember": "always"}).content.decode()

    answer(operator, rid, confirmed(page, matching=[same_tool]))

    assert open_ids() == {same_tool}
    assert PendingRequest.objects.get(id=rid).answer["remember"] == "always"


def test_narrowed_to_the_arguments_it_matches_only_identical_calls(operator, mailer):
    rid, identical, other = ask(operator, "s1"), ask(operator, "s2"), ask(operator, "s3", to="x@y.co")

    page = answer(
        operator, rid, {"decision": "approve", "remember": "always", "remember_arguments_only": "1"}
    ).content.decode()

    assert "only exactly these" in page and "ada@example.com" in page
    assert hidden(page, "matching") == [identical] and other not in page


def test_it_counts_only_what_this_operator_may_answer_in_this_tenant(operator, admin, outsider, mailer):
    ApproverGroup.objects.create(tenant=admin.tenant, name="finance")
    make_agent(outsider)
    rid, plain = ask(operator, "s1"), ask(operator, "s2", to="x@y.co")
    ask(outsider, "s3", to="x@y.co")
    routed_tools = [{"name": "send_email", "approval": "always", "approvers": "finance"}]
    mailer.append_version(DefinitionContent.model_validate({"name": "mailer", "tools": routed_tools}), admin.user)
    routed = ask(admin, "s4", to="z@y.co")

    as_operator = answer(operator, rid, {"decision": "approve", "remember": "always"}).content.decode()
    as_admin = admin.client.post(f"/inbox/{rid}/remember/", {"remember": "always"}, **HTMX).content.decode()
    on_routed = operator.client.post(f"/inbox/{routed}/remember/", {"remember": "always"}, **HTMX)

    assert hidden(as_operator, "matching") == [plain]  # not the request routed to finance, nor globex's
    assert hidden(as_admin, "matching") == [plain, routed]  # an admin answers any group's
    assert on_routed.status_code == 403


def test_it_asks_again_when_what_always_covers_changed_since_it_was_shown(operator, mailer):
    rid = ask(operator, "s1")
    page = answer(operator, rid, {"decision": "approve", "remember": "always"}).content.decode()
    narrowed = confirmed(page, remember_arguments_only="1")  # ticked after the confirmation was shown

    again = answer(operator, rid, narrowed).content.decode()

    assert "What “always” would cover changed since it was shown" in again
    assert "only exactly these" in again
    assert PendingRequest.objects.get(id=rid).answer is None


def test_the_choice_brings_the_confirmation_or_the_buttons_and_cancel_changes_nothing(
    operator, mailer, outsider, reader
):
    rid = ask(operator, "s1")
    url = f"/inbox/{rid}/remember/"
    before = snapshot()

    always = operator.client.post(url, {"remember": "always"}, **HTMX).content.decode()
    session = operator.client.post(url, {"remember": "session"}, **HTMX).content.decode()
    cancelled = operator.client.post(url, {"reset": "1"}, **HTMX).content.decode()

    assert "data-confirm-always" in always and "any arguments" in always
    assert session.startswith('<div class="buttons" data-answer-buttons>') and "data-confirm-always" not in session
    assert '<input type="radio" name="remember" value="" checked autofocus> ask next time' in cancelled
    assert snapshot() == before
    assert outsider.client.post(url, {"remember": "always"}).status_code == 404
    assert reader.client.post(url, {"remember": "always"}).status_code == 403
    assert operator.client.get(url).status_code == 405


def test_the_api_remembers_without_a_confirmation_and_with_the_default_expiry(operator, mailer, settings):
    settings.RULE_DEFAULT_EXPIRY = timedelta(hours=12)
    rid = ask(operator, "s1")

    response = operator.api("POST", f"/api/requests/{rid}/responses", {"approved": True, "remember": "always"})

    assert response.status_code == 200 and response.json()["status"] == "accepted", response.content
    stored = PendingRequest.objects.get(id=rid).answer
    assert abs(datetime.fromisoformat(stored["expiresAt"]) - (timezone.now() + timedelta(hours=12))) < timedelta(
        minutes=1
    )
    drain_queued()
    assert Rule.objects.get().expires_at == datetime.fromisoformat(stored["expiresAt"])


def test_an_empty_default_expiry_remembers_for_ever_and_a_given_one_wins(operator, mailer, settings):
    settings.RULE_DEFAULT_EXPIRY = None
    rid, second, third = ask(operator, "s1"), ask(operator, "s2", to="x@y.co"), ask(operator, "s3", to="z@y.co")
    page = answer(operator, rid, {"decision": "approve", "remember": "always"}).content.decode()
    assert "<strong>never</strong>: until someone revokes it" in page
    answer(operator, rid, confirmed(page))
    operator.api("POST", f"/api/requests/{second}/responses", {"approved": True, "remember": "session"})
    given = (timezone.now() + timedelta(days=2)).isoformat()
    body = {"approved": True, "remember": "always", "expiresAt": given}
    operator.api("POST", f"/api/requests/{third}/responses", body)

    drain_queued(3)

    expiries = {str(rule.created_from_id): rule.expires_at for rule in Rule.objects.all()}
    assert expiries == {rid: None, second: None, third: datetime.fromisoformat(given)}


def test_an_adopted_suggestion_holds_the_default_expiry_and_says_so(deployer, operator, admin, settings):  # noqa: F811
    settings.RULE_DEFAULT_EXPIRY = timedelta(hours=12)
    approve_times(operator, admin, 5)

    shown = admin.client.get("/rules/suggestions/", **HTMX).content.decode()
    arguments = json.dumps({"service": "billing", "environment": "staging"})
    admin.client.post("/rules/suggestions/adopt/", {"agent": "deployer", "tool_name": "deploy", "arguments": arguments})

    assert re.search(r"such calls stop asking until <time [^>]+>[^<]+</time> \(in 11\Whours, 59\Wminutes", shown)
    rule = Rule.objects.get()
    assert rule.expires_at is not None
    assert abs(rule.expires_at - (timezone.now() + timedelta(hours=12))) < timedelta(minutes=1)


def test_the_default_expiry_is_a_duration_or_empty_for_never():
    assert env_duration("X", None, {"X": "30d"}) == timedelta(days=30)
    assert env_duration("X", None, {"X": " 12h "}) == timedelta(hours=12)
    assert env_duration("X", None, {"X": "45m"}) == timedelta(minutes=45)
    assert env_duration("X", None, {"X": "90s"}) == timedelta(seconds=90)
    assert env_duration("X", timedelta(days=1), {"X": ""}) is None
    assert env_duration("X", timedelta(days=1), {}) == timedelta(days=1)
    for bad in ("30", "3M", "0d", "1.5h", "-2d", "30 days", "1w"):
        with pytest.raises(EnvError, match=rf'X must be a duration like "30d", "12h".*got {bad!r}'):
            env_duration("X", None, {"X": bad})


def test_it_will_not_start_with_a_bad_default_expiry(tmp_path):
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AIRLOCK_DATA_DIR": str(tmp_path / "data")}
    started = subprocess.run(
        [sys.executable, "-c", "import console.settings"],
        cwd=Path(__file__).resolve().parents[2],
        env={**environ, "RULE_DEFAULT_EXPIRY": "a month"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode != 0
    assert "EnvError: RULE_DEFAULT_EXPIRY must be a duration like" in started.stderr, started.stderr
