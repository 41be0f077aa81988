"""The agent-definition form: the posted fields and rows, turned into a `DefinitionContent` and back.

Every list section is a table of rows. A row has a random key, so its inputs are named
`<section>-<key>-<field>` and survive added and removed rows; a validation error found at
`parameters.2.default` is put back on the third kept parameter row, next to its `default` input.
"""

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from django.http import QueryDict
from pydantic import ValidationError

from agents.definitions import CULTURE, IDENTIFIER, SLUG, DefinitionContent, error_map
from agents.tools import REGISTRY
from console.connections import MODEL_KINDS, ConnectionSpec

# Each section's fields, in the order its inputs appear.
SECTIONS: dict[str, tuple[str, ...]] = {
    "cultures": ("culture", "instructions"),
    "tools": ("name", "approval"),
    "client_tools": ("name", "description", "parameters"),
    "mcp_servers": ("connection", "approval", "tool_prefix"),
    "parameters": ("name", "kind", "required", "default", "description"),
}
# Fields whose blank value says nothing (a select's default, a checkbox); a row with only these is dropped.
_CHOICES = {"approval", "kind", "required"}
# The field that names a row (two rows may not share it).
_NAME_FIELD = {"mcp_servers": "connection"}
# Multi-line inputs keep their whitespace; everything else is stripped.
_TEXTAREAS = {"instructions", "description", "parameters"}
# Where an error about a whole row is shown.
_ROW_ERROR_FIELD = {"tools": "name", "client_tools": "name", "mcp_servers": "connection", "parameters": "default"}
# The wire name of each list section, as pydantic reports it in error paths.
_WIRE_SECTION = {
    "tools": "tools",
    "client_tools": "clientTools",
    "mcp_servers": "mcpServers",
    "parameters": "parameters",
}
_WIRE_FIELD = {"toolPrefix": "tool_prefix"}
# Top-level form field -> pydantic error path.
TOP_FIELDS = {
    "name": "name",
    "display_name": "displayName",
    "description": "description",
    "instructions": "instructions",
    "request_deadline_seconds": "requestDeadlineSeconds",
    "model_connection": "model.connection",
    "model_name": "model.name",
}
_TOP_BY_PATH = {path: name for name, path in TOP_FIELDS.items()} | {"model": "model_name"}
_INPUT_NAME = re.compile(r"^(?P<section>[a-z_]+)-(?P<key>[0-9a-f]{8})-(?P<field>[a-z_]+)$")
_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


APPROVAL_LABELS = {"never": "Never ask", "always": "Ask unless a rule answers", "every_time": "Ask every time"}


def choices(granted: Mapping[str, ConnectionSpec]) -> dict[str, Any]:
    """The options of the form's selects; connections are those granted to the tenant."""
    specs = sorted(granted.values(), key=lambda spec: spec.name)
    return {
        "model_connections": [(spec.name, spec.kind) for spec in specs if spec.kind in MODEL_KINDS],
        "model_connection_names": {spec.name for spec in specs if spec.kind in MODEL_KINDS},
        "mcp_connections": [spec.name for spec in specs if spec.kind == "mcp"],
        "approvals": list(APPROVAL_LABELS.items()),
        "kinds": [("text", "Text"), ("number", "Number"), ("boolean", "Boolean")],
        "server_tools": sorted(REGISTRY.values(), key=lambda tool: tool.name),
        "server_tool_names": set(REGISTRY),
    }


@dataclass
class Row:
    """One row of a section: its key, what was typed (as text) and an error message per field."""

    key: str
    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)


def new_key() -> str:
    return uuid4().hex[:8]


def empty_row(section: str) -> Row:
    defaults = {"approval": "never", "kind": "text"}
    return Row(new_key(), {name: defaults.get(name, "") for name in SECTIONS[section]})


