"""The audit page and its exports: every human answer, every terminal closing and every rule decision,
with who, when and why; filters, paging, CSV and JSON exports, tenancy, escaping and query counts."""

import csv
import io
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.definitions import DefinitionContent
from agents.models import Agent, Event
from agents.request_kinds import RequestKind
from approvals.audit_queries import Criteria, entry_keys, iter_entries
from approvals.models import PendingRequest, RequestStatus, Rule
from approvals.views.audit_pages import CSV_COLUMNS
from tests.conftest import Persona, make_persona

SEND_EMAIL = 'call send_email {"to": "a@b.co", "subject": "s", "body": "b"}'
EMAIL = {"to": "a@b.co", "subject": "s", "body": "b"}


def make_mailer(persona: Persona, name: str = "mailer") -> Agent:
    content = {
        "name": name,
        "tools": [{"name": "send_email", "approval": "always"}],
        "clientTools": [{"name": "get_location", "parameters": {"type": "object", "properties": {}}}],
    }
    return Agent.create(persona.tenant, DefinitionContent.model_validate(content), persona.user)


@pytest.fixture
def mailer(admin) -> Agent:
    return make_mailer(admin)


def turn(persona: Persona, body: dict[str, Any], agent: str = "mailer") -> dict[str, Any]:
    response = persona.api("post", f"/api/agents/{agent}/runs", body)
    assert response.status_code == 200, response.content
    return response.json()


def ask(persona: Persona, session: str = "s1", message: str = SEND_EMAIL, agent: str = "mailer") -> dict[str, Any]:
    """A run that waits for one request; the request as the run result lists it (with the run id)."""
    result = turn(persona, {"message": message, "sessionId": session}, agent)
    assert result["status"].startswith("awaiting_"), result
    return {**result["pendingRequests"][0], "runId": result["runId"], "sessionId": session}


def approve(persona: Persona, asked: dict[str, Any], **answer: Any) -> dict[str, Any]:
    approval = {"requestId": asked["requestId"], "approved": True, **answer}
    return turn(persona, {"sessionId": asked["sessionId"], "approvals": [approval]})


def deny(persona: Persona, asked: dict[str, Any], reason: str) -> dict[str, Any]:
    denial = {"requestId": asked["requestId"], "approved": False, "reason": reason}
    return turn(persona, {"sessionId": asked["sessionId"], "approvals": [denial]})


def request(asked: dict[str, Any]) -> PendingRequest:
    return PendingRequest.objects.get(pk=asked["requestId"])


def audit_html(persona: Persona, query: str = "", **headers: str) -> str:
    response = persona.client.get(f"/audit/{query}", **headers)
    assert response.status_code == 200, response.content
    return response.content.decode()


def rows(html: str) -> list[str]:
    """The entries of the audit table, newest first, each as its row's HTML."""
    return re.findall(r'<tr class="entry .*?</tr>', html, re.DOTALL)


def cell(row: str, name: str) -> str:
    """The text of one cell of a row, tags removed and whitespace collapsed."""
    match = re.search(rf'<td class="{name}">(.*?)</td>', row, re.DOTALL)
    assert match, row
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def export(persona: Persona, query: str) -> Any:
    response = persona.client.get(f"/audit/{query}")
    assert response.status_code == 200
    return response


def exported_csv(persona: Persona, query: str = "?format=csv") -> list[dict[str, str]]:
    response = export(persona, query)
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith("attachment;")
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def exported_json(persona: Persona, query: str = "?format=json") -> list[dict[str, Any]]:
    response = export(persona, query)
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"].startswith("attachment;")
    return json.loads(b"".join(response.streaming_content))


def local(moment: Any) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")


