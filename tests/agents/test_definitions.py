"""The rules an agent definition must follow, checked on DefinitionContent directly."""

import pytest
from pydantic import ValidationError

from agents.definitions import DefinitionContent, error_map


def validate(**fields) -> DefinitionContent:
    return DefinitionContent.model_validate({"name": "helper", **fields})


def errors_of(**fields) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        validate(**fields)
    return error_map(caught.value)


def test_it_fills_defaults_for_a_minimal_definition():
    content = validate()
    assert content.model.provider == "scripted"
    assert content.model.label == "scripted"
    assert content.tools == content.client_tools == content.mcp_servers == content.parameters == []
    assert content.request_deadline_seconds is None


def test_it_round_trips_through_camel_case_wire_json():
    content = validate(
        displayName="Helper",
        instructionsByCulture={"tr": "Merhaba"},
        model={"provider": "openai", "name": "gpt-4o", "baseUrl": "https://llm.example/v1", "apiKeyEnv": "LLM_KEY"},
        clientTools=[{"name": "get_user_location"}],
        mcpServers=[{"name": "meetings", "url": "https://mcp.example/mcp", "toolPrefix": "meet"}],
        requestDeadlineSeconds=600,
    )
    wire = content.wire()
    assert {"displayName", "instructionsByCulture", "clientTools", "mcpServers", "requestDeadlineSeconds"} <= set(wire)
    assert wire["model"] == {
        "provider": "openai",
        "name": "gpt-4o",
        "baseUrl": "https://llm.example/v1",
        "apiKeyEnv": "LLM_KEY",
    }
    assert wire["mcpServers"][0]["toolPrefix"] == "meet"
    assert DefinitionContent.model_validate(wire) == content


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


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_it_needs_a_model_name_for_a_real_provider(provider):
    assert errors_of(model={"provider": provider}) == {"model": f"the {provider} provider needs a model name"}
    assert validate(model={"provider": provider, "name": "m1"}).model.label == f"{provider}:m1"


def test_it_refuses_an_unknown_provider():
    assert "model.provider" in errors_of(model={"provider": "ollama", "name": "llama"})


def test_it_never_holds_an_api_key_itself():
    errors = errors_of(model={"provider": "openai", "name": "gpt-4o", "apiKey": "sk-secret"})
    assert errors == {"model.apiKey": "Extra inputs are not permitted"}


@pytest.mark.parametrize("env_name", ["OPENAI_API_KEY", "_KEY", "K2"])
def test_it_accepts_environment_variable_names(env_name):
    assert validate(model={"provider": "openai", "name": "m", "apiKeyEnv": env_name}).model.api_key_env == env_name


@pytest.mark.parametrize("env_name", ["openai_key", "OPENAI-KEY", "2KEY", "sk-abc123", ""])
def test_it_refuses_what_is_not_an_environment_variable_name(env_name):
    assert "model.apiKeyEnv" in errors_of(model={"provider": "openai", "name": "m", "apiKeyEnv": env_name})
    server = {"name": "meetings", "command": "python", "env": ["GOOD", env_name]}
    assert "mcpServers.0.env.1" in errors_of(mcpServers=[server])


def test_it_refuses_an_unknown_server_tool():
    errors = errors_of(tools=[{"name": "get_time"}, {"name": "launch_rockets"}])
    assert errors["tools.1.name"].startswith("no server tool named 'launch_rockets'; known: ")
    assert "get_time" in errors["tools.1.name"]


def test_it_refuses_an_unknown_approval_mode():
    assert "tools.0.approval" in errors_of(tools=[{"name": "get_time", "approval": "sometimes"}])


@pytest.mark.parametrize(
    "server",
    [
        {"name": "meetings", "command": "python", "url": "https://mcp.example/mcp"},
        {"name": "meetings"},
    ],
)
def test_it_needs_exactly_one_of_command_and_url_for_an_mcp_server(server):
    errors = errors_of(mcpServers=[server])
    assert errors == {"mcpServers.0": "give either a stdio command or a streamable-HTTP url, not both or neither"}


def test_it_refuses_an_mcp_url_that_is_not_http():
    assert "mcpServers.0.url" in errors_of(mcpServers=[{"name": "m", "url": "file:///etc/passwd"}])


@pytest.mark.parametrize(
    ("field", "items", "message"),
    [
        ("tools", [{"name": "get_time"}, {"name": "get_time"}], "two server tools are named 'get_time'"),
        ("clientTools", [{"name": "locate"}, {"name": "locate"}], "two client tools are named 'locate'"),
        (
            "mcpServers",
            [{"name": "m", "command": "a"}, {"name": "m", "url": "http://x"}],
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
