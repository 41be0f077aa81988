"""The dashboard (SPEC section 6, issue 16 item 8): the oldest waiting requests, the failed and blocked runs
of the last 7 days, the 14-day chart of requests opened and time to decision, and what to do next when
there is nothing yet; for every role, scoped to the tenant, in a bounded number of queries."""

import re
from datetime import date, datetime, time, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agents.models import Run, RunStatus
from approvals.models import ApproverGroup, PendingRequest, RequestStatus
from console.views.dashboard_pages import CHART_DAYS, TROUBLE_SHOWN, WAITING_SHOWN, days
from tests.conftest import Persona
from tests.helpers import ask_to_send, make_agent, run_ok


def page(persona: Persona) -> str:
    response = persona.client.get("/")
    assert response.status_code == 200
    return response.content.decode()


def asking(persona: Persona, session: str = "s1") -> PendingRequest:
    """A real run of the persona's tenant waiting on an approval: the run the requests below hang on."""
    make_agent(persona)
    return PendingRequest.objects.get(id=ask_to_send(persona, session)["pendingRequests"][0]["requestId"])


def request_like(
    first: PendingRequest, opened: datetime, answered: datetime | None = None, **fields: Any
) -> PendingRequest:
    """Another request of `first`'s run, opened (and answered: approved) when given."""
    if answered is not None:
        fields |= {"answer": {"approved": True}, "status": RequestStatus.ANSWERED}
    return PendingRequest.objects.create(
        tenant=first.tenant,
        agent=first.agent,
        session=first.session,
        run=first.run,
        kind="approval",
        tool_name=fields.pop("tool_name", "send_email"),
        call_id=f"call-{opened.isoformat()}-{PendingRequest.objects.count()}",
        opened_at=opened,
        answered_at=answered,
        **fields,
    )


def at(days_ago: int, hour: int, minute: int = 0) -> datetime:
    """A time `days_ago` days before today, in the current time zone (the chart's days)."""
    day = timezone.localdate() - timedelta(days=days_ago)
    return timezone.make_aware(datetime.combine(day, time(hour, minute)))


def minutes(*values: float) -> list[timedelta]:
    return [timedelta(minutes=v) for v in values]


# --- the chart's numbers ---------------------------------------------------------------------------


@pytest.fixture
def history(admin, outsider) -> PendingRequest:
    """Known decisions: 3 days ago four requests opened and decided after 1, 2, 3 and 10 minutes; yesterday
    five decided after 1, 2, 3, 10 and 20 minutes (opened then too); one opened 5 days ago at 23:00 and
    decided 4 days ago at 01:00; one 20 days ago (out of the chart); the same again in another tenant."""
    first = asking(admin)
    theirs = asking(outsider)
    for template in (first, theirs):
        for waited in minutes(1, 2, 3, 10):
            request_like(template, at(3, 9), at(3, 9) + waited)
        for waited in minutes(20, 1, 10, 3, 2):  # not in order: the ranking sorts them
            request_like(template, at(1, 14), at(1, 14) + waited)
        request_like(template, at(5, 23), at(4, 1))
        request_like(template, at(20, 9), at(20, 10))
    return first


def test_it_counts_each_day_s_requests_and_decision_times(history, admin):
    chart_days = days(admin.tenant, timezone.localdate())
    by_age = {(timezone.localdate() - d.day).days: d for d in chart_days}

    assert len(chart_days) == CHART_DAYS
    assert [d.day for d in chart_days] == sorted(d.day for d in chart_days)
    # Three days ago: four decisions, the median between the two middle ones, the 90th percentile the 4th.
    assert (by_age[3].opened, by_age[3].decided) == (4, 4)
    assert (by_age[3].median, by_age[3].p90) == (timedelta(minutes=2.5), timedelta(minutes=10))
    # Yesterday: five decisions, the middle one, and ceil(0.9 * 5) = the 5th.
    assert (by_age[1].opened, by_age[1].decided) == (5, 5)
    assert (by_age[1].median, by_age[1].p90) == (timedelta(minutes=3), timedelta(minutes=20))
    # A decision counts on the day it was made, its request on the day it was opened.
    assert (by_age[5].opened, by_age[5].decided, by_age[5].median) == (1, 0, None)
    assert (by_age[4].opened, by_age[4].decided, by_age[4].median) == (0, 1, timedelta(hours=2))
    # Today: the request the run opened, still waiting.
    assert (by_age[0].opened, by_age[0].decided, by_age[0].median) == (1, 0, None)
    # Days with nothing are there, with zeros.
    quiet = [d for age, d in by_age.items() if age not in (0, 1, 3, 4, 5)]
    assert len(quiet) == CHART_DAYS - 5
    assert all((d.opened, d.decided, d.median, d.p90) == (0, 0, None, None) for d in quiet)


