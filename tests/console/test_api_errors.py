"""What the JSON API answers to input a careless client (or an attacker) can send: always a 4xx
application/problem+json with a stable `code`, never a server error, and nothing changes."""

import json
import logging
from typing import Any

import pytest
from django.test import Client, RequestFactory

from agents.models import Agent, AgentVersion, Attachment, Run
from approvals.models import PendingRequest, Rule
from console.api import MAX_OFFSET, api
from tests.conftest import Persona
from tests.helpers import ask_to_send, assert_problem, make_agent, run_ok

RUN_ID = "0b6f7a52-5d3e-4a43-9d0a-1f6a4c1f2e10"

# Every route that reads a JSON body.
JSON_ROUTES = [
    ("POST", "/api/agents"),
    ("PUT", "/api/agents/assistant"),
    ("POST", "/api/agents/assistant/rollback"),
    ("POST", "/api/agents/assistant/runs"),
    ("POST", f"/api/runs/{RUN_ID}/responses"),
    ("POST", "/api/rules"),
]

PAGED_ROUTES = ["/api/runs", "/api/requests", "/api/rules"]


@pytest.fixture
def assistant(admin) -> Agent:
    return make_agent(admin)


def snapshot() -> dict[str, Any]:
    return {
        "agents": sorted(Agent.objects.values_list("name", "current_version", "deleted_at")),
        "versions": AgentVersion.objects.count(),
        "runs": sorted(Run.objects.values_list("id", "status")),
        "requests": sorted(PendingRequest.objects.values_list("id", "status", "answer")),
        "rules": Rule.objects.count(),
        "attachments": Attachment.objects.count(),
    }


def send(persona: Persona, method: str, path: str, body: bytes, content_type: str) -> Any:
    return Client().generic(method, path, body, content_type, HTTP_AUTHORIZATION=f"Bearer {persona.token}")


def definition_body(**changes: Any) -> dict[str, Any]:
    return {"name": "assistant", "instructions": "You help.", **changes}


# --- bodies too large -----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_it_refuses_a_json_body_over_the_upload_limit_with_413(settings, admin, assistant, method, path):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    before = snapshot()
    body = json.dumps(definition_body(description="x" * 2048)).encode()

    response = send(admin, method, path, body, "application/json")

    problem = assert_problem(response, 413, "body_too_large")
    assert "1024" in problem["detail"]
    assert snapshot() == before


def test_it_still_accepts_a_json_body_within_the_upload_limit(settings, admin):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    body = json.dumps(definition_body(description="x" * 2048)).encode()

    response = send(admin, "POST", "/api/agents", body, "application/json")

    assert response.status_code == 201, response.content


# --- content types --------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
def test_it_refuses_a_json_body_sent_as_another_type_with_415(admin, assistant, method, path, content_type):
    before = snapshot()
    body = json.dumps(definition_body()).encode()

    response = send(admin, method, path, body, content_type)

    problem = assert_problem(response, 415, "unsupported_media_type")
    assert "application/json" in problem["detail"]
    assert snapshot() == before


def test_it_refuses_an_answer_sent_as_text_plain_and_the_request_stays_open(operator, assistant):
    asked = ask_to_send(operator)
    request_id = asked["pendingRequests"][0]["requestId"]
    before = snapshot()
    body = json.dumps({"requestId": request_id, "approved": True}).encode()

    response = send(operator, "POST", f"/api/runs/{asked['runId']}/responses", body, "text/plain")

    assert_problem(response, 415, "unsupported_media_type")
    assert snapshot() == before
    assert PendingRequest.objects.get(id=request_id).answer is None


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/vnd.airlock+json"])
def test_it_accepts_json_media_types_with_parameters_or_a_json_suffix(admin, content_type):
    response = send(admin, "POST", "/api/agents", json.dumps(definition_body()).encode(), content_type)

    assert response.status_code == 201, response.content


def test_it_refuses_a_body_that_is_not_json_with_invalid_json(admin, assistant):
    before = snapshot()

    response = send(admin, "PUT", "/api/agents/assistant", b'{"name": "assistant",', "application/json")

    assert_problem(response, 400, "invalid_json")
    assert snapshot() == before


def test_it_refuses_an_attachment_that_is_not_multipart_with_415(operator):
    response = send(operator, "POST", "/api/attachments", b'{"file": "x"}', "application/json")

    assert_problem(response, 415, "unsupported_media_type")
    assert Attachment.objects.count() == 0


