"""JSON Schemas tenants give (SPEC section 2, the trust line; issue 48 items 1 and 2): a `$ref` never makes the
server read a file or open a URL, at a definition's save, an external request's open or an answer; a `$ref` loop
or a `$ref` to what is not a schema is a 400, never a 500; refs within the schema still work; and a pattern runs
in time linear in the text, so `^(a+)+$` against 10,000 characters answers at once."""

import html
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agents.definitions import DefinitionContent
from agents.models import Agent
from approvals.models import PendingRequest
from tests.conftest import Persona
from tests.helpers import assert_problem, snapshot

pytestmark = pytest.mark.django_db

SECRET = f"SECRET-{uuid.uuid4().hex}"
EVIL = "^(a+)+$"
# Backtracking takes 2^n steps for n of these before the "b" that fails it (30 took 10 s).
ATTACK = "a" * 10_000 + "b"


@pytest.fixture
def secret_file(tmp_path) -> str:
    """The URI of a JSON file on the server whose content no answer may show."""
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"enum": [SECRET]}))
    return path.as_uri()


class Listener:
    """A real HTTP server on a free loopback port serving a schema with the secret; `seen` lists each path asked."""

    def __init__(self) -> None:
        seen: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                body = json.dumps({"enum": [SECRET]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.seen = seen
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/schema.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener()
    listening.thread.start()
    try:
        yield listening
    finally:
        listening.server.shutdown()
        listening.server.server_close()


def tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"name": "deploy", "description": "Deploy a service", "parameters": parameters}


@pytest.fixture
def deployer(admin: Persona) -> Agent:
    parameters = {"type": "object", "properties": {"service": {"type": "string", "pattern": EVIL}}}
    content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": [tool(parameters)]})
    return Agent.create(admin.tenant, content, admin.user)


def with_ref(ref: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"service": {"$ref": ref}}}


def save(admin: Persona, parameters: dict[str, Any]) -> Any:
    """Save an external agent whose tool takes `parameters`, through the API."""
    return admin.api("POST", "/api/agents", {"name": "shipper", "runtime": "external", "tools": [tool(parameters)]})


def open_input(persona: Persona, schema: Any) -> Any:
    body = {"kind": "input", "message": "Fill this in", "requestedSchema": schema}
    return persona.api("POST", "/api/agents/deployer/requests", body)


def opened_input(persona: Persona, schema: Any) -> str:
    response = open_input(persona, schema)
    assert response.status_code == 201, response.content
    return response.json()["requestId"]


def answer(persona: Persona, request_id: str, content: dict[str, Any]) -> dict[str, Any]:
    response = persona.api("POST", f"/api/requests/{request_id}/responses", {"action": "accept", "content": content})
    assert response.status_code == 200, response.content
    return response.json()


def stored_then_answered(operator: Persona, admin: Persona, schema: dict[str, Any]) -> dict[str, Any]:
    """An input request whose stored schema is `schema` (one stored before these checks, or an MCP server's
    elicitation, which no save checks), answered."""
    request_id = opened_input(operator, {"type": "object"})
    PendingRequest.objects.filter(id=request_id).update(requested_schema=schema)
    return answer(admin, request_id, {"service": "billing"})


def refused_field(response: Any, field: str) -> str:
    problem = assert_problem(response, 400, "invalid_request")
    return next(error["message"] for error in problem["errors"] if error["field"] == field)


# --- a $ref that leaves the schema ----------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["hosted", "external"])
def test_it_refuses_a_file_ref_in_tool_parameters_when_a_definition_is_saved(admin, secret_file, runtime):
    before = snapshot()
    if runtime == "hosted":
        body = {"name": "shipper", "clientTools": [tool(with_ref(secret_file))]}
        field = "clientTools.0.parameters"
    else:
        body = {"name": "shipper", "runtime": "external", "tools": [tool(with_ref(secret_file))]}
        field = "tools.0.parameters"

    response = admin.api("POST", "/api/agents", body)

    message = refused_field(response, field)
    assert f"the $ref {secret_file!r} is refused" in message and "(at properties/service)" in message
    assert SECRET not in response.content.decode()
    assert snapshot() == before