def test_it_shows_a_human_denial_with_who_when_why(reader, operator, mailer):
    asked = ask(operator)
    deny(operator, asked, "not to that address")
    denied = request(asked)
    [row] = rows(audit_html(reader))
    assert cell(row, "when") == local(denied.answered_at)
    assert cell(row, "actor") == "otto with the next run request"
    assert cell(row, "outcome") == "denied"
    assert cell(row, "why") == "not to that address"
    assert "approval send_email" in cell(row, "request")
    assert "&quot;to&quot;: &quot;a@b.co&quot;" in row
    assert f'href="/runs/{asked["runId"]}/"' in row
    assert cell(row, "agent") == "mailer"


def test_it_shows_the_asked_and_the_edited_arguments_of_an_approval(operator, mailer):
    asked = ask(operator)
    approve(operator, asked, overrideArguments={**EMAIL, "to": "ops@b.co"}, reason="fixed the address")
    [row] = rows(audit_html(operator))
    assert cell(row, "outcome") == "approved with edited arguments"
    assert cell(row, "why") == "fixed the address"
    request_cell = cell(row, "request")
    assert "Asked" in request_cell and '"to": "a@b.co"' in request_cell.replace("&quot;", '"')
    assert "Approved as" in request_cell and '"to": "ops@b.co"' in request_cell.replace("&quot;", '"')
    [entry] = exported_json(operator)
    assert entry["arguments"] == EMAIL
    assert entry["overrideArguments"] == {**EMAIL, "to": "ops@b.co"}


def test_it_links_the_remembered_rule_and_the_decisions_it_makes(operator, mailer):
    asked = ask(operator)
    approve(operator, asked, remember=True)
    rule = Rule.objects.get()
    assert rule.created_from_id == request(asked).id
    decided = turn(operator, {"message": SEND_EMAIL, "sessionId": "s1"})
    assert decided["status"] == "completed"
    by_rule, remembered = rows(audit_html(operator))

    assert cell(remembered, "outcome") == f"approved and remembered remembered as rule {str(rule.id)[:8]}…"
    assert f'href="/rules/#rule-{rule.id}"' in remembered
    assert cell(remembered, "actor") == "otto with the next run request"

    event = Event.objects.get(type="request.answered", data__ruleId=str(rule.id))
    assert cell(by_rule, "when") == local(event.timestamp)
    assert f'href="/rules/#rule-{rule.id}"' in cell_html(by_rule, "actor")
    assert cell(by_rule, "outcome") == "approved by rule"
    assert cell(by_rule, "why").startswith("A remembered rule approved the call (remembered by otto on ")
    assert "approval send_email" in cell(by_rule, "request")
    assert f'href="/runs/{decided["runId"]}/"' in by_rule

    newest = exported_json(operator)[0]
    assert newest["who"] == f"rule {rule.id}"
    assert newest["actor"] == "rule"
    assert newest["ruleId"] == str(rule.id)
    assert newest["arguments"] == EMAIL
    assert newest["requestId"] is None


def cell_html(row: str, name: str) -> str:
    match = re.search(rf'<td class="{name}">(.*?)</td>', row, re.DOTALL)
    assert match, row
    return match.group(1)


def test_it_records_closings_as_the_system_apart_from_a_human_no(operator, mailer):
    abandoned = ask(operator, session="s1")
    turn(operator, {"message": "x", "sessionId": "s1", "abandonPending": True})
    expired = ask(operator, session="s2")
    closed_at = timezone.now()
    PendingRequest.objects.filter(pk=expired["requestId"]).update(status=RequestStatus.EXPIRED, closed_at=closed_at)
    denied = ask(operator, session="s3")
    deny(operator, denied, "no")

    found = {cell(row, "outcome"): row for row in rows(audit_html(operator))}
    assert set(found) == {"abandoned", "expired", "denied"}
    assert cell(found["expired"], "actor") == "system"
    assert cell(found["expired"], "when") == local(closed_at)
    assert cell(found["expired"], "why") == "Nobody answered before the deadline."
    assert cell(found["abandoned"], "actor") == "system"
    assert cell(found["abandoned"], "when") == local(request(abandoned).closed_at)
    assert cell(found["abandoned"], "why") == "The session moved on without answering."
    assert cell(found["denied"], "actor") == "otto with the next run request"

    by_kind = {entry["decision"]: entry for entry in exported_json(operator)}
    assert by_kind["expired"]["who"] == "system" and by_kind["expired"]["actor"] == "system"
    assert by_kind["expired"]["requestId"] == expired["requestId"]
    assert by_kind["denied"]["actor"] == "user"