class DefinitionForm:
    """The whole definition as text the user can edit; `is_valid()` builds `content` or fills errors."""

    def __init__(self, values: dict[str, str], rows: dict[str, list[Row]]) -> None:
        self.values = values
        self.rows = rows
        self.errors: dict[str, str] = {}
        self.content: DefinitionContent | None = None

    @classmethod
    def blank(cls) -> "DefinitionForm":
        values = dict.fromkeys(TOP_FIELDS, "") | {"model_connection": "scripted"}
        return cls(values, {section: [] for section in SECTIONS})

    @classmethod
    def from_post(cls, data: QueryDict, fixed_name: str | None = None) -> "DefinitionForm":
        """Read the posted fields; rows keep the order in which their inputs were posted.

        `fixed_name` is the name of an agent being edited, which a post cannot change.
        """
        values = {name: _clean(name, data.get(name, "")) for name in TOP_FIELDS}
        if fixed_name is not None:
            values["name"] = fixed_name
        rows: dict[str, dict[str, Row]] = {section: {} for section in SECTIONS}
        for input_name in data:
            match = _INPUT_NAME.match(input_name)
            if not match or match["section"] not in SECTIONS or match["field"] not in SECTIONS[match["section"]]:
                continue
            row = rows[match["section"]].setdefault(match["key"], Row(match["key"], {}))
            row.values[match["field"]] = _clean(match["field"], data.get(input_name, ""))
        kept = {
            section: [_filled(row, section) for row in by_key.values() if _has_content(row)]
            for section, by_key in rows.items()
        }
        return cls(values, kept)

    @classmethod
    def from_content(cls, content: DefinitionContent) -> "DefinitionForm":
        model = content.model
        values = {
            "name": content.name,
            "display_name": content.display_name,
            "description": content.description,
            "instructions": content.instructions,
            "request_deadline_seconds": as_text(content.request_deadline_seconds),
            "model_connection": model.connection,
            "model_name": model.name or "",
        }
        rows = {
            "cultures": [
                Row(new_key(), {"culture": culture, "instructions": text})
                for culture, text in content.instructions_by_culture.items()
            ],
            "tools": [Row(new_key(), {"name": t.name, "approval": t.approval}) for t in content.tools],
            "client_tools": [
                Row(
                    new_key(),
                    {"name": t.name, "description": t.description, "parameters": json.dumps(t.parameters, indent=2)},
                )
                for t in content.client_tools
            ],
            "mcp_servers": [
                Row(
                    new_key(),
                    {"connection": s.connection, "approval": s.approval, "tool_prefix": s.tool_prefix or ""},
                )
                for s in content.mcp_servers
            ],
            "parameters": [
                Row(
                    new_key(),
                    {
                        "name": p.name,
                        "kind": p.kind,
                        "required": "on" if p.required else "",
                        "default": as_text(p.default),
                        "description": p.description,
                    },
                )
                for p in content.parameters
            ],
        }
        return cls(values, rows)

    @property
    def has_row_errors(self) -> bool:
        return any(row.errors for rows in self.rows.values() for row in rows)

    @property
    def has_errors(self) -> bool:
        return bool(self.errors) or self.has_row_errors

    @property
    def general_error(self) -> str:
        """An error about the definition as a whole, not about one input."""
        return self.errors.get("__all__", "")

    def is_valid(self, granted: Mapping[str, ConnectionSpec]) -> bool:
        """Build `content`, or fill errors; `granted` are the connections the tenant may name."""
        self.errors, self.content = {}, None
        for rows in self.rows.values():
            for row in rows:
                row.errors = {}
        wire = self._wire()
        self._check_unique_names()
        found_already = bool(self.errors) or self.has_row_errors
        try:
            content = DefinitionContent.model_validate(wire)
        except ValidationError as error:
            for path, message in error_map(error).items():
                # The only whole-definition error is about duplicate names, which rows show already.
                if not (path == "__all__" and found_already):
                    self._place(path, _readable(message))
            return False
        if found_already:
            return False
        problems = content.connection_problems(granted)
        if problems is not None:
            self.refuse(problems[1])
            return False
        self.content = content
        return True

    def refuse(self, errors: dict[str, str]) -> None:
        """Show errors found past the form (by field path, as `ConnectionRefused` gives them)."""
        self.content = None
        for path, message in errors.items():
            self._place(path, _readable(message))

    def _wire(self) -> dict[str, Any]:
        """The camelCase dict `DefinitionContent` validates; conversions that fail become field errors."""
        v = self.values
        return {
            "name": v["name"],
            "displayName": v["display_name"],
            "description": v["description"],
            "instructions": v["instructions"],
            "requestDeadlineSeconds": self._whole_number("request_deadline_seconds"),
            "model": {
                "connection": v["model_connection"],
                "name": v["model_name"] or None,
            },
            "instructionsByCulture": self._cultures(),
            "tools": [dict(row.values) for row in self.rows["tools"]],
            "clientTools": [self._client_tool(row) for row in self.rows["client_tools"]],
            "mcpServers": [_mcp_server(row) for row in self.rows["mcp_servers"]],
            "parameters": [self._parameter(row) for row in self.rows["parameters"]],
        }

    def _whole_number(self, name: str) -> int | None:
        text = self.values[name]
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            self.errors[name] = "Give a whole number of seconds, or leave it empty."
            return None

    def _cultures(self) -> dict[str, str]:
        cultures: dict[str, str] = {}
        for row in self.rows["cultures"]:
            culture = row.values["culture"]
            if not culture:
                row.errors["culture"] = "Give the culture these instructions are for."
            elif not CULTURE.match(culture):
                row.errors["culture"] = "Not a culture name (like “tr” or “tr-TR”)."
            elif culture in cultures:
                row.errors["culture"] = f"“{culture}” has instructions already in another row."
            else:
                cultures[culture] = row.values["instructions"]
        return cultures

    def _client_tool(self, row: Row) -> dict[str, Any]:
        tool: dict[str, Any] = {"name": row.values["name"], "description": row.values["description"]}
        text = row.values["parameters"].strip()
        if text:
            try:
                tool["parameters"] = json.loads(text)
            except json.JSONDecodeError as error:
                row.errors["parameters"] = f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."
        return tool

    def _parameter(self, row: Row) -> dict[str, Any]:
        v = row.values
        parameter = {
            "name": v["name"],
            "kind": v["kind"],
            "required": bool(v["required"]),
            "description": v["description"],
        }
        try:
            parameter["default"] = _default(v["kind"], v["default"])
        except ValueError as error:
            row.errors["default"] = str(error)
        return parameter

    def _check_unique_names(self) -> None:
        """Duplicate names are an error on the later row, where the user can see and fix it."""
        for section, clash in (
            ("tools", "Another server tool is named “{}”."),
            ("client_tools", "Another client tool is named “{}”."),
            ("mcp_servers", "Another MCP server uses “{}”."),
            ("parameters", "Another parameter is named “{}”."),
        ):
            seen: set[str] = set()
            key = _NAME_FIELD.get(section, "name")
            for row in self.rows[section]:
                name = row.values[key]
                if name and name in seen:
                    row.errors.setdefault(key, clash.format(name))
                seen.add(name)
        server_tools = {row.values["name"] for row in self.rows["tools"]}
        for row in self.rows["client_tools"]:
            if row.values["name"] in server_tools:
                row.errors.setdefault("name", f"A server tool is named “{row.values['name']}” too.")

    def _place(self, path: str, message: str) -> None:
        """Put a pydantic error next to the input it is about."""
        if path in _TOP_BY_PATH:
            self.errors.setdefault(_TOP_BY_PATH[path], message)
            return
        parts = path.split(".")
        section = next((s for s, wire in _WIRE_SECTION.items() if wire == parts[0]), None)
        if section is not None and len(parts) >= 2 and parts[1].isdigit() and int(parts[1]) < len(self.rows[section]):
            row = self.rows[section][int(parts[1])]
            name = _WIRE_FIELD.get(parts[2], parts[2]) if len(parts) > 2 else _ROW_ERROR_FIELD[section]
            row.errors.setdefault(name if name in row.values else _ROW_ERROR_FIELD[section], message)
            return
        self.errors.setdefault("__all__", message)


