"""The content of an agent definition: one pydantic model shared by the console form and the JSON API.

On the wire the fields are camelCase (`displayName`); in Python they are snake_case.
"""

import json
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    StrictInt,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from agents.definition_checks import (
    distinct_names,
    distinct_sub_agents,
    hooks_problems,
    placeholder_errors,
    unique,
)
from agents.definition_items import (
    _EXTERNAL_TOOLS,
    _HOSTED_TOOLS,
    EXTERNAL_HAS_NONE,
    GATEWAY_HAS_NONE,
    GATEWAY_SEPARATOR,
    HOSTED_ONLY,
    SLUG,
    ClientTool,
    Escalation,
    ExternalTool,
    KindRouting,
    McpServer,
    ModelBinding,
    Parameter,
    ToolBinding,
)

# Re-exported: what the rest of Airlock reads of a definition's items, from here as before.
from agents.definition_items import IDENTIFIER as IDENTIFIER
from agents.definition_items import MCP_TOOL_NAME as MCP_TOOL_NAME
from agents.definition_items import McpTool as McpTool
from agents.definition_items import object_schema as object_schema
from agents.policies import webhook_connections
from agents.requirements import (
    Routed,
    Routing,
    WireModel,
    approver_list,
)
from console.connections import MODEL_KINDS, ConnectionSpec

CULTURE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")