def test_it_shows_client_tool_results_and_errors_with_how_they_came(operator, mailer):
    located = ask(operator, session="s1", message="call get_location")
    assert located["kind"] == "client_tool"
    turn(operator, {"sessionId": "s1", "toolResults": [{"callId": located["callId"], "result": {"city": "Oslo"}}]})
    failed = ask(operator, session="s2", message="call get_location")
    response = operator.api(
        "post", f"/api/runs/{failed['runId']}/responses", {"requestId": failed["requestId"], "errorMessage": "no GPS"}
    )
    assert response.json()["status"] == "accepted", response.content

    error, result = rows(audit_html(operator))
    assert cell(error, "outcome") == "tool error"
    assert cell(error, "actor") == "otto via the respond API"
    assert "Error no GPS" in cell(error, "request")
    assert cell(result, "outcome") == "tool result"
    assert "Result" in cell(result, "request") and "Oslo" in cell(result, "request")


def test_it_shows_an_accepted_input_with_its_content(operator, mailer):
    asked = ask(operator)
    # The run API only opens input requests through an MCP elicitation; the audit reads the stored answer.
    PendingRequest.objects.filter(pk=asked["requestId"]).update(
        kind=RequestKind.INPUT,
        answer={"requestId": asked["requestId"], "action": "accept", "content": {"day": "monday"}},
        answered_by=operator.user,
        answered_at=timezone.now(),
        answered_via="inbox",
    )
    [row] = rows(audit_html(operator))
    assert cell(row, "outcome") == "input accepted"
    assert cell(row, "actor") == "otto in the inbox"
    assert "Content" in cell(row, "request") and "monday" in cell(row, "request")
    [entry] = exported_json(operator)
    assert entry["action"] == "accept" and entry["content"] == {"day": "monday"}


@pytest.fixture
def decisions(admin, operator, mailer) -> dict[str, Any]:
    """One of each: operator denies (mailer), admin approves with remember then a rule decides (mailer),
    a request expires yesterday (courier)."""
    make_mailer(admin, "courier")
    deny(operator, ask(operator, session="s1"), "no")
    approve(admin, ask(admin, session="s2"), remember=True)
    turn(admin, {"message": SEND_EMAIL, "sessionId": "s2"})
    expired = ask(admin, session="s3", agent="courier")
    yesterday = timezone.now() - timedelta(days=1)
    PendingRequest.objects.filter(pk=expired["requestId"]).update(status=RequestStatus.EXPIRED, closed_at=yesterday)
    return {"rule": Rule.objects.get(), "yesterday": timezone.localdate(yesterday)}


def decisions_of(html: str) -> list[str]:
    return [cell(row, "outcome").split(" remembered as")[0] for row in rows(html)]


