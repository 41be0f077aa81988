"""The run pages of the console: the run list with its filters and paging, a run's detail and timeline."""

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent, Checkpoint, Run
from approvals.actions import claim
from approvals.models import ApproverGroup, PendingRequest
from console.humanize import duration
from tests.agents.test_session_timeline import turns_of
from tests.conftest import Persona
from tests.helpers import ask_to_send, run_ok, run_queued, snapshot

HELPER = {"name": "helper", "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time"}]}
SEND_EMAIL = 'call send_email {"to": "a@b.co", "subject": "s", "body": "b"}'


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Every persona hashes a password; the production hasher takes about a second each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_agent(persona: Persona, name: str = "helper") -> Agent:
    return Agent.create(persona.tenant, DefinitionContent.model_validate({**HELPER, "name": name}), persona.user)


@pytest.fixture
def helper(admin) -> Agent:
    return make_agent(admin)


def start(persona: Persona, body: dict[str, Any], agent: str = "helper") -> dict[str, Any]:
    """Start a run through the real API; the answer is the run result."""
    response = persona.api("post", f"/api/agents/{agent}/runs", body)
    assert response.status_code == 200, response.content
    return response.json()


def ask_and_deny(persona: Persona, session: str = "s-1") -> tuple[dict[str, Any], dict[str, Any]]:
    """A run awaiting approval of send_email, and the run that denies it."""
    asked = start(persona, {"message": SEND_EMAIL, "sessionId": session})
    assert asked["status"] == "awaiting_approval"
    request_id = asked["pendingRequests"][0]["requestId"]
    denial = {"requestId": request_id, "approved": False, "reason": "no, not to that address"}
    denied = start(persona, {"sessionId": session, "approvals": [denial]})
    return asked, denied


def table(html: str) -> str:
    """The runs table of a list page (or of its htmx fragment)."""
    match = re.search(r"<table class=\"runs[^\"]*\".*?</table>", html, re.DOTALL)
    assert match, html
    return match.group(0)


def listed(persona: Persona, query: str = "") -> str:
    response = persona.client.get(f"/runs/{query}")
    assert response.status_code == 200
    return table(response.content.decode())


def messages(html: str) -> list[str]:
    """The message column of a runs table, top to bottom (a row per session or run without a session)."""
    return re.findall(r'<td class="message">(.*?)</td>', html)


def row_count(html: str) -> int:
    return len(messages(html))


def test_it_lists_the_runs_of_the_tenant_only(admin, outsider, helper):
    start(admin, {"message": "hello from acme"})
    make_agent(outsider)
    start(outsider, {"message": "hello from globex"})
    html = listed(admin)
    assert "hello from acme" in html
    assert "globex" not in html
    assert "You said" not in html, "the list shows the message, not the output"


def test_it_shows_the_columns_of_a_run(admin, helper):
    start(admin, {"message": "first line\nsecond line", "sessionId": "s-cols"})
    html = listed(admin)
    assert "first line" in html and "second line" not in html
    assert 'href="/agents/helper/versions/1/"' in html
    assert "s-cols" in html
    assert '<span class="pill status-completed">completed</span>' in html
    assert admin.user.username in html
    assert re.search(r"<td class=\"num duration\">[0-9.]+ m?s</td>", html), "the duration"


def test_it_lists_the_newest_run_first(admin, helper):
    for word in ("older", "newer"):
        start(admin, {"message": word})
    html = listed(admin)
    assert html.index("newer") < html.index("older")


def test_it_filters_by_agent(admin, helper):
    make_agent(admin, "mailer")
    start(admin, {"message": "to helper"})
    start(admin, {"message": "to mailer"}, agent="mailer")
    html = listed(admin, "?agent=mailer")
    assert "to mailer" in html and "to helper" not in html


def test_it_filters_by_status(admin, helper):
    start(admin, {"message": "plain"})
    start(admin, {"message": SEND_EMAIL, "sessionId": "s-wait"})
    html = listed(admin, "?status=awaiting_approval")
    assert "send_email" in html and "plain" not in html