class ConnectionRefused(ValueError):
    """A definition names connections the tenant cannot use (see `DefinitionContent.connection_problems`)."""

    status = 400

    def __init__(self, code: str, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{field}: {message}" for field, message in errors.items()))
        self.code, self.errors = code, errors


class PoliciesRefused(ConnectionRefused):
    """A definition's policies do not compile (400 `invalid_hooks`), or its tenant compiled too many new ones
    in the last minute (429 `too_many_policy_compiles`, with `retry_after` seconds)."""

    def __init__(self, errors: dict[str, str], retry_after: int | None = None) -> None:
        super().__init__("invalid_hooks" if retry_after is None else "too_many_policy_compiles", errors)
        self.retry_after = retry_after
        self.status = 400 if retry_after is None else 429


class UnknownGroup(ConnectionRefused):
    """A definition routes requests to approver groups the tenant does not have (400 `unknown_group`)."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("unknown_group", errors)


def _cultures(value: dict[str, str]) -> dict[str, str]:
    bad = [culture for culture in value if not CULTURE.match(culture)]
    if bad:
        raise ValueError(f"not a culture name (like 'tr' or 'tr-TR'): {', '.join(bad)}")
    return value


def _one_per_kind(items: list["KindRouting"]) -> list["KindRouting"]:
    kinds = [item.kind for item in items]
    duplicated = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if duplicated:
        raise ValueError(f"the kind {duplicated[0]!r} is routed twice")
    return items


# How deep sub-agents may call sub-agents: an agent's sub-agents are depth 1 (SPEC section 10).
MAX_SUBAGENT_DEPTH = 3


class DefinitionContent(WireModel):
    """Everything a version of an agent definition holds."""

    name: str = Field(pattern=SLUG)
    # "external": an agent that runs elsewhere and brings its requests (SPEC section 12); "gateway": MCP servers
    # MCP clients call through Airlock (SPEC section 15); left out when hosted.
    runtime: Literal["hosted", "external", "gateway"] = Field(
        default="hosted", exclude_if=lambda value: value == "hosted"
    )
    display_name: str = Field(default="", max_length=200)
    description: str = Field(default="", max_length=5000)
    instructions: str = Field(default="", max_length=100_000)
    instructions_by_culture: Annotated[dict[str, str], AfterValidator(_cultures)] = Field(default_factory=dict)
    model: ModelBinding = Field(default_factory=lambda: ModelBinding.model_validate({}))
    # A hosted agent's server tools, or an external agent's declared tools.
    tools: list[ToolBinding | ExternalTool] = Field(default_factory=list)
    client_tools: Annotated[list[ClientTool], unique("client tools")] = Field(default_factory=list)
    mcp_servers: Annotated[list[McpServer], unique("MCP servers")] = Field(default_factory=list, validate_default=True)
    parameters: Annotated[list[Parameter], unique("parameters")] = Field(default_factory=list)
    request_deadline_seconds: StrictInt | None = Field(default=None, ge=1, le=30 * 24 * 3600)
    # A run that reaches this many model calls asks whether to go on (a `continuation` request).
    max_model_calls: StrictInt = Field(default=25, ge=1, le=1000)
    # An agent-hooks-declaration/1.0 document: the policies every turn passes (SPEC section 8).
    hooks: dict[str, Any] | None = None
    # Approver groups for policy escalations and request kinds (tools and servers name theirs in place).
    escalations: list[Escalation] = Field(default_factory=list, exclude_if=lambda value: not value)
    request_kinds: Annotated[list[KindRouting], AfterValidator(_one_per_kind)] = Field(
        default_factory=list, exclude_if=lambda value: not value
    )

    # Other agents of the tenant the model may call as tools `name(task)` (SPEC section 10).
    sub_agents: Annotated[
        list[Annotated[str, StringConstraints(pattern=SLUG)]], AfterValidator(distinct_sub_agents)
    ] = Field(default_factory=list, max_length=16, exclude_if=lambda value: not value)

    @field_validator("tools", mode="wrap")
    @classmethod
    def _tools_of_runtime(
        cls, tools: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> list[ToolBinding | ExternalTool]:
        """A hosted agent binds server tools by name; an external one declares its own; a gateway has its servers'."""
        runtime = info.data.get("runtime")
        if runtime == "external":
            return distinct_names("tools", list(_EXTERNAL_TOOLS.validate_python(tools)))
        if runtime == "gateway" and tools:
            raise ValueError(GATEWAY_HAS_NONE)
        return distinct_names("server tools", list(_HOSTED_TOOLS.validate_python(tools)))

    @field_validator(*HOSTED_ONLY, "model")
    @classmethod
    def _hosted_only(cls, value: Any, info: ValidationInfo) -> Any:
        runtime = info.data.get("runtime")
        if runtime not in ("external", "gateway") or (runtime == "gateway" and info.field_name == "mcp_servers"):
            return value
        default = cls.model_fields[info.field_name or ""].get_default(call_default_factory=True)
        if value != default:
            raise ValueError(EXTERNAL_HAS_NONE if runtime == "external" else GATEWAY_HAS_NONE)
        return value

    @field_validator("mcp_servers")
    @classmethod
    def _servers_of_runtime(cls, servers: list[McpServer], info: ValidationInfo) -> list[McpServer]:
        """A gateway fronts at least one server, names its tools itself (`<connection>__<tool>` when it fronts
        several) and asks before each call unless told otherwise; only a gateway sets tools apart."""
        if info.data.get("runtime") != "gateway":
            if any(server.tools for server in servers):
                raise ValueError("only a gateway (runtime gateway) sets an MCP server's tools apart")
            return servers
        if not servers:
            raise ValueError("a gateway fronts at least one MCP server")
        if any(server.tool_prefix for server in servers):
            raise ValueError("a gateway names its tools <connection>__<tool> when it fronts several servers")
        for server in servers:
            if "approval" not in server.model_fields_set:
                server.approval = "always"
        return servers

    @property
    def external(self) -> bool:
        return self.runtime == "external"

    @property
    def gateway(self) -> bool:
        return self.runtime == "gateway"

    @property
    def runs_elsewhere(self) -> bool:
        """An external agent or a gateway: no turn of it runs here, and no agent may call it."""
        return self.runtime != "hosted"

    @field_validator("sub_agents")
    @classmethod
    def _no_clash_with_tools(cls, sub_agents: list[str], info: ValidationInfo) -> list[str]:
        tools = {t.name for t in info.data.get("tools", [])} | {t.name for t in info.data.get("client_tools", [])}
        clash = tools & set(sub_agents)
        if clash:
            raise ValueError(f"a tool and a sub-agent share the name {sorted(clash)[0]!r}")
        return sub_agents

    @field_validator("hooks")
    @classmethod
    def _hooks_load(cls, hooks: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        # A stored version was checked when it was saved; a turn checks its policies again as it builds them.
        if hooks is not None and not (info.context or {}).get("stored"):
            tools = [t.name for t in info.data.get("tools", [])] + [t.name for t in info.data.get("client_tools", [])]
            problems = hooks_problems(hooks, tools)
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

    @model_validator(mode="after")
    def _placeholders_declared(self, info: ValidationInfo) -> "DefinitionContent":
        """A `{{name}}` no parameter fills would reach the model as written: refused at save, on the field
        that holds it (stored versions from before this check still load)."""
        if (info.context or {}).get("stored"):
            return self
        declared = {parameter.name for parameter in self.parameters}
        texts = [(("instructions",), "The instructions", self.instructions)] + [
            (("instructionsByCulture", culture), f"The {culture} instructions", text)
            for culture, text in self.instructions_by_culture.items()
        ]
        errors = placeholder_errors(texts, declared)
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

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
    def approver_groups(self) -> dict[str, str]:
        """Every group the definition routes requests to, by the field path that names it (`…approvers`, or
        `…approvers.<n>` in a list, `…require.fromEach.<n>`)."""
        routed: list[tuple[str, Routed]] = (
            [(f"tools.{i}", t) for i, t in enumerate(self.tools)]
            + [(f"clientTools.{i}", t) for i, t in enumerate(self.client_tools)]
            + [(f"mcpServers.{i}", s) for i, s in enumerate(self.mcp_servers)]
            + [
                (f"mcpServers.{i}.tools.{name}", t)
                for i, s in enumerate(self.mcp_servers)
                for name, t in s.tools.items()
            ]
            + [(f"escalations.{i}", e) for i, e in enumerate(self.escalations)]
            + [(f"requestKinds.{i}", k) for i, k in enumerate(self.request_kinds)]
        )
        named: dict[str, str] = {}
        for path, item in routed:
            if isinstance(item.routed_approvers, str):
                named[f"{path}.approvers"] = item.routed_approvers
            else:
                named |= {
                    f"{path}.approvers.{n}": group for n, group in enumerate(approver_list(item.routed_approvers))
                }
            if (require := item.routed_require) is not None:
                named |= {f"{path}.require.fromEach.{n}": group for n, group in enumerate(require.from_each)}
            for n, step in enumerate(item.routed_escalation):
                named |= {f"{path}.escalation.{n}.to.{m}": group for m, group in enumerate(step.to or [])}
        return named

    def _routed(self, kind: str, tool_name: str, policy: Mapping[str, Any] | None) -> list[Routed]:
        """What routes a request the agent opens, most specific first: the policy escalation's (its binding's,
        else every binding's), the tool's, client tool's or MCP server's, the request kind's. An MCP tool is its
        server's by the server's `toolPrefix`; unprefixed tools of several servers cannot be told apart, so the
        first unprefixed server that names a group routes them all."""
        found: list[Routed] = []
        if policy is not None:
            binding = policy.get("binding")
            chosen = next((e for e in self.escalations if e.binding == binding), None)
            chosen = chosen or next((e for e in self.escalations if e.binding is None), None)
            if chosen is not None:
                return [chosen]
        if self.gateway:
            fronted = self.fronting(tool_name)
            if fronted is not None:
                server, upstream_tool = fronted
                own = server.tools.get(upstream_tool)
                found += [*([own] if own is not None else []), server]
            return found + [k for k in self.request_kinds if k.kind == kind]
        tools: list[ToolBinding | ExternalTool | ClientTool] = [*self.tools, *self.client_tools]
        tool = next((t for t in tools if t.name == tool_name), None)
        if tool is not None:
            found.append(tool)
        elif tool_name and kind != "client_tool":  # a client tool no tool names is a run's own: its kind's routing
            prefixed = [s for s in self.mcp_servers if s.tool_prefix and tool_name.startswith(f"{s.tool_prefix}_")]
            servers = prefixed or [s for s in self.mcp_servers if not s.tool_prefix]
            found += [s for s in servers if s.approvers or s.require or s.escalation][:1]
        return found + [k for k in self.request_kinds if k.kind == kind]

    def exposed_name(self, server: McpServer, tool: str) -> str:
        """What a gateway calls its server's tool `tool`: the tool's own name, or `<connection>__<tool>` when it
        fronts several servers."""
        return f"{server.connection}{GATEWAY_SEPARATOR}{tool}" if len(self.mcp_servers) > 1 else tool

    def fronting(self, exposed: str) -> tuple[McpServer, str] | None:
        """The server and upstream tool name a gateway's tool `exposed` stands for (None: no server of its)."""
        if len(self.mcp_servers) == 1:
            return self.mcp_servers[0], exposed
        named = [s for s in self.mcp_servers if exposed.startswith(s.connection + GATEWAY_SEPARATOR)]
        server = max(named, key=lambda s: len(s.connection), default=None)  # `a__b` over `a` for `a__b__x`
        tool = exposed[len(server.connection) + len(GATEWAY_SEPARATOR) :] if server is not None else ""
        return (server, tool) if server is not None and tool else None

    def approvers_for(self, kind: str, tool_name: str, policy: Mapping[str, Any] | None = None) -> str:
        """The groups whose members (and admins) answer a request the agent opens, comma-joined as the request
        stores them; "" for any operator."""
        return self.routing_for(kind, tool_name, policy).approvers

    def routing_for(self, kind: str, tool_name: str, policy: Mapping[str, Any] | None = None) -> Routing:
        """Who answers a request the agent opens and what deciding it takes, as the request stores them: each from
        the most specific routing that says (SPEC sections 11 and 14)."""
        return Routing.of(self._routed(kind, tool_name, policy))

    @property
    def consults_rules(self) -> bool:
        """Whether remembered rules can answer a call: only approval mode `always` asks them."""
        modes = [tool.approval for tool in self.tools] + [server.approval for server in self.mcp_servers]
        return "always" in modes
