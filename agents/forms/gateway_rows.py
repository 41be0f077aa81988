"""A gateway's rows in the agent form (SPEC section 15): its MCP server rows with the rows of the tools each sets apart
nested under them (a tool row names its server's row by key), their wire items, and where an error about them goes."""

import re
from collections import defaultdict
from typing import Any

from agents.definitions import GATEWAY_SEPARATOR, MCP_TOOL_NAME
from agents.forms.definition_fields import SECTIONS, in_words
from agents.forms.requirement_text import with_approvers
from console.rows import Row


def nested(servers: list[Row], tools: list[Row]) -> list[tuple[Row, list[Row]]]:
    """Each server row with its tool rows (a tool row naming no server row is dropped: its server's was removed)."""
    by_server: dict[str, list[Row]] = defaultdict(list)
    for row in tools:
        by_server[row.values["server"]].append(row)
    return [(row, by_server.get(row.key, [])) for row in servers]


def exposed_names(servers: list[tuple[Row, list[Row]]]) -> list[str]:
    """What clients call the tools the rows set apart (`DefinitionContent.exposed_name`)."""
    return [
        f"{row.values['connection']}{GATEWAY_SEPARATOR}{name}" if len(servers) > 1 else name
        for row, tools in servers
        for name in (tool.values["name"] for tool in tools)
        if name
    ]


def server_wire(row: Row, tool_rows: list[Row]) -> dict[str, Any]:
    """A gateway's server with the tools its rows set apart (`tools`, by name); a tool row without a name, with
    a name no MCP tool has, or naming a tool another row of the server names, is an error at its name."""
    server = with_approvers({"connection": row.values["connection"], "approval": row.values["approval"]}, row)
    tools: dict[str, Any] = {}
    for tool_row in tool_rows:
        name, approval = tool_row.values["name"], tool_row.values["approval"]
        if not name:
            tool_row.errors["name"] = "Give the tool's name, as its server lists it."
        elif not re.fullmatch(MCP_TOOL_NAME, name):
            tool_row.errors["name"] = in_words(f"String should match pattern '{MCP_TOOL_NAME}'")
        elif name in tools:
            tool_row.errors["name"] = f"Another row of this server sets “{name}” apart."
        else:
            tools[name] = with_approvers({"approval": approval} if approval else {}, tool_row)
    return server | ({"tools": tools} if tools else {})


def place_error(form: Any, parts: list[str], message: str) -> bool:
    """Put an error about a gateway's servers beside its input: about them all (none given) at the section, about
    one of a server's tools (`mcpServers.0.tools.<name>.<field>`) on that tool's row; False for the others (the
    server rows' own, `RowKind.place`)."""
    if len(parts) == 1:
        form.errors.setdefault("gateway_servers", message)
        return True
    if len(parts) < 4 or parts[2] != "tools" or not parts[1].isdigit():
        return False
    servers = form.gateway_servers
    if int(parts[1]) >= len(servers):
        return False
    server, tools = servers[int(parts[1])]
    # A tool's name may hold dots (`cancel.meeting`), as the path does between its parts.
    rest = ".".join(parts[3:])
    named = [tool for tool in tools if rest == tool.values["name"] or rest.startswith(tool.values["name"] + ".")]
    row = max(named, key=lambda tool: len(tool.values["name"]), default=None)
    if row is None:
        server.errors.setdefault("connection", message)
        return True
    inside = rest[len(row.values["name"]) + 1 :].split(".")[0]
    field = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", inside).lower() if inside else "name"
    row.errors.setdefault(field if field in SECTIONS["gateway_tools"].fields else "name", message)
    return True
