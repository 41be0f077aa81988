"""What a definition lists (SPEC sections 2, 11, 12, 14, 15): its model binding, its tools of each kind (server,
external, client), the MCP servers it uses or fronts and their tools, who answers policy escalations and request
kinds, its parameters. `agents.definitions.DefinitionContent` holds them; they are re-exported there."""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictBool, StringConstraints, TypeAdapter, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from agents.definition_checks import refuse_inline, registered
from agents.request_kinds import RequestKindName
from agents.requirements import MOST_GROUPS, Approvers, Escalated, GroupName, Required, Routed, WireModel
from agents.schemas import schema_refusal

SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"

Approval = Literal["never", "always", "every_time"]


def object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    refusal = schema_refusal(schema)
    if refusal:
        raise ValueError(refusal)
    if schema.get("type", "object") != "object":
        raise ValueError('a tool\'s parameters must be a JSON Schema of "type": "object"')
    return schema


# The fields a definition held before connections (SPEC section 2): refused with a message naming them,
# never stored, and left out of the schema.
Refused = Annotated[SkipJsonSchema[Any], AfterValidator(refuse_inline), Field(default=None, exclude=True)]


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


class ToolBinding(Routed):
    name: Annotated[str, AfterValidator(registered)]
    approval: Approval = "never"
    approvers: Approvers
    require: Required
    escalation: Escalated


class ExternalTool(Routed):
    """A tool of an external agent (SPEC section 12): it runs in the agent's own process; Airlock knows what the
    tool is (its description and JSON-schema parameters, which requests' arguments must fit) and who decides."""

    name: str = Field(pattern=IDENTIFIER)
    description: str = Field(default="", max_length=2000)
    parameters: Annotated[dict[str, Any], AfterValidator(object_schema)] = Field(
        default_factory=lambda: {"type": "object"}
    )
    approval: Approval = "always"
    approvers: Approvers
    require: Required
    escalation: Escalated


_HOSTED_TOOLS: TypeAdapter[list[ToolBinding]] = TypeAdapter(list[ToolBinding])
_EXTERNAL_TOOLS: TypeAdapter[list[ExternalTool]] = TypeAdapter(list[ExternalTool])
# What an external agent leaves out: it runs elsewhere, with its own model, instructions and parameters.
EXTERNAL_HAS_NONE = "an external agent runs elsewhere: it has no model, instructions, parameters or other tools"
# What a gateway leaves out: the agents behind it run elsewhere; it has only the MCP servers it fronts.
GATEWAY_HAS_NONE = (
    "a gateway fronts MCP servers for agents that run elsewhere: it has no model, instructions, parameters, "
    "sub-agents or tools other than its servers'"
)
HOSTED_ONLY = ("instructions", "instructions_by_culture", "client_tools", "mcp_servers", "parameters", "sub_agents")


class ClientTool(Routed):
    name: str = Field(pattern=IDENTIFIER)
    description: str = Field(default="", max_length=2000)
    parameters: Annotated[dict[str, Any], AfterValidator(object_schema)] = Field(
        default_factory=lambda: {"type": "object"}
    )
    approvers: Approvers
    require: Required
    escalation: Escalated


# An MCP tool's name (the protocol's: 1 to 128 of these characters).
MCP_TOOL_NAME = r"^[A-Za-z0-9_.-]{1,128}$"
# Between a connection's name and its tool's in a gateway that fronts several servers.
GATEWAY_SEPARATOR = "__"
# How many tools of one server a gateway may set apart from their server.
MOST_TOOL_SETTINGS = 200


class McpTool(Routed):
    """One tool of a gateway's MCP server set apart from its server (SPEC section 15): its own approval mode, who
    decides and what deciding takes; what it leaves out is its server's."""

    approval: Approval | None = Field(default=None, exclude_if=lambda value: value is None)
    approvers: Approvers
    require: Required
    escalation: Escalated


class McpServer(Routed):
    """An MCP server: a connection of kind `mcp`, with the approval mode of its tools (a gateway's tools may each
    say their own, `tools`)."""

    connection: str = Field(pattern=SLUG)
    approval: Approval = "never"
    tool_prefix: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
    tools: dict[Annotated[str, StringConstraints(pattern=MCP_TOOL_NAME)], McpTool] = Field(
        default_factory=dict, max_length=MOST_TOOL_SETTINGS, exclude_if=lambda value: not value
    )
    approvers: Approvers
    require: Required
    escalation: Escalated
    command: Refused
    args: Refused
    env: Refused
    url: Refused

    @property
    def name(self) -> str:
        return self.connection

    def approval_of(self, tool: str) -> Approval:
        """The approval mode of its tool `tool`: the tool's own, else the server's."""
        own = self.tools.get(tool)
        return own.approval if own is not None and own.approval is not None else self.approval


class Escalation(Routed):
    """Who answers a policy's escalations: those of one binding of `hooks` (its id), or of every binding."""

    binding: str | None = Field(default=None, min_length=1, max_length=200)
    approvers: GroupName | Annotated[list[GroupName], Field(min_length=1, max_length=MOST_GROUPS)]
    require: Required
    escalation: Escalated


class KindRouting(Routed):
    """Who answers the requests of one kind (a question, a plan, …) that no tool or server routes."""

    kind: RequestKindName
    approvers: GroupName | Annotated[list[GroupName], Field(min_length=1, max_length=MOST_GROUPS)]
    require: Required
    escalation: Escalated


class Parameter(WireModel):
    name: str = Field(pattern=IDENTIFIER)
    kind: Literal["text", "number", "boolean"] = "text"
    required: StrictBool = False
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