def test_it_filters_by_session(admin, helper):
    start(admin, {"message": "in one", "sessionId": "one"})
    start(admin, {"message": "in two", "sessionId": "two"})
    start(admin, {"message": "in none"})
    html = listed(admin, "?session=two")
    assert "in two" in html and "in one" not in html and "in none" not in html


def test_it_filters_by_date(admin, helper):
    for word in ("long ago", "yesterday", "today"):
        start(admin, {"message": word})
    now = timezone.now()
    Run.objects.filter(message="long ago").update(created_at=now - timedelta(days=10))
    Run.objects.filter(message="yesterday").update(created_at=now - timedelta(days=1))
    yesterday = (now - timedelta(days=1)).date().isoformat()
    html = listed(admin, f"?date_from={yesterday}&date_to={yesterday}")
    assert "yesterday" in html and "long ago" not in html and "today" not in html
    html = listed(admin, f"?date_from={yesterday}")
    assert "yesterday" in html and "today" in html and "long ago" not in html


def test_it_ignores_a_filter_that_is_not_valid(admin, helper):
    start(admin, {"message": "still listed"})
    response = admin.client.get("/runs/?status=bogus&date_from=yesterday")
    assert response.status_code == 200
    assert "still listed" in table(response.content.decode())
    assert "Some filters were ignored" in response.content.decode()


def test_it_pages_fifty_runs_at_a_time_keeping_the_filters(admin, helper):
    for number in range(52):
        start(admin, {"message": f"run {number:02d}", "sessionId": "paged"})
    start(admin, {"message": "elsewhere"})
    first = admin.client.get("/runs/?session=paged").content.decode()
    assert messages(table(first)) == [f"run {number:02d}" for number in range(51, 1, -1)]
    assert 'href="?session=paged&amp;page=2"' in first
    second = admin.client.get("/runs/?session=paged&page=2").content.decode()
    assert messages(table(second)) == ["run 01", "run 00"]
    assert 'href="?session=paged&amp;page=1"' in second
    assert "of 52 runs · page 2 of 2" in second


