"""The fields of the agent-definition form and how a definition fills them.

Here: the row sections (`SECTIONS`, console/rows.py) and the ones each runtime reads (a gateway's tool rows sit
under their server's row and name it by its row key, `server`), the top-level fields and
the pydantic paths their errors come at, the approvers select of each request kind (`KIND_FIELDS`, labelled by
`agents.request_kinds.KIND_NAMES`), the options of the selects (`choices`); a definition as the fields show it
(`fields_of`, `form_text`, `hooks_text`), and the conversions back that are the form's own (a parameter's typed
`typed_default`, pydantic's messages `in_words`). The form itself, reading and checking a post, is
agents/forms/definition.py.
"""

import json
import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from agents.definitions import IDENTIFIER, MCP_TOOL_NAME, SLUG, DefinitionContent, ExternalTool, ToolBinding
from agents.forms.requirement_text import escalation_text, require_text
from agents.request_kinds import REQUEST_KINDS
from agents.requirements import Routed, approver_list, joined
from agents.server_tools import REGISTRY
from console.connections import MODEL_KINDS, ConnectionSpec
from console.rows import Row, RowKind

SECTIONS: dict[str, RowKind] = {
    section.prefix: section
    for section in (
        RowKind("cultures", ("culture", "instructions"), error_field="culture", multiline=("instructions",)),
        RowKind(
            "tools",
            ("name", "approval", "approvers", "require", "escalation"),
            error_field="name",
            wire="tools",
            blank={"approval": "never"},
            choices=("approval", "approvers"),
        ),
        RowKind(
            "client_tools",
            ("name", "description", "parameters", "approvers", "require", "escalation"),
            error_field="name",
            wire="clientTools",
            choices=("approvers",),
            multiline=("description", "parameters"),
        ),
        RowKind(
            "mcp_servers",
            ("connection", "approval", "tool_prefix", "approvers", "require", "escalation"),
            error_field="connection",
            wire="mcpServers",
            blank={"approval": "never"},
            choices=("approval", "approvers"),
        ),
        RowKind(
            "parameters",
            ("name", "kind", "required", "default", "description"),
            error_field="default",
            wire="parameters",
            blank={"kind": "text"},
            choices=("kind", "required"),
            multiline=("description",),
        ),
        RowKind(
            "external_tools",
            ("name", "description", "parameters", "approval", "approvers", "require", "escalation"),
            error_field="name",
            wire="tools",
            blank={"approval": "always"},
            choices=("approval",),
            multiline=("description", "parameters"),
        ),
        # A gateway's MCP servers (SPEC section 15): no tool prefix (a gateway names its tools itself), and each
        # call asks unless told otherwise.
        RowKind(
            "gateway_servers",
            ("connection", "approval", "approvers", "require", "escalation"),
            error_field="connection",
            wire="mcpServers",
            blank={"approval": "always"},
            choices=("approval", "approvers"),
        ),
        # A tool of a gateway's server set apart from it (`mcpServers[].tools`): `server` is the key of its server's
        # row (a hidden input), an empty approval or approvers its server's. Placed by the form, not by `place`.
        RowKind(
            "gateway_tools",
            ("server", "name", "approval", "approvers", "require", "escalation"),
            error_field="name",
            choices=("server", "approval", "approvers"),
        ),
        # A row without a binding routes the escalations of every binding; one with neither is dropped.
        RowKind(
            "escalations",
            ("binding", "approvers", "require", "escalation"),
            error_field="approvers",
            wire="escalations",
        ),
    )
}
# The sections each runtime reads; the other runtime's rows are posted too (hidden) and kept as typed.
RUNTIME_SECTIONS = {
    "hosted": ("cultures", "tools", "client_tools", "mcp_servers", "parameters", "escalations"),
    "external": ("external_tools", "escalations"),
    "gateway": ("gateway_servers", "gateway_tools", "escalations"),
}
RUNTIMES = [
    ("hosted", "Hosted", "Airlock runs it: a model, instructions and tools of this server."),
    ("external", "External", "It runs elsewhere and brings its tool calls to the inbox, through the API."),
    (
        "gateway",
        "Gateway",
        "MCP clients (Claude Code, Cursor, …) call MCP servers through it: each tool call passes rules, policies "
        "and the inbox first.",
    ),
]
# Top-level form field -> pydantic error path.
TOP_FIELDS = {
    "name": "name",
    "runtime": "runtime",
    "display_name": "displayName",
    "description": "description",
    "instructions": "instructions",
    "request_deadline_seconds": "requestDeadlineSeconds",
    "model_connection": "model.connection",
    "model_name": "model.name",
    "hooks": "hooks",
}
FIELD_BY_PATH = {path: name for name, path in TOP_FIELDS.items()} | {"model": "model_name"}
# The approvers select of each request kind (`requestKinds` on the wire), labelled by the requests it routes
# (`KIND_NAMES`).
KIND_FIELDS = {f"{kind}_approvers": kind for kind in REQUEST_KINDS}
# And the inputs of what deciding those requests takes (SPEC section 14; agents/forms/requirement_text.py).
KIND_SAID = [f"{kind}_{part}" for kind in REQUEST_KINDS for part in ("require", "escalation")]
# What the form does not show, kept from the version being edited (the API changes them).
KEPT_FIELDS = ("maxModelCalls", "subAgents")
HOSTED_KEPT = {"subAgents"}  # an external agent or a gateway has none: switching to either drops them
TEXTAREAS = {"instructions", "description", "hooks"}  # top-level fields kept as typed
_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


