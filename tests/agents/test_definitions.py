"""The rules an agent definition must follow, checked on DefinitionContent directly."""

import pytest
from pydantic import ValidationError

from agents.definition_checks import error_map
from agents.definitions import DefinitionContent
from console.connections import ConnectionSpec


def validate(**fields) -> DefinitionContent:
    return DefinitionContent.model_validate({"name": "helper", **fields})


def errors_of(**fields) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        validate(**fields)
    return error_map(caught.value)


def test_it_fills_defaults_for_a_minimal_definition():
    content = validate()
    assert content.model.connection == "scripted"
    assert content.model.label == "scripted"
    assert content.tools == content.client_tools == content.mcp_servers == content.parameters == []
    assert content.request_deadline_seconds is None


def test_it_round_trips_through_camel_case_wire_json():
    content = validate(
        displayName="Helper",
        instructionsByCulture={"tr": "Merhaba"},
        model={"connection": "openai-prod", "name": "gpt-4o"},
        clientTools=[{"name": "get_user_location"}],
        mcpServers=[{"connection": "meetings", "toolPrefix": "meet"}],
        requestDeadlineSeconds=600,
    )
    wire = content.wire()
    assert {"displayName", "instructionsByCulture", "clientTools", "mcpServers", "requestDeadlineSeconds"} <= set(wire)
    assert wire["model"] == {"connection": "openai-prod", "name": "gpt-4o"}
    assert wire["mcpServers"] == [{"connection": "meetings", "approval": "never", "toolPrefix": "meet"}]
    assert DefinitionContent.model_validate(wire) == content
    assert content.connection_names == {"openai-prod", "meetings"}


@pytest.mark.parametrize("culture", ["tr", "tr-TR", "zh-Hant-TW", "fil"])
def test_it_accepts_culture_names(culture):
    assert validate(instructionsByCulture={culture: "…"}).instructions_by_culture == {culture: "…"}


@pytest.mark.parametrize("culture", ["TR", "turkish", "tr_TR", "", "t"])
def test_it_refuses_what_is_not_a_culture_name(culture):
    errors = errors_of(instructionsByCulture={"tr": "ok", culture: "…"})
    assert errors["instructionsByCulture"] == f"not a culture name (like 'tr' or 'tr-TR'): {culture}"


@pytest.mark.parametrize(
    ("kind", "default"),
    [("text", "ops"), ("number", 3), ("number", 2.5), ("boolean", False), ("boolean", True), ("text", None)],
)
def test_it_accepts_a_default_of_the_parameter_s_kind(kind, default):
    parameter = validate(parameters=[{"name": "p", "kind": kind, "default": default}]).parameters[0]
    assert parameter.default == default
    assert type(parameter.default) is type(default)


@pytest.mark.parametrize(
    ("kind", "default"),
    [("text", 5), ("text", True), ("number", "5"), ("number", True), ("boolean", "yes"), ("boolean", 1)],
)
def test_it_refuses_a_default_of_another_kind(kind, default):
    errors = errors_of(parameters=[{"name": "p", "kind": kind, "default": default}])
    assert errors == {"parameters.0.default": f"the default {default!r} is not a {kind}"}


def test_it_refuses_an_unknown_parameter_kind():
    assert "parameters.0.kind" in errors_of(parameters=[{"name": "p", "kind": "date", "default": "2026-01-01"}])


@pytest.mark.parametrize("name", ["1st", "has space", "dash-ed", ""])
def test_it_refuses_a_parameter_name_that_cannot_be_a_placeholder(name):
    assert "parameters.0.name" in errors_of(parameters=[{"name": name}])


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "nonsense"}, "not a valid JSON Schema"),
        ({"type": "object", "properties": {"city": {"type": 5}}}, "not a valid JSON Schema"),
        ({"type": "object", "required": "city"}, "not a valid JSON Schema"),
        ({"type": "array"}, 'must be a JSON Schema of "type": "object"'),
    ],
)
def test_it_refuses_a_client_tool_schema_that_is_not_an_object_schema(schema, message):
    errors = errors_of(clientTools=[{"name": "get_user_location", "parameters": schema}])
    assert message in errors["clientTools.0.parameters"]


