"""The agent definition API: create, read, edit (new versions), versions, rollback, delete; who may do what."""

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from tests.helpers import snapshot


def body(name: str = "helper", **fields) -> dict:
    return {
        "name": name,
        "instructions": "You help {{team}}.",
        "parameters": [{"name": "team", "kind": "text", "default": "ops"}],
        **fields,
    }


def assert_problem(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert (problem["status"], problem["code"]) == (status, code)
    assert problem["title"] and problem["detail"] and problem["type"].endswith(code)
    return problem


def test_it_creates_an_agent_as_version_1_in_camel_case(admin):
    response = admin.api("POST", "/api/agents", body(displayName="Helper", requestDeadlineSeconds=300))
    assert response.status_code == 201, response.content
    agent = response.json()
    assert agent["version"] == 1
    assert agent["name"] == "helper"
    assert agent["displayName"] == "Helper"
    assert agent["requestDeadlineSeconds"] == 300
    assert agent["model"] == {"connection": "scripted", "name": None}
    assert agent["parameters"] == [
        {"name": "team", "kind": "text", "required": False, "default": "ops", "description": ""}
    ]
    assert {"createdAt", "instructionsByCulture", "clientTools", "mcpServers"} <= set(agent)
    assert not [key for key in agent if "_" in key], "no snake_case on the wire"


def test_it_lists_the_agents_of_the_tenant(admin, outsider):
    admin.api("POST", "/api/agents", body("zeta"))
    admin.api("POST", "/api/agents", body("alpha"))
    outsider.api("POST", "/api/agents", body("globex-bot"))
    listed = admin.api("GET", "/api/agents").json()
    assert [(a["name"], a["version"]) for a in listed] == [("alpha", 1), ("zeta", 1)]


def test_it_lets_a_reader_read(reader, agent):
    assert reader.api("GET", "/api/agents/helper").json()["instructions"] == "You help {{team}}."
    assert [v["version"] for v in reader.api("GET", "/api/agents/helper/versions").json()] == [1]


def test_it_refuses_a_duplicate_name(admin, agent):
    before = snapshot()
    problem = assert_problem(admin.api("POST", "/api/agents", body()), 409, "duplicate_name")
    assert "helper" in problem["detail"]
    assert snapshot() == before


def test_it_allows_the_same_name_in_another_tenant(outsider, agent):
    assert outsider.api("POST", "/api/agents", body()).status_code == 201


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"clientTools": [{"name": "locate", "parameters": {"type": "nonsense"}}]}, "clientTools.0.parameters"),
        ({"parameters": [{"name": "team"}, {"name": "team"}]}, "parameters"),
        ({"parameters": [{"name": "limit", "kind": "number", "default": "ten"}]}, "parameters.0.default"),
        ({"tools": [{"name": "launch_rockets"}]}, "tools.0.name"),
        ({"instructionsByCulture": {"Turkish": "…"}}, "instructionsByCulture"),
        ({"mcpServers": [{"connection": "meetings", "command": "python"}]}, "mcpServers.0.command"),
        ({"mcpServers": [{"name": "m", "url": "https://mcp.example"}]}, "mcpServers.0.url"),
        ({"model": {"provider": "openai"}}, "model.provider"),
        ({"model": {"connection": "scripted", "baseUrl": "http://127.0.0.1:9/v1"}}, "model.baseUrl"),
        ({"name": "Not A Slug"}, "name"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_it_refuses_an_invalid_definition_with_the_field_path(admin, fields, field):
    before = snapshot()
    response = admin.api("POST", "/api/agents", body(**fields))
    problem = assert_problem(response, 400, "invalid_request")
    assert field in [error["field"] for error in problem["errors"]], problem["errors"]
    assert all(error["message"] for error in problem["errors"])
    assert snapshot() == before


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"instructions": "You help {{teem}}."}, "instructions"),
        ({"instructionsByCulture": {"tr": "{{team}} ekibi, {{signature}}."}}, "instructionsByCulture.tr"),
    ],
)
def test_it_refuses_an_undefined_placeholder_with_the_field_path(admin, fields, field):
    admin.api("POST", "/api/agents", body())
    before = snapshot()
    for method, path in (("POST", "/api/agents"), ("PUT", "/api/agents/helper")):
        problem = assert_problem(admin.api(method, path, body(**fields)), 400, "invalid_request")
        errors = {error["field"]: error["message"] for error in problem["errors"]}
        assert "which no parameter declares" in errors[field] and "declared: team" in errors[field], errors
    assert snapshot() == before


def test_it_refuses_a_body_that_is_not_json(admin):
    before = snapshot()
    response = Client().post(
        "/api/agents", "{not json", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {admin.token}"
    )
    assert_problem(response, 400, "invalid_json")
    assert snapshot() == before


def test_it_appends_a_version_on_put(admin, agent):
    response = admin.api("PUT", "/api/agents/helper", body(instructions="Be brief."))
    assert response.status_code == 200, response.content
    assert response.json()["version"] == 2
    assert admin.api("GET", "/api/agents/helper").json()["instructions"] == "Be brief."
    versions = admin.api("GET", "/api/agents/helper/versions").json()
    assert [(v["version"], v["note"], v["createdBy"]) for v in versions] == [
        (2, "edited", "ada"),
        (1, "created", "ada"),
    ]
    assert all("createdAt" in v for v in versions)
    old = admin.api("GET", "/api/agents/helper/versions/1").json()
    assert (old["version"], old["instructions"]) == (1, "You help {{team}}.")


