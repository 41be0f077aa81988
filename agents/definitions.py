"""The content of an agent definition: one pydantic model shared by the console form and the JSON API.

On the wire the fields are camelCase (`displayName`); in Python they are snake_case.
"""

import json
import re
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
    model_validator,
)
from pydantic.alias_generators import to_camel

from agents.tools import REGISTRY

SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
ENV_NAME = r"^[A-Z_][A-Z0-9_]{0,127}$"
CULTURE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")

Approval = Literal["never", "always", "every_time"]


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


class ModelBinding(WireModel):
    provider: Literal["scripted", "openai", "anthropic"] = "scripted"
    name: str | None = Field(default=None, max_length=200)
    base_url: str | None = Field(default=None, max_length=500, pattern=r"^https?://\S+$")
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)

    @model_validator(mode="after")
    def _provider_needs_a_model_name(self) -> "ModelBinding":
        if self.provider != "scripted" and not self.name:
            raise ValueError(f"the {self.provider} provider needs a model name")
        return self

    @property
    def label(self) -> str:
        return self.provider if self.provider == "scripted" else f"{self.provider}:{self.name}"


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
    name: str = Field(pattern=SLUG)
    command: str | None = Field(default=None, min_length=1, max_length=500)
    args: list[str] = Field(default_factory=list)
    env: list[Annotated[str, Field(pattern=ENV_NAME)]] = Field(default_factory=list)
    url: str | None = Field(default=None, pattern=r"^https?://\S+$", max_length=500)
    approval: Approval = "never"
    tool_prefix: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")

    @model_validator(mode="after")
    def _command_or_url(self) -> "McpServer":
        if (self.command is None) == (self.url is None):
            raise ValueError("give either a stdio command or a streamable-HTTP url, not both or neither")
        return self


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
    model: ModelBinding = Field(default_factory=ModelBinding)
    tools: Annotated[list[ToolBinding], _unique("server tools")] = Field(default_factory=list)
    client_tools: Annotated[list[ClientTool], _unique("client tools")] = Field(default_factory=list)
    mcp_servers: Annotated[list[McpServer], _unique("MCP servers")] = Field(default_factory=list)
    parameters: Annotated[list[Parameter], _unique("parameters")] = Field(default_factory=list)
    request_deadline_seconds: int | None = Field(default=None, ge=1, le=30 * 24 * 3600)

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