def test_it_says_where_a_schema_is_broken():
    errors = errors_of(clientTools=[{"name": "t", "parameters": {"type": "object", "properties": {"a": {"type": 5}}}}])
    assert "(at properties/a/type)" in errors["clientTools.0.parameters"]


def test_it_accepts_a_client_tool_schema():
    schema = {"type": "object", "properties": {"precision": {"type": "string", "enum": ["city", "exact"]}}}
    assert validate(clientTools=[{"name": "t", "parameters": schema}]).client_tools[0].parameters == schema


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"$ref": "file:///etc/passwd"}, "the $ref 'file:///etc/passwd' is refused: a schema may refer only within"),
        ({"properties": {"a": {"$ref": "http://127.0.0.1:9/s.json"}}}, "(at properties/a)"),
        ({"properties": {"a": {"$id": "file:///etc/", "$ref": "passwd"}}}, "is refused"),
        ({"properties": {"a": {"$dynamicRef": "#meta"}}}, "$dynamicRef is refused"),
        ({"properties": {"a": {"$schema": "http://json-schema.org/draft-07/schema#"}}}, "$schema is refused inside"),
        ({"$defs": {"a": {"$ref": "#"}}, "$ref": "#/$defs/a"}, "loops back to where it stands"),
        ({"properties": {"a": {"$ref": "#/required"}}, "required": ["a"]}, "points to a value that is not a schema"),
        ({"properties": {"a": {"pattern": "(a)\\1"}}}, "patterns are RE2 (no backreferences or lookaround)"),
        ({"properties": {"a": {"pattern": "^(?=a)"}}}, "(at properties/a/pattern)"),
    ],
)
def test_it_refuses_a_client_tool_schema_that_leaves_itself_or_has_no_linear_time_pattern(schema, message):
    errors = errors_of(clientTools=[{"name": "t", "parameters": {"type": "object", **schema}}])
    assert message in errors["clientTools.0.parameters"]


def test_it_accepts_refs_within_a_schema_and_a_draft_7_dialect():
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": {"name": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$"}},
        "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
        "properties": {"name": {"$ref": "#/definitions/name"}, "tree": {"$ref": "#/$defs/node"}},
    }
    assert validate(clientTools=[{"name": "t", "parameters": schema}]).client_tools[0].parameters == schema


INLINE = "inline connection settings are refused: connections belong to the installation; "


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"model": {"provider": "openai", "name": "m"}}, "model.provider"),
        ({"model": {"name": "m", "baseUrl": "http://attacker.example/v1"}}, "model.baseUrl"),
        ({"model": {"name": "m", "apiKeyEnv": "SECRET_KEY"}}, "model.apiKeyEnv"),
        ({"mcpServers": [{"connection": "meetings", "command": "sh"}]}, "mcpServers.0.command"),
        ({"mcpServers": [{"connection": "meetings", "args": ["-c", "id"]}]}, "mcpServers.0.args"),
        ({"mcpServers": [{"connection": "meetings", "env": ["DEMO_PASSWORD"]}]}, "mcpServers.0.env"),
        ({"mcpServers": [{"connection": "meetings", "url": "http://169.254.169.254/"}]}, "mcpServers.0.url"),
    ],
)
def test_it_refuses_inline_connection_settings_naming_the_field(fields, path):
    errors = errors_of(**fields)
    assert list(errors) == [path]
    assert errors[path].startswith(INLINE)


def test_it_never_holds_an_api_key_itself():
    errors = errors_of(model={"connection": "openai-prod", "name": "gpt-4o", "apiKey": "sk-secret"})
    assert errors == {"model.apiKey": "Extra inputs are not permitted"}


def test_it_needs_a_connection_for_an_mcp_server():
    assert errors_of(mcpServers=[{"approval": "never"}]) == {"mcpServers.0.connection": "Field required"}