def test_it_refuses_a_file_ref_in_the_definition_form(admin, secret_file):
    data = {
        "name": "triage",
        "display_name": "Triage",
        "description": "",
        "instructions": "Sort the tickets.",
        "request_deadline_seconds": "",
        "model_connection": "scripted",
        "model_name": "",
        "client_tools-00000000-name": "pick_file",
        "client_tools-00000000-description": "",
        "client_tools-00000000-parameters": json.dumps(with_ref(secret_file)),
    }

    response = admin.client.post("/agents/new/", data)

    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert f"The $ref {secret_file!r} is refused" in page
    assert "Nothing was saved." in page and SECRET not in page
    assert not Agent.objects.filter(name="triage").exists()


def test_it_refuses_a_file_ref_in_a_requested_schema_when_a_request_opens(deployer, operator, secret_file):
    before = snapshot()

    response = open_input(operator, with_ref(secret_file))

    assert f"the $ref {secret_file!r} is refused" in refused_field(response, "requestedSchema")
    assert SECRET not in response.content.decode()
    assert snapshot() == before


def test_it_never_reads_a_file_a_stored_schema_refers_to_when_answered(deployer, operator, admin, secret_file):
    outcome = stored_then_answered(
        operator, admin, {"type": "object", "properties": {"service": {"$ref": secret_file}}}
    )

    assert outcome["status"] == "invalid_response", outcome
    assert f"the $ref {secret_file!r} is refused" in outcome["message"]
    assert SECRET not in json.dumps(outcome)


def test_it_never_fetches_an_http_ref_at_save_open_or_answer(deployer, operator, admin, listener):
    saved = save(admin, with_ref(listener.url))
    assert f"the $ref {listener.url!r} is refused" in refused_field(saved, "tools.0.parameters")
    opened = open_input(operator, with_ref(listener.url))
    assert f"the $ref {listener.url!r} is refused" in refused_field(opened, "requestedSchema")
    # A relative ref under an `$id` naming the server is the same URL.
    under_id = {"$id": listener.url, "type": "object", "properties": {"service": {"$ref": "other.json"}}}
    assert "is refused" in refused_field(open_input(operator, under_id), "requestedSchema")
    answered = stored_then_answered(operator, admin, with_ref(listener.url))
    assert answered["status"] == "invalid_response" and SECRET not in json.dumps(answered)

    assert listener.seen == []


# --- $ref loops and refs to what is not a schema ---------------------------------------------------------------

BROKEN_REFS = [
    pytest.param({"type": "object", "properties": {"service": {"$ref": "#"}}, "$ref": "#"}, "loops back", id="self"),
    pytest.param(
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
        "loops back",
        id="through-allOf",
    ),
    pytest.param(
        {"type": "object", "properties": {"service": {"$ref": "#/required"}}, "required": ["service"]},
        "points to a value that is not a schema",
        id="to-an-array",
    ),
    pytest.param(
        {"type": "object", "properties": {"service": {"$ref": "#/$defs/missing"}}},
        "points to nothing in this schema",
        id="to-nothing",
    ),
]


@pytest.mark.parametrize(("schema", "message"), BROKEN_REFS)
def test_it_answers_400_to_a_ref_loop_or_a_ref_to_no_schema_at_save_and_open(
    deployer, admin, operator, schema, message
):
    assert message in refused_field(save(admin, schema), "tools.0.parameters")
    assert message in refused_field(open_input(operator, schema), "requestedSchema")


@pytest.mark.parametrize(("schema", "message"), BROKEN_REFS)
def test_it_refuses_an_answer_to_a_stored_schema_with_a_ref_loop_without_a_500(
    deployer, operator, admin, schema, message
):
    outcome = stored_then_answered(operator, admin, schema)

    assert outcome["status"] == "invalid_response" and message in outcome["message"], outcome


def test_it_still_follows_refs_within_the_schema(deployer, operator, admin):
    schema = {
        "type": "object",
        "$defs": {"name": {"$anchor": "name", "type": "string", "pattern": "^[a-z]+$"}},
        "properties": {"service": {"$ref": "#/$defs/name"}, "owner": {"$ref": "#name"}, "next": {"$ref": "#"}},
    }
    request_id = opened_input(operator, schema)

    refused = answer(admin, request_id, {"service": "billing", "next": {"owner": "Ada"}})
    assert refused["status"] == "invalid_response"
    assert refused["message"].endswith("next/owner: 'Ada' does not match '^[a-z]+$'"), refused
    accepted = answer(admin, request_id, {"service": "billing", "next": {"owner": "ada"}})
    assert accepted["status"] == "accepted", accepted