def test_it_serves_only_the_table_to_htmx(admin, helper):
    start(admin, {"message": "hello"})
    response = admin.client.get("/runs/?status=completed", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert "hello" in table(html)
    assert "<html" not in html and "<form" not in html
    assert "HX-Request" in response["Vary"]


def test_it_serves_the_whole_page_to_an_htmx_history_restore(admin, helper):
    response = admin.client.get("/runs/", headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert "<html" in response.content.decode()


def test_it_keeps_the_query_count_of_the_list_flat(admin, helper):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin.client.get("/runs/").status_code == 200
        return len(captured)

    make_agent(admin, "mailer")
    for number in range(3):
        start(admin, {"message": f"run {number}", "sessionId": f"s-{number}"}, agent=["helper", "mailer"][number % 2])
    few = queries()
    for number in range(3, 30):
        start(admin, {"message": f"run {number}", "sessionId": f"s-{number}"}, agent=["helper", "mailer"][number % 2])
    assert row_count(listed(admin)) == 30
    assert queries() == few


def test_it_shows_the_timeline_of_a_run(admin, helper):
    asked, denied = ask_and_deny(admin)
    html = admin.client.get(f"/runs/{asked['runId']}/").content.decode()
    assert "permission.requested" in html
    assert "Asked for approval to call <code>send_email</code>" in html
    assert "&quot;to&quot;: &quot;a@b.co&quot;" in html, "the arguments as pretty JSON"
    assert '<span class="pill request-answered">answered</span>' in html

    html = admin.client.get(f"/runs/{denied['runId']}/").content.decode()
    assert "denied-interactively-by-user" in html
    assert "no, not to that address" in html
    assert f"Answered by <strong>{admin.user.username}</strong>" in html
    assert '<code>send_email</code> <strong class="bad">did not run</strong>' in html
    assert denied["output"] in html and "send_email denied" in denied["output"]
    sequences = [int(n) for n in re.findall(r'id="event-(\d+)"', html)]
    assert sequences == sorted(sequences) and sequences[0] == 1


def test_it_shows_a_decision_by_a_remembered_rule(admin, helper):
    asked = start(admin, {"message": SEND_EMAIL, "sessionId": "s-rule"})
    approval = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True, "remember": True}
    start(admin, {"sessionId": "s-rule", "approvals": [approval]})
    ruled = start(admin, {"message": SEND_EMAIL, "sessionId": "s-rule"})
    html = admin.client.get(f"/runs/{ruled['runId']}/").content.decode()
    rule = re.search(r"Decided by remembered rule <code>([0-9a-f-]{36})</code>", html)
    assert rule and "(by a rule or a policy)" in html
    assert "tool.execution_complete" in html


def test_it_shows_a_client_tool_request_and_its_abandonment(admin):
    client_tool = {"name": "pick_file", "description": "Pick a file.", "parameters": {"type": "object"}}
    Agent.create(
        admin.tenant, DefinitionContent.model_validate({"name": "picker", "clientTools": [client_tool]}), admin.user
    )
    asked = start(admin, {"message": 'call pick_file {"kind": "pdf"}', "sessionId": "s-pick"}, agent="picker")
    moved_on = start(admin, {"message": "never mind", "sessionId": "s-pick", "abandonPending": True}, agent="picker")
    html = admin.client.get(f"/runs/{asked['runId']}/").content.decode()
    assert "Asked the client to run <code>pick_file</code>" in html
    assert '<span class="pill request-abandoned">abandoned</span>' in html
    html = admin.client.get(f"/runs/{moved_on['runId']}/").content.decode()
    assert "The request for <code>pick_file</code> was closed" in html and "abandoned" in html


def test_it_shows_the_error_of_a_failed_run(admin, helper):
    failed = start(admin, {"message": SEND_EMAIL})
    assert failed["status"] == "failed"
    html = admin.client.get(f"/runs/{failed['runId']}/").content.decode()
    assert "session_required" in html and 'role="alert"' in html


def test_it_links_the_session_chain_both_ways(admin, helper):
    asked, denied = ask_and_deny(admin)
    first = admin.client.get(f"/runs/{asked['runId']}/").content.decode()
    assert f'<a href="/runs/{denied["runId"]}/" rel="next">' in first
    second = admin.client.get(f"/runs/{denied['runId']}/").content.decode()
    assert f'<a href="/runs/{asked["runId"]}/" rel="prev">' in second
    items = turns_of(second)
    assert len(items) == 2
    assert f'href="/runs/{asked["runId"]}/"' in items[0] and "call send_email" in items[0]
    assert 'aria-current="true"' in items[1] and "this run" in items[1]


def test_it_hides_another_tenants_run(admin, outsider, helper):
    run = start(admin, {"message": "private"})
    assert outsider.client.get(f"/runs/{run['runId']}/").status_code == 404
    assert "private" not in outsider.client.get("/runs/").content.decode()


def test_it_lets_a_reader_see_runs(admin, reader, helper):
    run = start(admin, {"message": "for everyone"})
    assert "for everyone" in listed(reader)
    response = reader.client.get(f"/runs/{run['runId']}/")
    assert response.status_code == 200 and "You said: for everyone" in response.content.decode()


@pytest.mark.parametrize("path", ["/runs/", "/runs/00000000-0000-0000-0000-000000000000/"])
def test_it_sends_anonymous_visitors_to_log_in(client, db, path):
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_it_escapes_the_message_on_both_pages(admin, helper):
    run = start(admin, {"message": "<script>alert(1)</script>"})
    for path in ("/runs/", f"/runs/{run['runId']}/"):
        html = admin.client.get(path).content.decode()
        assert "<script>alert(1)</script>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.042, "42 ms"), (5.64, "5.6 s"), (125, "2 min 5 s"), (3 * 3600 + 360, "3 h 6 min")]
)
def test_it_writes_durations_for_people(seconds, text):
    start = timezone.now()
    assert duration(start, start + timedelta(seconds=seconds)) == text
    assert duration(start, None) == ""


# --- queued runs: the Jobs panel, the lane filter, cancel ------------------------------------------