APPROVAL_LABELS = {"never": "Never ask", "always": "Ask unless a rule answers", "every_time": "Ask every time"}
# What a gateway's tool row with no approval or approvers of its own does.
AS_ITS_SERVER = "As its server"


def choices(granted: Mapping[str, ConnectionSpec], groups: Collection[str] = ()) -> dict[str, Any]:
    """The options of the form's selects; connections are those granted to the tenant, `groups` its approver
    groups (the approvers selects)."""
    specs = sorted(granted.values(), key=lambda spec: spec.name)
    return {
        "model_connections": [(spec.name, spec.kind) for spec in specs if spec.kind in MODEL_KINDS],
        "model_connection_names": {spec.name for spec in specs if spec.kind in MODEL_KINDS},
        "mcp_connections": [spec.name for spec in specs if spec.kind == "mcp"],
        "approvals": list(APPROVAL_LABELS.items()),
        "tool_approvals": [("", AS_ITS_SERVER), *APPROVAL_LABELS.items()],
        "kinds": [("text", "Text"), ("number", "Number"), ("boolean", "Boolean")],
        "server_tools": sorted(REGISTRY.values(), key=lambda tool: tool.name),
        "server_tool_names": set(REGISTRY),
        "runtimes": RUNTIMES,
        "groups": sorted(groups),
    }


def fields_of(content: DefinitionContent) -> tuple[dict[str, str], dict[str, list[Row]]]:
    """A definition as the form shows it: the top-level fields' text and each section's rows."""
    hosted_tools = [t for t in content.tools if isinstance(t, ToolBinding)]
    external_tools = [t for t in content.tools if isinstance(t, ExternalTool)]
    model = content.model
    values = {
        "name": content.name,
        "runtime": content.runtime,
        "display_name": content.display_name,
        "description": content.description,
        "instructions": content.instructions,
        "request_deadline_seconds": form_text(content.request_deadline_seconds),
        "model_connection": model.connection,
        "model_name": model.name or "",
        "hooks": hooks_text(content.hooks),
    } | {field: "" for field in KIND_FIELDS}
    values |= {field: "" for field in KIND_SAID}
    for routing in content.request_kinds:
        values[f"{routing.kind}_approvers"] = _groups(routing.approvers)
        values |= {f"{routing.kind}_{part}": said for part, said in _said(routing).items()}
    rows = {
        "cultures": [
            SECTIONS["cultures"].new(culture=culture, instructions=text)
            for culture, text in content.instructions_by_culture.items()
        ],
        "tools": [
            SECTIONS["tools"].new(name=t.name, approval=t.approval, approvers=_groups(t.approvers), **_said(t))
            for t in hosted_tools
        ],
        "external_tools": [
            SECTIONS["external_tools"].new(
                name=t.name,
                description=t.description,
                parameters=json.dumps(t.parameters, indent=2),
                approval=t.approval,
                approvers=_groups(t.approvers),
                **_said(t),
            )
            for t in external_tools
        ],
        "client_tools": [
            SECTIONS["client_tools"].new(
                name=t.name,
                description=t.description,
                parameters=json.dumps(t.parameters, indent=2),
                approvers=_groups(t.approvers),
                **_said(t),
            )
            for t in content.client_tools
        ],
        "mcp_servers": [
            SECTIONS["mcp_servers"].new(
                connection=s.connection,
                approval=s.approval,
                tool_prefix=s.tool_prefix or "",
                approvers=_groups(s.approvers),
                **_said(s),
            )
            for s in content.mcp_servers
            if not content.gateway
        ],
        "escalations": [
            SECTIONS["escalations"].new(binding=e.binding or "", approvers=_groups(e.approvers), **_said(e))
            for e in content.escalations
        ],
        "parameters": [
            SECTIONS["parameters"].new(
                name=p.name,
                kind=p.kind,
                required="on" if p.required else "",
                default=form_text(p.default),
                description=p.description,
            )
            for p in content.parameters
        ],
    }
    return values, rows | _gateway_rows(content)