def test_it_filters_by_agent_decision_who_and_date(reader, decisions):
    everything = decisions_of(audit_html(reader))
    assert everything == ["approved by rule", "approved and remembered", "denied", "expired"]
    assert decisions_of(audit_html(reader, "?agent=courier")) == ["expired"]
    assert decisions_of(audit_html(reader, "?decision=denied")) == ["denied"]
    assert decisions_of(audit_html(reader, "?decision=approved")) == ["approved and remembered"]
    assert decisions_of(audit_html(reader, "?decision=rule")) == ["approved by rule"]
    assert decisions_of(audit_html(reader, "?decision=expired")) == ["expired"]
    assert decisions_of(audit_html(reader, "?decision=abandoned")) == []
    assert decisions_of(audit_html(reader, "?who=otto")) == ["denied"]
    assert decisions_of(audit_html(reader, "?who=ada")) == ["approved and remembered"]
    assert decisions_of(audit_html(reader, "?who=system")) == ["expired"]
    assert decisions_of(audit_html(reader, "?who=rule")) == ["approved by rule"]
    assert decisions_of(audit_html(reader, f"?who=rule+{decisions['rule'].id}")) == ["approved by rule"]
    assert decisions_of(audit_html(reader, "?who=nobody")) == []
    assert decisions_of(audit_html(reader, "?who=otto&decision=approved")) == []
    assert decisions_of(audit_html(reader, "?who=otto&decision=expired")) == []
    today = timezone.localdate()
    assert decisions_of(audit_html(reader, f"?date_from={today}")) == everything[:3]
    assert decisions_of(audit_html(reader, f"?date_to={decisions['yesterday']}")) == ["expired"]
    assert decisions_of(audit_html(reader, "?decision=nonsense&agent=ghost")) == everything


def test_it_swaps_only_the_table_for_htmx_with_export_links_of_the_new_filter(reader, decisions):
    html = audit_html(reader, "?decision=denied", HTTP_HX_REQUEST="true")
    assert "<form" not in html and "<html" not in html
    assert decisions_of(html) == ["denied"]
    assert 'hx-swap-oob="true"' in html
    assert 'href="?decision=denied&amp;format=csv"' in html


def test_it_exports_the_current_filter_as_csv(reader, decisions):
    everything = exported_csv(reader)
    assert [row["decision"] for row in everything] == ["approved-by-rule", "approved", "denied", "expired"]
    [denied] = exported_csv(reader, "?format=csv&who=otto")
    assert denied["who"] == "otto"
    assert denied["reason"] == "no"
    assert denied["via"] == "run"
    assert denied["agent"] == "mailer"
    assert denied["toolName"] == "send_email"
    assert json.loads(denied["arguments"]) == EMAIL
    assert denied["when"] == PendingRequest.objects.get(answer__reason="no").answered_at.isoformat()
    assert [row["decision"] for row in exported_csv(reader, "?format=csv&agent=courier")] == ["expired"]


def test_it_exports_the_current_filter_as_json_with_camel_case_keys(reader, decisions):
    everything = exported_json(reader)
    assert [entry["decision"] for entry in everything] == ["approved-by-rule", "approved", "denied", "expired"]
    remembered = everything[1]
    assert remembered["remembered"] is True
    assert remembered["ruleId"] == str(decisions["rule"].id)
    assert set(remembered) >= {"when", "who", "reason", "requestId", "requestKind", "toolName", "runId", "sessionId"}
    assert [entry["decision"] for entry in exported_json(reader, "?format=json&decision=rule")] == ["approved-by-rule"]
    assert exported_json(reader, "?format=json&who=nobody") == []


def test_it_refuses_an_unknown_export_format(reader, decisions):
    assert reader.client.get("/audit/?format=xml").status_code == 400


def test_it_never_shows_another_tenants_decisions(admin, outsider, mailer):
    deny(admin, ask(admin), "acme says no")
    make_mailer(outsider)
    abandoned = ask(outsider, session="s2")
    turn(outsider, {"message": "x", "sessionId": "s2", "abandonPending": True})
    assert request(abandoned).status == RequestStatus.ABANDONED
    approve(outsider, ask(outsider), remember=True)
    turn(outsider, {"message": SEND_EMAIL, "sessionId": "s1"})

    assert [cell(row, "why") for row in rows(audit_html(admin))] == ["acme says no"]
    assert [entry["reason"] for entry in exported_json(admin)] == ["acme says no"]
    assert [row["reason"] for row in exported_csv(admin)] == ["acme says no"]
    for query in ("?who=oscar", "?who=system", "?who=rule", "?decision=rule"):
        assert rows(audit_html(admin, query)) == []
    assert len(rows(audit_html(outsider))) == 3