def queue_run(persona: Persona, body: dict[str, Any], agent: str = "helper") -> str:
    response = persona.api("post", f"/api/agents/{agent}/runs", body, HTTP_PREFER="respond-async")
    assert response.status_code == 202, response.content
    return response.json()["runId"]


def jobs_panel(persona: Persona) -> str:
    response = persona.client.get("/runs/jobs/")
    assert response.status_code == 200
    return response.content.decode()


def lane_row(html: str, lane: str) -> list[str]:
    """The cells of a lane's row in the Jobs panel, as text."""
    match = re.search(rf"<tr>\s*<td><a [^>]*><code>{re.escape(lane)}</code></a></td>(.*?)</tr>", html, re.DOTALL)
    assert match, html
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", match.group(1), re.S)]


def test_the_jobs_panel_counts_queued_running_and_failed_runs_by_lane(admin, outsider, helper, settings):
    settings.RUN_LANES = {"mail": 2}
    for number in range(3):
        queue_run(admin, {"message": f"mail {number}", "lane": "mail"})
    running = queue_run(admin, {"message": "report"})
    from agents import claiming

    assert claiming.claim_task("page-test", ["default"]) is not None
    Run.objects.create(tenant=admin.tenant, agent=helper, version=helper.versions.get(), status="failed", lane="mail")
    make_agent(outsider)
    queue_run(outsider, {"message": "theirs", "lane": "mail"})

    html = admin.client.get("/runs/").content.decode()

    assert lane_row(html, "mail")[:4] == ["3", "0", "2", "1"]
    assert lane_row(html, "default")[:4] == ["0", "1", "4", "0"]
    assert 'hx-trigger="every 3s"' in html  # it refreshes itself while runs wait or run
    assert lane_row(jobs_panel(admin), "mail")[:4] == ["3", "0", "2", "1"]
    assert Run.objects.get(id=running).status == "running"


def test_the_jobs_panel_rests_when_nothing_waits(admin, helper):
    start(admin, {"message": "done"})

    html = jobs_panel(admin)

    assert "No queued or running runs" in html
    assert "hx-trigger" not in html


def test_it_filters_by_lane(admin, helper):
    queue_run(admin, {"message": "in mail", "lane": "mail"})
    start(admin, {"message": "in default"})

    assert messages(listed(admin, "?lane=mail")) == ["in mail"]
    assert row_count(listed(admin, "?lane=NOT%20A%20LANE")) == 2


def test_an_operator_cancels_a_queued_run_from_its_page(admin, operator, helper):
    run_id = queue_run(admin, {"message": "never", "sessionId": "q"})
    page = operator.client.get(f"/runs/{run_id}/").content.decode()
    assert f'action="/runs/{run_id}/cancel/"' in page

    response = operator.client.post(f"/runs/{run_id}/cancel/", follow=True)

    assert response.status_code == 200
    assert "Cancelled the queued run." in response.content.decode()
    assert Run.objects.get(id=run_id).status == "cancelled"


def test_it_refuses_cancel_to_a_reader_and_to_another_tenant(admin, reader, outsider, helper):
    run_id = queue_run(admin, {"message": "wait"})
    assert 'action="/runs/' not in reader.client.get(f"/runs/{run_id}/").content.decode()
    before = snapshot()

    assert reader.client.post(f"/runs/{run_id}/cancel/").status_code == 403
    assert outsider.client.post(f"/runs/{run_id}/cancel/").status_code == 404

    assert snapshot() == before
    assert Run.objects.get(id=run_id).status == "queued"


def test_it_says_a_finished_run_has_nothing_to_cancel(admin, helper):
    done = start(admin, {"message": "hi"})

    response = admin.client.post(f"/runs/{done['runId']}/cancel/", follow=True)

    assert "nothing to cancel" in response.content.decode()
    assert Run.objects.get(id=done["runId"]).status == "completed"


# ---- honest states (issue 16, item 2) -------------------------------------------------------------------