def row_head(day: date) -> str:
    return f'<span class="weekday">{day:%a} </span>{day.day} {day:%b}'


def test_it_shows_the_numbers_beside_the_chart(history, admin):
    html = page(admin)
    rows = re.findall(r'<tr><th scope="row">(.+?)</th>((?:<td class="num">[^<]*</td>)+)</tr>', html)
    cells = {day: re.findall(r'<td class="num">([^<]*)</td>', tds) for day, tds in rows}

    yesterday, three_ago = (timezone.localdate() - timedelta(days=n) for n in (1, 3))
    assert len(cells) == CHART_DAYS
    assert cells[row_head(yesterday)] == ["5", "5", "3 min 0 s", "20 min 0 s"]
    assert cells[row_head(three_ago)] == ["4", "4", "2 min 30 s", "10 min 0 s"]
    assert sum(1 for v in cells.values() if v == ["0", "0", "—", "—"]) == CHART_DAYS - 5


def test_it_draws_the_chart_as_an_accessible_svg(history, admin):
    html = page(admin)
    svg = re.search(r"<svg class=\"chart\".*?</svg>", html, re.S)

    assert svg is not None
    assert 'role="img"' in svg.group() and 'aria-labelledby="chart-title chart-desc"' in svg.group()
    assert '<title id="chart-title">' in svg.group() and '<desc id="chart-desc">' in svg.group()
    # A bar for each day that opened requests (today, yesterday, 3 and 5 days ago), 14 day labels.
    assert len(re.findall(r'<rect class="bar"', svg.group())) == 4
    assert len(re.findall(r'<text class="day', svg.group())) == CHART_DAYS
    # Three days with decisions (yesterday, 3 and 4 days ago): three median points; the two of 4 and 3
    # days ago are joined, yesterday's after a gap starts a new segment.
    median = re.search(r'<path class="line median" d="([^"]+)"', svg.group())
    assert median is not None and median.group(1).count("M") == 2 and median.group(1).count("L") == 1
    assert len(re.findall(r'<circle class="point median"', svg.group())) == 3
    # The right axis counts in hours: the longest 90th percentile is 2 hours.
    assert "hours to decide" in svg.group()


def test_it_counts_only_the_tenant_s_requests(history, outsider):
    chart_days = days(outsider.tenant, timezone.localdate())
    assert sum(d.opened for d in chart_days) == 1 + 4 + 5 + 1
    assert sum(d.decided for d in chart_days) == 4 + 5 + 1
    ids = set(PendingRequest.objects.filter(tenant=history.tenant).values_list("id", flat=True))
    html = page(outsider)
    assert not any(str(i) in html for i in ids)


# --- oldest waiting requests -------------------------------------------------------------------------


def test_it_lists_the_oldest_waiting_requests_first_with_their_age_deadline_and_claim(admin):
    first = asking(admin)
    older = request_like(
        first,
        timezone.now() - timedelta(hours=2, minutes=10),
        tool_name="get_user_location",
        expires_at=timezone.now() + timedelta(hours=1),
        claimed_by=admin.user,
        claimed_at=timezone.now(),
    )
    request_like(first, timezone.now() - timedelta(days=2), timezone.now(), tool_name="answered_tool")
    html = page(admin)
    listed = re.findall(r'href="/inbox/#request-([0-9a-f-]+)"', html)

    assert listed == [str(older.id), str(first.id)]
    assert "answered_tool" not in html
    item = html[html.index(f"#request-{older.id}") :]
    item = item[: item.index("</li>")]
    assert "get_user_location" in item
    assert "waiting <time" in item and "2\xa0hours, 10\xa0minutes</time>" in item
    assert "· deadline" in item and "(in 59\xa0minutes)" in item
    assert "claimed by <strong>ada</strong>" in item