def test_it_lets_readers_in_and_sends_strangers_to_log_in(reader, client):
    assert reader.client.get("/audit/").status_code == 200
    response = client.get("/audit/?format=csv")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_it_escapes_what_people_and_models_wrote(operator, mailer):
    evil = {"to": "a@b.co", "subject": "<img src=x onerror=alert(2)>", "body": "b"}
    deny(operator, ask(operator, message=f"call send_email {json.dumps(evil)}"), "<script>alert(1)</script>")
    html = audit_html(operator)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html
    [row] = rows(html)
    assert cell(row, "why") == "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_it_keeps_spreadsheet_formulas_out_of_the_csv(operator, mailer):
    deny(operator, ask(operator, session="s1"), '=HYPERLINK("http://evil.example","click")')
    deny(operator, ask(operator, session="s2"), "+1 for later")
    deny(operator, ask(operator, session="s3"), "-2")
    deny(operator, ask(operator, session="s4"), "@SUM(A1)")
    deny(operator, ask(operator, session="s5"), "plain words")
    reasons = [row["reason"] for row in exported_csv(operator)]
    assert reasons == [
        "plain words",
        "'@SUM(A1)",
        "'-2",
        "'+1 for later",
        '\'=HYPERLINK("http://evil.example","click")',
    ]
    # The JSON export is data, not a spreadsheet: it keeps the reason as given.
    assert exported_json(operator)[1]["reason"] == "@SUM(A1)"


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def test_it_keeps_formulas_out_of_every_column_of_the_csv(acme, mailer):
    """Whatever people, clients and models wrote (a username, a session key, a reason, a client tool's
    result or error) reaches a spreadsheet as text: a cell starting with = + - @, a tab or a carriage
    return gets a leading quote."""
    mallory = make_persona("@mallory", acme, "operator")
    deny(mallory, ask(mallory, session="=1+1"), "\tlooks fine")
    deny(mallory, ask(mallory, session="s2"), "\rno")
    answers = [{"result": "-2+3"}, {"result": -5}, {"errorMessage": "=cmd|' /C calc'!A0"}]
    for number, answer in enumerate(answers, start=3):
        asked = ask(mallory, session=f"+s{number}", message="call get_location {}")
        turn(mallory, {"sessionId": asked["sessionId"], "toolResults": [{"callId": asked["callId"], **answer}]})

    exported = exported_csv(mallory)

    assert len(exported) == 5
    for row in exported:
        assert set(row) == set(CSV_COLUMNS)
        for column, value in row.items():
            assert not value.startswith(FORMULA_STARTS), (column, value)
        assert row["who"] == "'@mallory"
    by_session = {row["sessionId"]: row for row in exported}
    assert by_session["'=1+1"]["reason"] == "'\tlooks fine"
    assert by_session["s2"]["reason"] == "'\rno"
    assert by_session["'+s3"]["result"] == "'-2+3"
    assert by_session["'+s4"]["result"] == "'-5"
    assert by_session["'+s5"]["errorMessage"] == "'=cmd|' /C calc'!A0"
    # The JSON export is data, not a spreadsheet: it keeps every value as given.
    entries = {entry["sessionId"]: entry for entry in exported_json(mallory)}
    assert (entries["=1+1"]["who"], entries["=1+1"]["reason"]) == ("@mallory", "\tlooks fine")
    assert (entries["+s4"]["result"], entries["+s5"]["errorMessage"]) == (-5, "=cmd|' /C calc'!A0")