GRANTED = {
    "scripted": ConnectionSpec("scripted", "scripted"),
    "openai-prod": ConnectionSpec("openai-prod", "openai", base_url="https://llm.example/v1"),
    "meetings": ConnectionSpec("meetings", "mcp", command="python"),
}


def test_it_finds_no_problem_with_granted_connections_of_the_right_kinds():
    content = validate(model={"connection": "openai-prod", "name": "m"}, mcpServers=[{"connection": "meetings"}])
    assert content.connection_problems(GRANTED) is None


def test_it_calls_a_missing_connection_unknown_wherever_it_is_named():
    content = validate(model={"connection": "elsewhere", "name": "m"}, mcpServers=[{"connection": "theirs"}])
    assert content.connection_problems(GRANTED) == (
        "unknown_connection",
        {
            "model.connection": "no connection named 'elsewhere' is granted to this tenant",
            "mcpServers.0.connection": "no connection named 'theirs' is granted to this tenant",
        },
    )


def test_it_refuses_a_connection_of_the_wrong_kind():
    content = validate(model={"connection": "meetings"}, mcpServers=[{"connection": "openai-prod"}])
    code, errors = content.connection_problems(GRANTED)
    assert code == "invalid_request"
    assert errors["model.connection"] == "the connection 'meetings' is of kind mcp, not anthropic or openai or scripted"
    assert errors["mcpServers.0.connection"] == "the connection 'openai-prod' is of kind openai, not mcp"


def test_it_needs_a_model_name_on_a_provider_connection():
    problems = validate(model={"connection": "openai-prod"}).connection_problems(GRANTED)
    assert problems == ("invalid_request", {"model.name": "the openai connection 'openai-prod' needs a model name"})
    assert validate(model={"connection": "openai-prod", "name": "m1"}).model.label == "openai-prod:m1"


def test_it_refuses_an_unknown_server_tool():
    errors = errors_of(tools=[{"name": "get_time"}, {"name": "launch_rockets"}])
    assert errors["tools.1.name"].startswith("no server tool named 'launch_rockets'; known: ")
    assert "get_time" in errors["tools.1.name"]


def test_it_refuses_an_unknown_approval_mode():
    assert "tools.0.approval" in errors_of(tools=[{"name": "get_time", "approval": "sometimes"}])


@pytest.mark.parametrize(
    ("field", "items", "message"),
    [
        ("tools", [{"name": "get_time"}, {"name": "get_time"}], "two server tools are named 'get_time'"),
        ("clientTools", [{"name": "locate"}, {"name": "locate"}], "two client tools are named 'locate'"),
        (
            "mcpServers",
            [{"connection": "m"}, {"connection": "m", "approval": "always"}],
            "two MCP servers are named 'm'",
        ),
        ("parameters", [{"name": "team"}, {"name": "team"}], "two parameters are named 'team'"),
    ],
)
def test_it_refuses_two_items_with_one_name(field, items, message):
    assert errors_of(**{field: items}) == {field: message}


def test_it_refuses_a_client_tool_named_like_a_server_tool():
    errors = errors_of(tools=[{"name": "get_time"}], clientTools=[{"name": "get_time"}])
    assert errors == {"clientTools": "a server tool and a client tool share the name 'get_time'"}


@pytest.mark.parametrize("name", ["Helper", "-helper", "with space", "a" * 64, ""])
def test_it_refuses_an_agent_name_that_is_not_a_slug(name):
    assert "name" in errors_of(name=name)


@pytest.mark.parametrize("seconds", [0, -1, 30 * 24 * 3600 + 1])
def test_it_refuses_a_request_deadline_out_of_range(seconds):
    assert "requestDeadlineSeconds" in errors_of(requestDeadlineSeconds=seconds)


def test_it_refuses_unknown_fields():
    assert errors_of(colour="blue") == {"colour": "Extra inputs are not permitted"}