_PATTERNS = {
    SLUG: "Use lowercase letters, digits, - and _, starting with a letter or digit.",
    IDENTIFIER: "Use letters, digits and _, not starting with a digit.",
    r"^[A-Za-z_][A-Za-z0-9_]{0,31}$": "Use letters, digits and _, not starting with a digit (at most 32).",
}


def _readable(message: str) -> str:
    """Pydantic's message, with regular expressions replaced by words."""
    for pattern, words in _PATTERNS.items():
        if message == f"String should match pattern '{pattern}'":
            return words
    if message.startswith("String should match pattern"):
        return "This does not have the expected form."
    if message == "Input should be a valid dictionary":
        return "Give a JSON object."
    return message[:1].upper() + message[1:]


def _clean(name: str, value: str) -> str:
    # Browsers send textareas with CRLF line ends; keep one form so an unchanged edit compares equal.
    value = value.replace("\r\n", "\n")
    return value if name in _TEXTAREAS else value.strip()


def _has_content(row: Row) -> bool:
    return any(value for name, value in row.values.items() if name not in _CHOICES)


def _filled(row: Row, section: str) -> Row:
    """Fill inputs a browser leaves out (an unchecked checkbox) so templates and parsing see every field."""
    row.values = {name: row.values.get(name, "") for name in SECTIONS[section]}
    return row


def _mcp_server(row: Row) -> dict[str, Any]:
    v = row.values
    return {
        "connection": v["connection"],
        "approval": v["approval"],
        "toolPrefix": v["tool_prefix"] or None,
    }


def _default(kind: str, text: str) -> str | int | float | bool | None:
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


def as_text(value: str | float | bool | None) -> str:
    """A value as the form shows it: booleans as true/false, whole floats without “.0”, None as empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