# --- JSON no database stores ----------------------------------------------------------------------
# PostgreSQL refuses NUL in text and JSON, and NaN or Infinity in JSON; an unpaired surrogate encodes to
# nothing at all. Each was a server error once it reached a column.


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/agents", '{"name": "ok", "instructions": "You help.\\u0000"}', "instructions"),
        ("/api/agents", '{"name": "ok", "instructions": "x", "tools": [{"name": "a\\u0000"}]}', "tools.0.name"),
        ("/api/agents/assistant/runs", '{"message": "hi", "sessionId": "s\\u0000"}', "sessionId"),
        ("/api/agents/assistant/runs", '{"message": "hi", "parameters": {"team": "\\ud800"}}', "parameters.team"),
        ("/api/rules", '{"agent": "assistant\\u0000", "toolName": "send_email"}', "agent"),
    ],
)
def test_it_refuses_text_no_database_stores_naming_the_field(admin, assistant, path, body, field):
    before = snapshot()

    response = send(admin, "POST", path, body.encode(), "application/json")

    problem = assert_problem(response, 400, "invalid_request")
    assert [error["field"] for error in problem["errors"]] == [field]
    assert snapshot() == before


def test_it_refuses_an_unpaired_surrogate_sent_as_raw_bytes(admin, assistant):
    # json.loads reads bytes with "surrogatepass": no \\u escape is needed to carry one.
    body = b'{"message": "hi", "parameters": {"team": "' + "\ud800".encode("utf-8", "surrogatepass") + b'"}}'
    before = snapshot()

    response = send(admin, "POST", "/api/agents/assistant/runs", body, "application/json")

    problem = assert_problem(response, 400, "invalid_request")
    assert [error["field"] for error in problem["errors"]] == ["parameters.team"]
    assert snapshot() == before


def test_it_refuses_a_body_of_too_many_values_before_any_route_reads_it(admin, assistant):
    # 300,000 keys in 4 MB, under the body's byte limit: each later walk of them held the request thread for seconds.
    arguments = {f"k{n}": 0 for n in range(300_000)}
    body = json.dumps({"agent": "assistant", "toolName": "send_email", "arguments": arguments}).encode()
    before = snapshot()

    response = send(admin, "POST", "/api/rules", body, "application/json")

    problem = assert_problem(response, 400, "invalid_json")
    assert "more than 200000 values" in problem["detail"]
    assert snapshot() == before


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_it_refuses_numbers_json_does_not_have(admin, assistant, number):
    before = snapshot()
    body = '{"message": "hi", "parameters": {"budget": ' + number + "}}"

    response = send(admin, "POST", "/api/agents/assistant/runs", body.encode(), "application/json")

    assert_problem(response, 400, "invalid_json")
    assert snapshot() == before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/agents/assistant/runs", '{"message": "hi", "parameters": {"budget": 1%s}}', "parameters.budget"),
        ("/api/rules", '{"agent": "assistant", "toolName": "send_email", "arguments": {"n": -1%s}}', "arguments.n"),
    ],
)
def test_it_refuses_an_integer_past_the_largest_json_number(admin, assistant, path, body, field):
    """Python and PostgreSQL keep a 401-digit integer; a receipt's digest cannot (its closing was a 500, and the
    deadline sweep of every tenant stopped at it)."""
    before = snapshot()

    response = send(admin, "POST", path, (body % ("0" * 400)).encode(), "application/json")

    problem = assert_problem(response, 400, "invalid_request")
    assert problem["errors"] == [{"field": field, "message": "is a number too large for JSON (past 1.8e308)"}]
    assert snapshot() == before


@pytest.mark.parametrize("depth", [65, 500, 5000])
def test_it_refuses_json_nested_too_deep(admin, assistant, depth):
    before = snapshot()
    body = '{"agent": "assistant", "toolName": "send_email", "arguments": {"a": %s}}' % ("[" * depth + "]" * depth)

    response = send(admin, "POST", "/api/rules", body.encode(), "application/json")

    assert_problem(response, 400, "invalid_json")
    assert snapshot() == before


@pytest.mark.parametrize("path", PAGED_ROUTES)
def test_it_refuses_a_nul_in_a_query_parameter_naming_it(reader, path):
    problem = assert_problem(reader.api("GET", f"{path}?agent=a%00b"), 400, "invalid_request")

    assert [error["field"] for error in problem["errors"]] == ["agent"]


@pytest.mark.parametrize("path", ["/api/agents/a%00b", "/api/agents/a%00b/versions", "/api/sessions/s%00/state"])
def test_it_answers_a_nul_in_a_path_name_with_404(reader, path):
    assert_problem(reader.api("GET", path), 404, "not_found")


def test_it_refuses_a_last_event_id_that_is_no_number(operator, assistant):
    run_id = run_ok(operator, {"message": "hi"})["runId"]
    sse = {"HTTP_ACCEPT": "text/event-stream", "HTTP_LAST_EVENT_ID": "\u00b2"}  # a digit int() cannot read

    response = operator.api("GET", f"/api/runs/{run_id}/events", **sse)

    assert_problem(response, 400, "invalid_last_event_id")