def test_it_answers_404_for_a_version_that_does_not_exist(admin, agent):
    assert_problem(admin.api("GET", "/api/agents/helper/versions/2"), 404, "version_not_found")


def test_it_rolls_back_by_writing_the_old_content_as_a_new_version(admin, agent):
    admin.api("PUT", "/api/agents/helper", body(instructions="Be brief.", displayName="Brief"))
    response = admin.api("POST", "/api/agents/helper/rollback", {"version": 1})
    assert response.status_code == 200, response.content
    rolled = response.json()
    assert (rolled["version"], rolled["instructions"], rolled["displayName"]) == (3, "You help {{team}}.", "")
    current = admin.api("GET", "/api/agents/helper").json()
    assert (current["version"], current["instructions"]) == (3, "You help {{team}}.")
    versions = admin.api("GET", "/api/agents/helper/versions").json()
    assert (versions[0]["version"], versions[0]["note"]) == (3, "rollback to version 1")
    assert admin.api("GET", "/api/agents/helper/versions/2").json()["instructions"] == "Be brief."


def test_it_refuses_a_rollback_to_a_version_that_does_not_exist(admin, agent):
    before = snapshot()
    assert_problem(admin.api("POST", "/api/agents/helper/rollback", {"version": 7}), 404, "version_not_found")
    assert snapshot() == before


def test_it_deletes_an_agent(admin, agent):
    response = admin.api("DELETE", "/api/agents/helper")
    assert response.status_code == 204
    assert_problem(admin.api("GET", "/api/agents/helper"), 404, "agent_not_found")
    assert_problem(admin.api("GET", "/api/agents/helper/versions"), 404, "agent_not_found")
    assert admin.api("GET", "/api/agents").json() == []


def test_it_frees_the_name_of_a_deleted_agent(admin, agent):
    admin.api("DELETE", "/api/agents/helper")
    response = admin.api("POST", "/api/agents", body(instructions="A fresh start."))
    assert response.status_code == 201
    assert response.json()["version"] == 1


def test_it_refuses_to_rename_an_agent(admin, agent):
    before = snapshot()
    problem = assert_problem(admin.api("PUT", "/api/agents/helper", body("renamed")), 400, "invalid_request")
    assert problem["errors"] == [{"field": "name", "message": "must stay 'helper'"}]
    assert snapshot() == before
    assert_problem(admin.api("GET", "/api/agents/renamed"), 404, "agent_not_found")


def test_it_refuses_an_invalid_edit_without_a_new_version(admin, agent):
    before = snapshot()
    response = admin.api("PUT", "/api/agents/helper", body(tools=[{"name": "launch_rockets"}]))
    assert_problem(response, 400, "invalid_request")
    assert snapshot() == before


def test_it_answers_404_to_an_edit_of_an_agent_that_does_not_exist(admin, agent):
    before = snapshot()

    problem = assert_problem(admin.api("PUT", "/api/agents/ghost", body("ghost")), 404, "agent_not_found")

    assert "ghost" in problem["detail"]
    assert snapshot() == before  # no agent "ghost" made, "helper" untouched


ROUTES = [
    ("GET", "/api/agents/helper", None),
    ("PUT", "/api/agents/helper", body()),
    ("DELETE", "/api/agents/helper", None),
    ("GET", "/api/agents/helper/versions", None),
    ("GET", "/api/agents/helper/versions/1", None),
    ("POST", "/api/agents/helper/rollback", {"version": 1}),
]


@pytest.mark.parametrize(("method", "path", "payload"), ROUTES)
def test_it_hides_an_agent_from_an_outsider(outsider, agent, method, path, payload):
    before = snapshot()
    assert_problem(outsider.api(method, path, payload), 404, "agent_not_found")
    assert snapshot() == before


WRITES = [
    ("POST", "/api/agents", body("another")),
    ("PUT", "/api/agents/helper", body(instructions="Changed.")),
    ("DELETE", "/api/agents/helper", None),
    ("POST", "/api/agents/helper/rollback", {"version": 1}),
]


@pytest.mark.parametrize("persona", ["reader", "operator"])
@pytest.mark.parametrize(("method", "path", "payload"), WRITES)
def test_it_lets_only_an_admin_change_agents(request, agent, persona, method, path, payload):
    member = request.getfixturevalue(persona)
    before = snapshot()
    problem = assert_problem(member.api(method, path, payload), 403, "forbidden")
    assert f"needs the admin role; you are {persona}" in problem["detail"]
    assert snapshot() == before


def test_it_serves_the_openapi_schema_with_the_agent_routes(db):
    response = Client().get("/api/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["info"]["title"] == "Airlock API"
    paths = schema["paths"]
    assert set(paths["/api/agents"]) == {"get", "post"}
    assert set(paths["/api/agents/{name}"]) == {"get", "put", "delete"}
    assert "get" in paths["/api/agents/{name}/versions"]
    assert "get" in paths["/api/agents/{name}/versions/{number}"]
    assert "post" in paths["/api/agents/{name}/rollback"]
    assert "displayName" in schema["components"]["schemas"]["DefinitionContent"]["properties"]


def test_it_serves_the_api_docs_from_local_static_files(db):
    response = Client().get("/api/docs")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/api/openapi.json" in page
    for cdn in ("cdn.jsdelivr", "unpkg", "cdnjs", "https://"):
        assert cdn not in page
    assert "/static/ninja/swagger-ui-bundle.js" in page
    assert finders.find("ninja/swagger-ui-bundle.js") is not None