def _gateway_rows(content: DefinitionContent) -> dict[str, list[Row]]:
    """A gateway's servers as rows, and the tools each sets apart as rows naming their server's row."""
    servers: list[Row] = []
    tools: list[Row] = []
    for server in content.mcp_servers if content.gateway else []:
        row = SECTIONS["gateway_servers"].new(
            connection=server.connection, approval=server.approval, approvers=_groups(server.approvers), **_said(server)
        )
        servers.append(row)
        tools += [
            SECTIONS["gateway_tools"].new(
                server=row.key,
                name=name,
                approval=tool.approval or "",
                approvers=_groups(tool.approvers),
                **_said(tool),
            )
            for name, tool in server.tools.items()
        ]
    return {"gateway_servers": servers, "gateway_tools": tools}


_PATTERNS = {
    SLUG: "Use lowercase letters, digits, - and _, starting with a letter or digit (at most 63).",
    IDENTIFIER: "Use letters, digits and _, not starting with a digit (at most 64).",
    r"^[A-Za-z_][A-Za-z0-9_]{0,31}$": "Use letters, digits and _, not starting with a digit (at most 32).",
    MCP_TOOL_NAME: "Use letters, digits, _, - and . (at most 128), as the server names the tool.",
}


# Pydantic's messages of a bound, in the form's words.
_BOUNDS = [
    (re.compile(r"Input should be greater than or equal to (\S+)"), "Give a number of at least {}."),
    (re.compile(r"Input should be less than or equal to (\S+)"), "Give a number of at most {}."),
    (re.compile(r"Input should be greater than (\S+)"), "Give a number above {}."),
    (re.compile(r"Input should be less than (\S+)"), "Give a number below {}."),
    (re.compile(r"String should have at most (\S+) characters?"), "Use at most {} characters."),
]


def in_words(message: str) -> str:
    """Pydantic's message, with regular expressions and bounds replaced by words."""
    for pattern, words in _PATTERNS.items():
        if message == f"String should match pattern '{pattern}'":
            return words
    if message.startswith("String should match pattern"):
        return "This does not have the expected form."
    if message == "Input should be a valid dictionary":
        return "Give a JSON object."
    for bound, said in _BOUNDS:
        if matched := bound.fullmatch(message):
            return said.format(matched.group(1))
    return message[:1].upper() + message[1:]


def typed_default(kind: str, text: str) -> str | int | float | bool | None:
    """A parameter's default, typed by its kind; raises ValueError with a message for the user."""
    if not text:
        return None
    if kind == "number":
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"“{text}” is not a number.") from None
        if not math.isfinite(number):
            raise ValueError(f"“{text}” is not a finite number.")
        return number
    if kind == "boolean":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"“{text}” is not a boolean; use true or false.")
    return text


def hooks_text(hooks: dict[str, Any] | None) -> str:
    """A declaration as the Policies field shows it: indented JSON, empty for none."""
    return json.dumps(hooks, indent=2, ensure_ascii=False) if hooks is not None else ""


def form_text(value: str | float | bool | None) -> str:
    """A value as the form shows it: booleans as true/false, whole floats without “.0”, None as empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _groups(approvers: str | list[str] | None) -> str:
    """A routing's groups as its select's value: one group, or a list comma-joined (the form keeps it as it is)."""
    return joined(approver_list(approvers))


def _said(routed: Routed) -> dict[str, str]:
    """A routing's requirement and escalation as the row's inputs say them."""
    require = routed.routed_require
    return {
        "require": require_text(require.model_dump(by_alias=True) if require is not None else None),
        "escalation": escalation_text([step.model_dump(by_alias=True) for step in routed.routed_escalation]),
    }