def test_an_answered_run_says_what_happened_after_it_and_is_not_listed_as_waiting(operator, assistant):
    answered = ask_to_send(operator, "s1")
    waiting = ask_to_send(operator, "s2")
    body = {"requestId": answered["pendingRequests"][0]["requestId"], "approved": True}
    outcome = operator.api("POST", f"/api/runs/{answered['runId']}/responses", body).json()
    continued = run_queued(outcome["continuationRunId"])

    listed = operator.client.get("/runs/?status=awaiting_approval").content.decode()
    assert waiting["runId"] in listed and answered["runId"] not in listed  # still waiting means still waiting
    everything = operator.client.get("/runs/").content.decode()
    assert "answered by otto" in everything and f'href="/runs/{continued.id}/"' in everything
    page = operator.client.get(f"/runs/{answered['runId']}/").content.decode()
    assert "answered by otto" in page and f"continued in run {str(continued.id)[:8]}" in page
    assert (
        "answered by" not in operator.client.get(f"/runs/{waiting['runId']}/").content.decode().split("<h1>")[1][:400]
    )


# ---- the list groups by session (issue 16, item 2) ---------------------------------------------------------


def rows_of(html: str) -> list[str]:
    """The rows of a runs table: a `<tbody>` per session or run without a session."""
    return re.findall(r'<tbody class="(?:session-group|single)">.*?</tbody>', html, re.DOTALL)


def cell(row: str, column: str) -> str:
    """A cell of a row, by its column's class, as text."""
    match = re.search(rf'<td class="(?:num )?{column}">(.*?)</td>', row, re.DOTALL)
    assert match, row
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", match.group(1))).strip()


def test_it_lists_a_row_per_session_with_its_latest_state_and_its_runs_folded(operator, assistant):
    asked = ask_to_send(operator, "s1")
    body = {"requestId": asked["pendingRequests"][0]["requestId"], "approved": True}
    outcome = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()
    continued = run_queued(outcome["continuationRunId"])
    said = run_ok(operator, {"message": "and now?", "sessionId": "s1"})
    one_off = run_ok(operator, {"message": "no session here"})

    [single, session] = rows_of(listed(operator))

    assert "no session here" in cell(single, "message") and cell(single, "turns") == "—"
    assert f'href="/runs/{one_off["runId"]}/"' in single and "<details" not in single
    # The session's row is its latest run: its state, its message, and the session's number of turns.
    assert cell(session, "status") == "completed" and cell(session, "message") == "and now?"
    assert cell(session, "turns") == "3" and cell(session, "session") == "s1"
    assert f'<td class="when"><a href="/runs/{said["runId"]}/"' in session
    # Unfolded (a <details>, no JavaScript needed): the session's runs, newest first, with what happened after each.
    folded = re.search(r"<details>\s*<summary>Its 3 turns</summary>(.*?)</details>", session, re.DOTALL)
    assert folded, session
    linked = re.findall(r'<a class="when" href="/runs/([^/]+)/"', folded.group(1))
    assert linked == [said["runId"], str(continued.id), asked["runId"]]
    assert "answered by otto" in folded.group(1) and "call send_email" in folded.group(1)
    assert "2 rows" in operator.client.get("/runs/").content.decode()


def test_a_waiting_session_says_what_it_waits_on_and_who_claimed_it(operator, assistant):
    asked = ask_to_send(operator, "s1")
    claim(operator.membership, PendingRequest.objects.get(id=asked["pendingRequests"][0]["requestId"]))
    run_ok(operator, {"message": "hello", "sessionId": "s2"})

    [done, waiting] = rows_of(listed(operator))

    assert cell(waiting, "status") == "awaiting approval waits on approval of send_email (claimed by otto)"
    assert "waits on" not in done
    assert [cell(row, "session") for row in rows_of(listed(operator, "?status=awaiting_approval"))] == ["s1"]


def test_a_routed_request_says_which_group_it_waits_for(admin, operator, acme):
    ApproverGroup.objects.create(tenant=acme, name="finance")
    tools = [{"name": "send_email", "approval": "always", "approvers": "finance"}]
    Agent.create(acme, DefinitionContent.model_validate({"name": "mailer", "tools": tools}), admin.user)
    start(operator, {"message": SEND_EMAIL, "sessionId": "s1"}, agent="mailer")

    [row] = rows_of(listed(operator))

    assert cell(row, "status") == "awaiting approval waits on approval of send_email for finance"


