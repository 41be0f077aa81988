"""A hosted agent's A2A agent card (SPEC section 16): its name and description, a skill for each tool it may call
(server, client and sub-agent tools, each MCP server), the bearer security scheme (an Airlock API token), and its
JSON-RPC endpoint in the SDK's protocol version and in 0.3 (the SDK's serializer adds 0.3's own fields)."""

from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_CURRENT, TransportProtocol

from agents.models import AgentVersion
from agents.server_tools import REGISTRY

SCHEME = "airlockToken"
APPROVAL_SAYS = {"never": "", "always": " Asks a person first unless a rule answers.", "every_time": " Asks a person."}


def skills(version: AgentVersion) -> list[AgentSkill]:
    definition = version.definition
    found = []
    for tool in definition.tools:
        known = REGISTRY.get(tool.name)
        says = " ".join((known.description if known else getattr(tool, "description", "")).split())
        says = says or f"The {tool.name} tool."
        asks = APPROVAL_SAYS.get(getattr(tool, "approval", "never"), "")
        found.append(AgentSkill(id=tool.name, name=tool.name, description=f"{says}{asks}", tags=["server-tool"]))
    for client in definition.client_tools:
        says = client.description or f"The {client.name} tool."
        description = f"{says} Runs on the client: the task waits for its result (input-required)."
        found.append(AgentSkill(id=client.name, name=client.name, description=description, tags=["client-tool"]))
    for server in definition.mcp_servers:
        asks = APPROVAL_SAYS.get(server.approval, "")
        description = f"The tools of the MCP server {server.connection}.{asks}"
        found.append(
            AgentSkill(id=f"mcp:{server.connection}", name=server.connection, description=description, tags=["mcp"])
        )
    for name in definition.sub_agents:
        description = f"Hands a task to the agent {name}."
        found.append(AgentSkill(id=f"agent:{name}", name=name, description=description, tags=["sub-agent"]))
    if not found:
        description = definition.description or "Answers in words."
        found.append(AgentSkill(id="chat", name=definition.display_name or definition.name, description=description))
    return found


def agent_card(version: AgentVersion, url: str) -> AgentCard:
    """The card of the agent whose current version is `version`, served at `url` (its JSON-RPC endpoint)."""
    definition = version.definition
    bearer = HTTPAuthSecurityScheme(
        scheme="Bearer", bearer_format="Airlock API token", description="An Airlock API token of an operator or more."
    )
    card = AgentCard(
        name=definition.display_name or definition.name,
        description=definition.description or f"The Airlock agent {definition.name}.",
        version=str(version.number),
        supported_interfaces=[
            AgentInterface(
                url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=PROTOCOL_VERSION_CURRENT
            ),
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=PROTOCOL_VERSION_0_3),
        ],
        provider=AgentProvider(organization="Airlock", url=url.split("/a2a/", 1)[0]),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        security_schemes={SCHEME: SecurityScheme(http_auth_security_scheme=bearer)},
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=skills(version),
    )
    return card


def card_json(version: AgentVersion, url: str) -> dict[str, Any]:
    return agent_card_to_dict(agent_card(version, url))