def test_it_shows_a_few_of_many_waiting_requests_and_links_to_all(admin):
    first = asking(admin)
    for n in range(WAITING_SHOWN + 2):
        request_like(first, timezone.now() - timedelta(minutes=n + 1))
    html = page(admin)

    assert len(re.findall(r'href="/inbox/#request-', html)) == WAITING_SHOWN
    assert f"All {WAITING_SHOWN + 3} in the inbox" in html


@pytest.fixture
def routed_request(admin, operator, acme) -> PendingRequest:
    """A request routed to the finance group, which has no member among the personas."""
    ApproverGroup.objects.create(tenant=acme, name="finance")
    first = asking(admin)
    return request_like(first, timezone.now() - timedelta(hours=1), approvers="finance")


def test_it_marks_a_request_routed_to_another_group_read_only(routed_request, admin, operator):
    for persona, read_only in ((operator, True), (admin, False)):
        html = page(persona)
        item = html[html.index(f"#request-{routed_request.id}") :]
        item = item[: item.index("</li>")]
        assert "for finance" in item
        assert ('class="pill read-only"' in item) is read_only


def test_a_member_of_the_group_may_answer_it(routed_request, operator):
    ApproverGroup.objects.get(name="finance").members.add(operator.user)
    assert 'class="pill read-only"' not in page(operator)


def test_a_reader_sees_the_requests_and_no_action_of_an_operator(routed_request, reader):
    html = page(reader)
    assert f"#request-{routed_request.id}" in html
    assert "operators answer them" in html
    assert 'class="pill read-only"' not in html  # all of it is read-only for a reader: said once
    assert 'href="/trial/"' not in html and 'href="/agents/new/"' not in html
    assert "<form" not in html.split("<main", 1)[1]


def test_it_says_when_nothing_is_waiting(admin, agent):
    run_ok(admin, {"message": "hello"}, agent.name)
    assert "Nothing is waiting." in page(admin)


# --- failed and blocked runs -------------------------------------------------------------------------


def ended(run: Run, status: str, error: dict[str, Any], created_at: datetime) -> Run:
    Run.objects.filter(pk=run.pk).update(status=status, error=error, created_at=created_at)
    return Run.objects.get(pk=run.pk)


def a_run(persona: Persona, session: str) -> Run:
    return Run.objects.get(id=run_ok(persona, {"message": "hello", "sessionId": session})["runId"])


def test_it_lists_the_runs_failed_or_blocked_in_the_last_seven_days(admin, outsider):
    make_agent(admin)
    make_agent(outsider)
    now = timezone.now()
    failed = ended(a_run(admin, "a"), RunStatus.FAILED, {"code": "provider_timeout", "message": "Too slow."}, now)
    blocked = ended(
        a_run(admin, "b"),
        RunStatus.BLOCKED,
        {"point": "input", "reason": "pii", "message": "No card numbers."},
        now - timedelta(days=1),
    )
    old = ended(a_run(admin, "c"), RunStatus.FAILED, {"code": "old_failure", "message": ""}, now - timedelta(days=8))
    theirs = ended(a_run(outsider, "d"), RunStatus.FAILED, {"code": "their_failure", "message": ""}, now)
    fine = a_run(admin, "e")
    html = page(admin)
    linked = re.findall(r'href="/runs/([0-9a-f-]+)/"', html)

    assert linked == [str(failed.id), str(blocked.id)]
    assert str(old.id) not in html and str(theirs.id) not in html and str(fine.id) not in html
    assert "<code>provider_timeout</code>" in html and "Too slow." in html
    assert "a policy at <code>input</code> · <code>pii</code>" in html and "No card numbers." in html
    assert 'href="/runs/?status=failed"' in html and 'href="/runs/?status=blocked"' in html


def test_it_shows_the_newest_failures_only(admin):
    make_agent(admin)
    now = timezone.now()
    runs = [
        ended(a_run(admin, f"s{n}"), RunStatus.FAILED, {"code": "boom", "message": ""}, now - timedelta(minutes=n))
        for n in range(TROUBLE_SHOWN + 1)
    ]
    linked = re.findall(r'href="/runs/([0-9a-f-]+)/"', page(admin))
    assert linked == [str(r.id) for r in runs[:TROUBLE_SHOWN]]