# --- patterns --------------------------------------------------------------------------------------------------


def test_it_answers_a_catastrophic_pattern_against_10000_characters_within_a_second(deployer, operator, admin):
    schema = {"type": "object", "properties": {"service": {"type": "string", "pattern": EVIL}}}
    request_id = opened_input(operator, schema)

    started = time.monotonic()
    refused = answer(admin, request_id, {"service": ATTACK})
    took = time.monotonic() - started

    assert refused["status"] == "invalid_response" and "does not match '^(a+)+$'" in refused["message"]
    assert took < 1, f"the answer took {took:.2f} s"
    assert answer(admin, request_id, {"service": "a" * 10_000})["status"] == "accepted"


def test_it_opens_a_request_against_a_catastrophic_pattern_within_a_second(deployer, operator):
    body = {"kind": "approval", "toolName": "deploy", "arguments": {"service": ATTACK}}

    started = time.monotonic()
    response = operator.api("POST", "/api/agents/deployer/requests", body)
    took = time.monotonic() - started

    problem = assert_problem(response, 400, "invalid_arguments")
    assert "does not match '^(a+)+$'" in problem["errors"][0]["message"]
    assert took < 1, f"the open took {took:.2f} s"
    body["arguments"] = {"service": "a" * 10_000}
    assert operator.api("POST", "/api/agents/deployer/requests", body).status_code == 201


def test_it_runs_pattern_properties_and_additional_properties_on_the_same_engine(deployer, operator, admin):
    schema = {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False}
    request_id = opened_input(operator, schema)

    started = time.monotonic()
    refused = answer(admin, request_id, {ATTACK: 1})
    took = time.monotonic() - started

    assert refused["status"] == "invalid_response" and "does not match any of the regexes" in refused["message"]
    assert took < 1, f"the answer took {took:.2f} s"
    assert answer(admin, request_id, {"aaa": 1})["status"] == "accepted"


def test_it_reads_a_patterns_unicode_escapes_as_json_schema_writes_them(deployer, operator, admin):
    schema = {"type": "object", "properties": {"service": {"type": "string", "pattern": "^[\\u0061-\\u007A]+$"}}}
    request_id = opened_input(operator, schema)

    assert answer(admin, request_id, {"service": "BILLING"})["status"] == "invalid_response"
    assert answer(admin, request_id, {"service": "billing"})["status"] == "accepted"


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (
            {"type": "object", "properties": {"service": {"type": "string", "pattern": r"^(a)\1$"}}},
            "properties/service",
        ),
        ({"type": "object", "patternProperties": {"^(?!admin)": {}}}, "patternProperties"),
    ],
)
def test_it_refuses_a_pattern_without_a_linear_time_match_at_save_and_open(deployer, admin, operator, schema, where):
    saved = refused_field(save(admin, schema), "tools.0.parameters")
    assert "is refused" in saved and "patterns are RE2 (no backreferences or lookaround)" in saved, saved
    assert f"(at {where}" in saved
    assert "patterns are RE2" in refused_field(open_input(operator, schema), "requestedSchema")


def test_it_refuses_a_schema_past_its_size_or_depth(admin):
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2_000)}}
    assert "holds 2001 schemas; at most 2000" in refused_field(save(admin, wide), "tools.0.parameters")
    large = {"type": "object", "description": "x" * 70_000}
    assert "bytes; at most 65536" in refused_field(save(admin, large), "tools.0.parameters")
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(20):
        deep = {"type": "object", "properties": {"a": deep}}
    assert "nests deeper than 32 levels" in refused_field(save(admin, deep), "tools.0.parameters")


def test_it_refuses_a_value_whose_refs_fan_out_past_the_budget(deployer, operator, admin):
    fan_out = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(30)}
    schema = {
        "type": "object",
        "$defs": {**fan_out, "d30": {"type": "string"}},
        "properties": {"service": {"$ref": "#/$defs/d0"}},
    }
    request_id = opened_input(operator, schema)

    started = time.monotonic()
    refused = answer(admin, request_id, {"service": "billing"})
    took = time.monotonic() - started

    assert refused["status"] == "invalid_response" and "takes more than 50000 steps" in refused["message"], refused
    assert took < 1.5, f"the answer took {took:.2f} s"
