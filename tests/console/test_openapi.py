"""/api/openapi.json documents the errors of every operation, not only its successes, so that generated clients
and schema-driven tests can rely on them."""

import pytest
from django.test import Client

PROBLEM = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}


@pytest.fixture
def schema(db) -> dict:
    response = Client().get("/api/openapi.json")
    assert response.status_code == 200
    return response.json()


def operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def test_each_operation_is_named_by_its_function_once(schema):
    ids = [operation["operationId"] for _, operation in operations(schema)]

    assert len(ids) == len(set(ids))
    assert dict(operations(schema))["POST /api/agents/{name}/runs"]["operationId"] == "create_run"
    assert dict(operations(schema))["POST /api/runs/{run_id}/responses"]["operationId"] == "respond_to_request"


def test_it_describes_the_problem_body(schema):
    problem = schema["components"]["schemas"]["Problem"]

    assert set(problem["required"]) == {"type", "title", "status", "detail", "code"}
    assert problem["properties"]["errors"]["items"] == {"$ref": "#/components/schemas/FieldProblem"}


def test_it_documents_every_error_response_as_a_problem(schema):
    for name, operation in operations(schema):
        errors = {status: response for status, response in operation["responses"].items() if int(status) >= 400}
        assert "401" in errors, name
        for status, response in errors.items():
            assert response["content"] == PROBLEM, f"{name} {status}"
            assert response["description"], f"{name} {status}"


@pytest.mark.parametrize(
    ("operation", "statuses"),
    [
        ("GET /api/agents", {"401"}),
        ("POST /api/agents", {"400", "401", "403", "409", "413", "415", "429"}),
        ("GET /api/agents/{name}", {"400", "401", "404"}),
        ("PUT /api/agents/{name}", {"400", "401", "403", "404", "413", "415", "429"}),
        ("POST /api/agents/{name}/runs", {"400", "401", "403", "404", "409", "413", "415"}),
        ("GET /api/runs", {"400", "401"}),
        ("POST /api/runs/{run_id}/cancel", {"400", "401", "403", "404", "409"}),
        ("POST /api/attachments", {"400", "401", "403", "413", "415"}),
        ("POST /api/runs/{run_id}/responses", {"400", "401", "403", "404", "413", "415"}),
        ("POST /api/rules", {"400", "401", "403", "404", "413", "415"}),
        ("DELETE /api/rules/{rule_id}", {"400", "401", "403", "404"}),
    ],
)
def test_it_documents_the_errors_each_operation_can_answer(schema, operation, statuses):
    responses = dict(operations(schema))[operation]["responses"]

    assert {status for status in responses if int(status) >= 400} == statuses


def test_it_documents_the_paging_bounds(schema):
    parameters = {p["name"]: p["schema"] for p in dict(operations(schema))["GET /api/requests"]["parameters"]}

    assert (parameters["limit"]["minimum"], parameters["limit"]["maximum"]) == (1, 200)
    assert parameters["offset"]["minimum"] == 0
    assert parameters["offset"]["maximum"] < 2**63 - 1


def test_it_documents_the_attachment_upload_as_multipart(schema):
    body = dict(operations(schema))["POST /api/attachments"]["requestBody"]

    assert body["content"]["multipart/form-data"]["schema"]["required"] == ["file"]