def queries_for(persona: Persona, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = persona.client.get(path)
        if response.streaming:
            b"".join(response.streaming_content)
        assert response.status_code == 200
    return len(captured)


def make_decisions(persona: Persona, first: int, count: int) -> None:
    """`count` decisions, of every kind in turn: denials, approvals with a rule for their arguments,
    rule decisions (the arguments of the approval before), abandonments."""
    for number in range(first, first + count):
        session = f"load-{number}"
        email = f'call send_email {{"to": "{number // 4}@b.co", "subject": "s", "body": "b"}}'
        kind = number % 4
        if kind == 0:
            deny(persona, ask(persona, session=session, message=email), f"no {number}")
        elif kind == 1:
            approve(persona, ask(persona, session=session, message=email), remember=True, rememberArgumentsOnly=True)
        elif kind == 2:
            assert turn(persona, {"message": email, "sessionId": session})["status"] == "completed"
        else:
            ask(persona, session=session, message=email.replace("@b.co", "@elsewhere.example"))
            turn(persona, {"message": "x", "sessionId": session, "abandonPending": True})


def test_it_needs_as_many_queries_for_32_decisions_as_for_4(operator, mailer):
    make_decisions(operator, 0, 4)
    assert len(rows(audit_html(operator))) == 4
    counts_for_4 = [queries_for(operator, path) for path in ("/audit/", "/audit/?format=csv", "/audit/?format=json")]
    make_decisions(operator, 4, 28)
    assert len(rows(audit_html(operator))) == 32
    counts_for_40 = [queries_for(operator, path) for path in ("/audit/", "/audit/?format=csv", "/audit/?format=json")]
    assert counts_for_40 == counts_for_4


def test_it_pages_fifty_entries_at_a_time(operator, mailer):
    asked = ask(operator)
    original = request(asked)
    start = timezone.now() - timedelta(hours=1)
    copies = []
    for number in range(55):
        copy = PendingRequest.objects.get(pk=original.pk)
        copy.pk = None
        copy.id = None
        copy.call_id = f"call-{number}"
        copy.status = RequestStatus.EXPIRED
        copy.closed_at = start + timedelta(minutes=number)
        copies.append(copy)
    PendingRequest.objects.bulk_create(copies)
    first = audit_html(operator)
    assert len(rows(first)) == 50
    assert "1–50 of 55 decisions" in first
    second = audit_html(operator, "?page=2")
    assert len(rows(second)) == 5
    assert cell(rows(second)[-1], "when") == local(start)


def test_it_walks_an_export_chunk_by_chunk_without_losing_ties(operator, mailer):
    """A request answered and then closed at the same moment gives two entries with one id and time."""
    for number in range(3):
        deny(operator, ask(operator, session=f"s{number}"), f"no {number}")
    moment = timezone.now()
    PendingRequest.objects.update(answered_at=moment, closed_at=moment, status=RequestStatus.CANCELLED)
    criteria = Criteria()
    everything = list(entry_keys(operator.tenant, criteria))
    assert len(everything) == 6
    expected = [(when, str(entry_id), source) for when, entry_id, source in everything]
    for size in (1, 2, 4):
        walked = iter_entries(operator.tenant, criteria, size)
        assert [(entry.when, entry.request_id, entry.source) for entry in walked] == expected


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("close_worker_thread_connections")
async def test_it_streams_the_export_under_asgi(acme, mailer_for_asgi):
    """Under ASGI the export is an asynchronous iterator (a synchronous one would be read whole first,
    with a warning, which the test settings make an error)."""
    client = AsyncClient()
    await client.aforce_login(mailer_for_asgi.user)
    response = await client.get("/audit/?format=csv")
    assert response.status_code == 200
    text = b"".join([chunk async for chunk in response.streaming_content]).decode()
    [row] = list(csv.DictReader(io.StringIO(text)))
    assert row["reason"] == "no"


@pytest.fixture
def mailer_for_asgi(operator) -> Persona:
    make_mailer(operator)
    deny(operator, ask(operator), "no")
    return operator