def test_it_says_when_nothing_failed(admin, agent):
    run_ok(admin, {"message": "hello"}, agent.name)
    assert "No run failed or was blocked in the last 7 days." in page(admin)


# --- what to do next ---------------------------------------------------------------------------------


def test_without_agents_it_asks_an_admin_to_create_one(admin, operator, reader):
    html = page(admin)
    assert '<a class="button" href="/agents/new/">Create an agent</a>' in html
    assert "Nothing is waiting." in html and "No request was opened or decided in the last 14 days." in html
    assert "<svg" not in html
    for persona in (operator, reader):
        html = page(persona)
        assert "No agents yet" in html and "An admin of Acme creates the agents" in html
        assert 'href="/agents/new/"' not in html


def test_with_agents_but_no_runs_it_offers_a_trial_run_to_operators(agent, admin, operator, reader):
    for persona in (admin, operator):
        assert '<a class="button" href="/trial/">Try one in a trial run</a>' in page(persona)
    html = page(reader)
    assert "No runs yet" in html and 'href="/trial/"' not in html


def test_once_something_ran_it_shows_no_next_step(admin, agent):
    run_ok(admin, {"message": "hello"}, agent.name)
    html = page(admin)
    assert "No runs yet" not in html and "No agents yet" not in html


# --- cost ----------------------------------------------------------------------------------------------


def test_it_reads_a_bounded_number_of_queries_however_much_happened(history, admin, django_assert_max_num_queries):
    """The whole page, with its layout (session, user, membership, pending count), in a fixed number of
    queries: no query per day, per request or per run."""
    make_agent(admin, name="second")
    for n in range(30):
        request_like(history, at(n % CHART_DAYS, 8), at(n % CHART_DAYS, 9) if n % 3 else None, tool_name=f"t{n}")
    ApproverGroup.objects.create(tenant=admin.tenant, name="finance")
    request_like(history, at(13, 7), approvers="finance", claimed_by=User.objects.get(username="ada"))
    for n in range(5):
        ended(a_run(admin, f"f{n}"), RunStatus.FAILED, {"code": "boom", "message": ""}, timezone.now())
    with django_assert_max_num_queries(12):
        page(admin)


def waiting_part(persona: Persona) -> str:
    """The waiting list as the page asks for it again on a push (htmx)."""
    response = persona.client.get("/", headers={"HX-Request": "true"})
    assert response.status_code == 200
    return response.content.decode()


def test_its_waiting_list_comes_again_with_the_count_it_agrees_with(admin):
    first = asking(admin)
    part = waiting_part(admin)
    assert part.startswith('\n<section class="panel dash-waiting" id="dash-waiting"')
    assert "<h1>" not in part and "dash-trouble" not in part  # the list alone, without the chart's queries
    assert 'hx-trigger="airlock:push from:document delay:300ms"' in part
    assert '<span class="badge" data-live-pending>1</span>' in part
    assert re.findall(r'href="/inbox/#request-([0-9a-f-]+)"', part) == [str(first.id)]

    for n in range(WAITING_SHOWN + 1):
        request_like(first, timezone.now() - timedelta(minutes=n + 1))
    PendingRequest.objects.filter(pk=first.pk).update(status=RequestStatus.ANSWERED, answer={"approved": True})
    part = waiting_part(admin)
    shown = re.findall(r'href="/inbox/#request-([0-9a-f-]+)"', part)
    total = PendingRequest.objects.open().filter(tenant=admin.tenant).count()
    assert len(shown) == WAITING_SHOWN and str(first.id) not in shown
    assert f'<span class="badge" data-live-pending>{total}</span>' in part
    assert f"All {total} in the inbox" in part
    assert page(admin).count(f"All {total} in the inbox") == 1


def test_an_outsider_s_waiting_list_has_none_of_the_tenant_s_requests(admin, outsider):
    asking(admin)
    part = waiting_part(outsider)
    assert "Nothing is waiting" in part
    assert '<span class="badge" data-live-pending>0</span>' in part