# --- multipart ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; boundary=\u00e9t\u00e9"],
)
def test_it_refuses_an_unparseable_multipart_body_with_400(operator, content_type):
    body = b'--x\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhello\r\n--x--\r\n'

    response = send(operator, "POST", "/api/attachments", body, content_type)

    assert_problem(response, 400, "invalid_multipart")
    assert Attachment.objects.count() == 0


def test_it_refuses_an_unparseable_multipart_body_sent_with_the_browser_session(operator):
    # The session's CSRF check reads the form before the view does.
    response = operator.client.post("/api/attachments", b"--x\r\n", content_type="multipart/form-data")

    assert_problem(response, 400, "invalid_multipart")


def test_it_refuses_an_upload_whose_content_type_has_a_nul(operator):
    part = b'Content-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/pl\x00ain\r\n'
    body = b"--x\r\n" + part + b"\r\nhello\r\n--x--\r\n"

    response = send(operator, "POST", "/api/attachments", body, "multipart/form-data; boundary=x")

    problem = assert_problem(response, 400, "invalid_request")
    assert [error["field"] for error in problem["errors"]] == ["file"]
    assert Attachment.objects.count() == 0


def test_it_refuses_a_multipart_body_with_too_many_fields_with_400(settings, operator):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 3
    fields = {f"field{i}": "x" for i in range(5)}

    response = Client().post("/api/attachments", fields, HTTP_AUTHORIZATION=f"Bearer {operator.token}")

    assert_problem(response, 400, "too_many_fields")
    assert Attachment.objects.count() == 0


# --- paging ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGED_ROUTES)
@pytest.mark.parametrize(
    ("field", "value"),
    [("offset", 2**63), ("offset", MAX_OFFSET + 1), ("offset", -1), ("limit", 0), ("limit", 201), ("limit", -5)],
)
def test_it_refuses_paging_out_of_bounds_naming_the_field(reader, path, field, value):
    response = reader.api("GET", f"{path}?{field}={value}")

    problem = assert_problem(response, 400, "invalid_request")
    assert [error["field"] for error in problem["errors"]] == [field]


@pytest.mark.parametrize("path", PAGED_ROUTES)
def test_it_pages_up_to_the_bounds(reader, path):
    response = reader.api("GET", f"{path}?limit=200&offset={MAX_OFFSET}")

    assert response.status_code == 200, response.content
    assert response.json() == {"items": [], "limit": 200, "offset": MAX_OFFSET, "next": None}


# --- routes and methods ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/nothing-here", f"/api/runs/{RUN_ID}/nothing", "/api/agents/"])
def test_it_answers_an_unknown_api_path_with_a_problem_404(reader, path):
    assert_problem(reader.api("GET", path), 404, "not_found")


@pytest.mark.parametrize("method", ["post", "put", "delete"])
@pytest.mark.parametrize("path", ["/api/nothing-here", "/api/agents//runs"])
def test_it_answers_a_write_to_an_unknown_api_path_with_a_problem_404_not_a_csrf_page(reader, method, path):
    """A bearer client is never asked for a CSRF token, not even on a path no operation serves."""
    client = Client(enforce_csrf_checks=True)
    response = getattr(client, method)(path, "{}", "application/json", HTTP_AUTHORIZATION=f"Bearer {reader.token}")

    assert_problem(response, 404, "not_found")


@pytest.mark.parametrize("path", ["/api/openapi.json", "/api/docs"])
def test_it_answers_a_write_to_the_schema_or_its_docs_with_a_problem_405(reader, path):
    client = Client(enforce_csrf_checks=True)
    response = client.post(path, "{}", "application/json", HTTP_AUTHORIZATION=f"Bearer {reader.token}")

    assert_problem(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET, HEAD"


def test_it_answers_an_unsupported_method_with_a_problem_405(reader):
    response = reader.api("PATCH", "/api/agents")

    assert_problem(response, 405, "method_not_allowed")
    assert set(response["Allow"].split(", ")) == {"GET", "POST"}


# --- the safety net -------------------------------------------------------------------------------


def test_it_turns_an_unexpected_exception_into_a_problem_500_without_its_details(caplog):
    request = RequestFactory().get("/api/agents")

    with caplog.at_level(logging.ERROR):
        response = api.on_exception(request, RuntimeError("the database password is hunter2"))

    assert response.status_code == 500
    assert response["Content-Type"] == "application/problem+json"
    assert json.loads(response.content)["code"] == "server_error"
    assert b"hunter2" not in response.content
    assert b"Traceback" not in response.content
    assert any(record.exc_info and "hunter2" in str(record.exc_info[1]) for record in caplog.records)


def test_a_host_not_this_consoles_is_problem_json_on_the_api_and_a_page_elsewhere(admin):
    api = Client(headers={"Authorization": f"Bearer {admin.token}"}, HTTP_HOST="evil.example").get("/api/agents")
    page = Client(HTTP_HOST="evil.example").get("/login/")

    problem = assert_problem(api, 400, "invalid_host")
    assert "evil.example" not in problem["detail"]
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
