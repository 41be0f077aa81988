"""The content of an agent definition: one pydantic model shared by the console form and the JSON API.

On the wire the fields are camelCase (`displayName`); in Python they are snake_case.
"""

import json
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema

from agents.policies import declaration_problems, unlisted_tools, webhook_connections
from agents.tools import REGISTRY
from console.connections import MODEL_KINDS, ConnectionSpec

SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
CULTURE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")

Approval = Literal["never", "always", "every_time"]


class ConnectionRefused(ValueError):
    """A definition names connections the tenant cannot use (see `DefinitionContent.connection_problems`)."""

    def __init__(self, code: str, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{field}: {message}" for field, message in errors.items()))
        self.code, self.errors = code, errors


class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        where = "/".join(str(p) for p in error.path)
        raise ValueError(f"not a valid JSON Schema: {error.message}" + (f" (at {where})" if where else "")) from None
    if schema.get("type", "object") != "object":
        raise ValueError('a tool\'s parameters must be a JSON Schema of "type": "object"')
    return schema


def _refuse_inline(value: Any) -> Any:
    raise ValueError(
        "inline connection settings are refused: connections belong to the installation; "
        "name one granted to this tenant instead (GET /api/connections lists them)"
    )


# The fields a definition held before connections (SPEC section 2): refused with a message naming them,
# never stored, and left out of the schema.
Refused = Annotated[SkipJsonSchema[Any], AfterValidator(_refuse_inline), Field(default=None, exclude=True)]


class ModelBinding(WireModel):
    """The model: a connection of a model kind (`scripted` is every tenant's) and the model's name on it."""

    connection: str = Field(default="scripted", pattern=SLUG)
    name: str | None = Field(default=None, min_length=1, max_length=200)
    provider: Refused
    base_url: Refused
    api_key_env: Refused

    @property
    def label(self) -> str:
        return self.connection if self.name is None else f"{self.connection}:{self.name}"


def _registered(name: str) -> str:
    if name not in REGISTRY:
        raise ValueError(f"no server tool named {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return name


class ToolBinding(WireModel):
    name: Annotated[str, AfterValidator(_registered)]
    approval: Approval = "never"


class ClientTool(WireModel):
    name: str = Field(pattern=IDENTIFIER)
    description: str = Field(default="", max_length=2000)
    parameters: Annotated[dict[str, Any], AfterValidator(_json_schema)] = Field(
        default_factory=lambda: {"type": "object"}
    )


class McpServer(WireModel):
    """An MCP server: a connection of kind `mcp`, with the approval mode of its tools."""

    connection: str = Field(pattern=SLUG)
    approval: Approval = "never"
    tool_prefix: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
    command: Refused
    args: Refused
    env: Refused
    url: Refused

    @property
    def name(self) -> str:
        return self.connection


class Parameter(WireModel):
    name: str = Field(pattern=IDENTIFIER)
    kind: Literal["text", "number", "boolean"] = "text"
    required: bool = False
    default: str | bool | int | float | None = None
    description: str = Field(default="", max_length=2000)

    # A field validator (not a model one) so the error points at "parameters.N.default".
    @field_validator("default")
    @classmethod
    def _default_fits_kind(cls, default: str | bool | int | float | None, info: ValidationInfo) -> Any:
        kind = info.data.get("kind")
        if default is None or kind is None:  # no kind: its own error is reported already
            return default
        fits = {
            "text": isinstance(default, str),
            "number": isinstance(default, int | float) and not isinstance(default, bool),
            "boolean": isinstance(default, bool),
        }[kind]
        if not fits:
            raise ValueError(f"the default {default!r} is not a {kind}")
        return default


def _cultures(value: dict[str, str]) -> dict[str, str]:
    bad = [culture for culture in value if not CULTURE.match(culture)]
    if bad:
        raise ValueError(f"not a culture name (like 'tr' or 'tr-TR'): {', '.join(bad)}")
    return value


def _unique(what: str) -> AfterValidator:
    """Names must differ within the list; the error points at the list ("parameters")."""

    def check(items: list[Any]) -> list[Any]:
        seen: set[str] = set()
        for item in items:
            if item.name in seen:
                raise ValueError(f"two {what} are named {item.name!r}")
            seen.add(item.name)
        return items

    return AfterValidator(check)


class DefinitionContent(WireModel):
    """Everything a version of an agent definition holds."""

    name: str = Field(pattern=SLUG)
    display_name: str = Field(default="", max_length=200)
    description: str = Field(default="", max_length=5000)
    instructions: str = Field(default="", max_length=100_000)
    instructions_by_culture: Annotated[dict[str, str], AfterValidator(_cultures)] = Field(default_factory=dict)
    model: ModelBinding = Field(default_factory=lambda: ModelBinding.model_validate({}))
    tools: Annotated[list[ToolBinding], _unique("server tools")] = Field(default_factory=list)
    client_tools: Annotated[list[ClientTool], _unique("client tools")] = Field(default_factory=list)
    mcp_servers: Annotated[list[McpServer], _unique("MCP servers")] = Field(default_factory=list)
    parameters: Annotated[list[Parameter], _unique("parameters")] = Field(default_factory=list)
    request_deadline_seconds: int | None = Field(default=None, ge=1, le=30 * 24 * 3600)
    # A run that reaches this many model calls asks whether to go on (a `continuation` request).
    max_model_calls: int = Field(default=25, ge=1, le=1000)
    # An agent-hooks-declaration/1.0 document: the policies every turn passes (SPEC section 8).
    hooks: dict[str, Any] | None = None

    @field_validator("hooks")
    @classmethod
    def _hooks_load(cls, hooks: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if hooks is not None:
            problems = declaration_problems(hooks)
            if not problems:
                tools = [t.name for t in info.data.get("tools", [])] + [
                    t.name for t in info.data.get("client_tools", [])
                ]
                problems = unlisted_tools(hooks, tools)
            if problems:
                raise ValueError("; ".join(problems))
        return hooks

    @field_validator("client_tools")
    @classmethod
    def _no_clash_with_server_tools(cls, client_tools: list[ClientTool], info: ValidationInfo) -> list[ClientTool]:
        clash = {t.name for t in info.data.get("tools", [])} & {t.name for t in client_tools}
        if clash:
            raise ValueError(f"a server tool and a client tool share the name {sorted(clash)[0]!r}")
        return client_tools

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @cached_property
    def identity(self) -> str:
        """The whole content as one string, equal for equal contents (the engine caches agents by it)."""
        return json.dumps(self.wire(), sort_keys=True)

    @property
    def connection_names(self) -> set[str]:
        webhooks = {name for _, name in webhook_connections(self.hooks)}
        return {self.model.connection} | {server.connection for server in self.mcp_servers} | webhooks

    def connection_problems(self, granted: Mapping[str, ConnectionSpec]) -> tuple[str, dict[str, str]] | None:
        """Why the connections this content names cannot be used, given those granted to the tenant:
        `("unknown_connection", {field: message})` when one is missing or not granted (the same answer
        for both, so a tenant cannot probe for others' connections), else `("invalid_request", ...)`
        for a connection of the wrong kind; None when all is well."""
        named = (
            [("model.connection", self.model.connection, MODEL_KINDS)]
            + [(f"mcpServers.{i}.connection", server.connection, {"mcp"}) for i, server in enumerate(self.mcp_servers)]
            + [
                (f"hooks.bindings.{i}.config.connection", name, {"webhook"})
                for i, name in webhook_connections(self.hooks)
            ]
        )
        unknown = {
            field: f"no connection named {name!r} is granted to this tenant"
            for field, name, _ in named
            if name not in granted
        }
        if unknown:
            return "unknown_connection", unknown
        wrong = {
            field: f"the connection {name!r} is of kind {granted[name].kind}, not {' or '.join(sorted(kinds))}"
            for field, name, kinds in named
            if granted[name].kind not in kinds
        }
        kind = granted[self.model.connection].kind
        if not wrong and kind != "scripted" and not self.model.name:
            wrong["model.name"] = f"the {kind} connection {self.model.connection!r} needs a model name"
        return ("invalid_request", wrong) if wrong else None

    @property
    def consults_rules(self) -> bool:
        """Whether remembered rules can answer a call: only approval mode `always` asks them."""
        modes = [tool.approval for tool in self.tools] + [server.approval for server in self.mcp_servers]
        return "always" in modes


def error_map(error: ValidationError, strip: int = 0) -> dict[str, str]:
    """Field path ("parameters.0.default") -> message, for forms and problem+json bodies."""
    fields: dict[str, str] = {}
    for item in error.errors():
        loc = [str(p) for p in item["loc"][strip:]]
        # Union branches add the tried type to the path ("default.str"); the field is what matters.
        path = ".".join(p for p in loc if p not in {"str", "float", "bool", "int"}) or "__all__"
        message = item["msg"].removeprefix("Value error, ")
        fields.setdefault(path, message)
    return fields