def test_a_session_is_listed_when_any_of_its_runs_is_picked_and_shows_its_state_now(operator, assistant):
    run_ok(operator, {"message": "first", "sessionId": "s1"})
    Run.objects.filter(message="first").update(status="failed")
    run_ok(operator, {"message": "second", "sessionId": "s1"})
    run_ok(operator, {"message": "elsewhere", "sessionId": "s2"})

    [row] = rows_of(listed(operator, "?status=failed"))

    assert cell(row, "session") == "s1" and cell(row, "status") == "completed" and cell(row, "message") == "second"
    assert "<summary>1 of its 2 turns picked by the filters</summary>" in row
    folded = re.search(r"<details>.*?</details>", row, re.DOTALL)
    assert folded and "first" in folded.group(0) and "second" not in folded.group(0)


def test_a_forked_session_says_where_it_was_forked_from(operator, assistant):
    asked = ask_to_send(operator, "s1")
    request_id = asked["pendingRequests"][0]["requestId"]
    first = operator.api("POST", f"/api/runs/{asked['runId']}/responses", {"requestId": request_id, "approved": True})
    run_queued(first.json()["continuationRunId"])
    at = str(Checkpoint.objects.get(run_id=asked["runId"]).id)
    body = {"requestId": request_id, "approved": False, "checkpointId": at}
    fork = operator.api("POST", f"/api/runs/{asked['runId']}/responses", body).json()
    run_queued(fork["continuationRunId"])

    rows = {cell(row, "session").split(" ")[0][:8]: row for row in rows_of(listed(operator))}

    forked = rows[fork["sessionId"][:8]]
    assert f'forked from <a href="/runs/{asked["runId"]}/">s1 at turn 1</a>' in forked
    assert "forked from" not in rows["s1"]


def test_a_deleted_session_keeps_its_row_and_says_so(operator, assistant):
    run_ok(operator, {"message": "before", "sessionId": "s1"})
    assert operator.api("DELETE", "/api/sessions/s1").status_code == 204
    run_ok(operator, {"message": "a new session, the same key", "sessionId": "s1"})

    newer, deleted = rows_of(listed(operator))

    assert cell(newer, "session") == "s1" and cell(deleted, "session") == "s1 (deleted)"
    assert cell(deleted, "message") == "before"


def test_it_pages_rows_not_runs(operator, assistant, monkeypatch):
    monkeypatch.setattr("agents.views.run_list_pages.RUNS_PER_PAGE", 2)
    for session in ("a", "b", "c"):
        for word in ("one", "two"):
            run_ok(operator, {"message": f"{session} {word}", "sessionId": session})

    first = operator.client.get("/runs/").content.decode()
    second = operator.client.get("/runs/?page=2").content.decode()

    assert [cell(row, "message") for row in rows_of(first)] == ["c two", "b two"]
    assert [cell(row, "message") for row in rows_of(second)] == ["a two"]
    assert "3–3 of 3 rows · page 2 of 2" in second


def test_the_grouped_list_asks_a_bounded_number_of_queries(operator, assistant, django_assert_max_num_queries):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator.client.get("/runs/").status_code == 200
        return len(captured)

    ask_to_send(operator, "waiting-0")
    run_ok(operator, {"message": "alone"})
    for message in ("hello", "again"):
        run_ok(operator, {"message": message, "sessionId": "two-turns"})
    few = queries()
    for number in range(30):
        run_ok(operator, {"message": "hello", "sessionId": f"s-{number}"})
        run_ok(operator, {"message": "again", "sessionId": f"s-{number}"})
        ask_to_send(operator, f"waiting-{number + 1}")
    assert row_count(listed(operator)) == 50

    with django_assert_max_num_queries(few):
        operator.client.get("/runs/")
    assert operator.client.get("/runs/?status=awaiting_approval&agent=assistant").status_code == 200
