"""The agent-definition form: the posted fields and rows, turned into a `DefinitionContent` and back.

Every list section is a table of rows (console/rows.py): inputs named `<section>-<key>-<field>`, and a
validation error found at `parameters.2.default` put back on the third kept parameter row. The policies
(`hooks`) are the fields of agents/forms/hooks.py, assembled into the declaration document the API takes (or
that document as raw JSON); the loader's refusals are shown at the field and line they are about. Routing (SPEC
section 11) is an approvers select on each tool and MCP server row, one per request kind, and rows of policy
escalations (a binding id, or none for every binding).

The runtime (SPEC sections 12 and 15) picks the sections that count: a hosted agent's model, instructions, server
and client tools, MCP servers and parameters, an external agent's declared tools, or a gateway's MCP servers with
the tools each sets apart (rows under their server's row, naming it by its row key). The page posts them all (it
only hides the other runtimes', so switching back loses nothing) and the form reads those of the chosen runtime.
"""

import json
from collections.abc import Mapping
from typing import Any

from django.http import QueryDict
from pydantic import ValidationError

from agents.definition_checks import error_map
from agents.definitions import CULTURE, DefinitionContent
from agents.forms import gateway_rows
from agents.forms.definition_fields import (
    FIELD_BY_PATH,
    HOSTED_KEPT,
    KEPT_FIELDS,
    KIND_FIELDS,
    KIND_SAID,
    RUNTIME_SECTIONS,
    SECTIONS,
    TEXTAREAS,
    TOP_FIELDS,
    fields_of,
    hooks_text,
    in_words,
    typed_default,
)
from agents.forms.hooks import PolicyEditor
from agents.forms.requirement_text import said_requirements, with_approvers, with_requirements
from agents.request_kinds import KIND_NAMES
from console.connections import ConnectionSpec
from console.rows import Row, clean_text


class DefinitionForm:
    """The whole definition as text the user can edit; `is_valid()` builds `content` or fills errors."""

    def __init__(
        self, values: dict[str, str], rows: dict[str, list[Row]], policies: PolicyEditor | None = None
    ) -> None:
        self.values = values
        self.rows = rows
        self.policies = policies or PolicyEditor("", [], [])
        self.errors: dict[str, str] = {}
        self.content: DefinitionContent | None = None
        # The version being edited: what the form does not show is kept from it (`_keep`).
        self.kept: DefinitionContent | None = None

    @classmethod
    def blank(cls) -> "DefinitionForm":
        values = dict.fromkeys([*TOP_FIELDS, *KIND_FIELDS, *KIND_SAID], "") | {
            "model_connection": "scripted",
            "runtime": "hosted",
        }
        return cls(values, {section: [] for section in SECTIONS})

    @classmethod
    def from_post(cls, data: QueryDict, editing: DefinitionContent | None = None) -> "DefinitionForm":
        """Read the posted fields; rows keep the order in which their inputs were posted.

        `editing` is the current version of an agent being edited: a post cannot change its name, and what
        the form does not show (its model-call limit, sub-agents) is kept from it.
        """
        values = {
            name: clean_text(data.get(name, ""), name in TEXTAREAS) for name in [*TOP_FIELDS, *KIND_FIELDS, *KIND_SAID]
        }
        values["runtime"] = values["runtime"] or "hosted"  # a post from before runtimes (or by hand) is hosted
        if editing is not None:
            values["name"] = editing.name
        rows = {name: section.posted(data) for name, section in SECTIONS.items()}
        form = cls(values, rows, PolicyEditor.from_post(data))
        form.kept = editing
        return form

    @classmethod
    def from_content(cls, content: DefinitionContent) -> "DefinitionForm":
        values, rows = fields_of(content)
        return cls(values, rows, PolicyEditor.of(content.hooks))

    @property
    def external(self) -> bool:
        return self.values["runtime"] == "external"

    @property
    def gateway(self) -> bool:
        return self.values["runtime"] == "gateway"

    @property
    def runs_elsewhere(self) -> bool:
        """An external agent or a gateway: no model, instructions or hosted tools, and no hosted-only kinds."""
        return self.external or self.gateway

    @property
    def sections(self) -> tuple[str, ...]:
        """The row sections the chosen runtime reads (a runtime typed by hand: the hosted ones, to show errors)."""
        return RUNTIME_SECTIONS.get(self.values["runtime"], RUNTIME_SECTIONS["hosted"])

    @property
    def gateway_servers(self) -> list[tuple[Row, list[Row]]]:
        """A gateway's server rows, each with the rows of the tools it sets apart, as the page nests them."""
        return gateway_rows.nested(self.rows["gateway_servers"], self.rows["gateway_tools"])

    @property
    def gateway_tool_names(self) -> list[str]:
        """What clients call the tools the gateway's rows set apart (`DefinitionContent.exposed_name`)."""
        return gateway_rows.exposed_names(self.gateway_servers)

    @property
    def has_row_errors(self) -> bool:
        return any(row.errors for rows in self.rows.values() for row in rows)

    @property
    def has_errors(self) -> bool:
        return bool(self.errors) or self.has_row_errors

    @property
    def hooks_problems(self) -> list[str]:
        """The refusals of the declaration no policy field holds, in words."""
        return self.policies.problems

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
        wire = self._keep(self._wire())
        self._check_unique_names()
        found_already = bool(self.errors) or self.has_row_errors
        try:
            content = DefinitionContent.model_validate(wire)
        except ValidationError as error:
            for path, message in error_map(error).items():
                # The only whole-definition error is about duplicate names, which rows show already.
                if not (path == "__all__" and found_already):
                    self._place(path, message)
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
            self._place(path, message)

    def _wire(self) -> dict[str, Any]:
        """The camelCase dict `DefinitionContent` validates; conversions that fail become field errors."""
        v = self.values
        if self.gateway:
            return {
                "name": v["name"],
                "runtime": "gateway",
                "displayName": v["display_name"],
                "description": v["description"],
                "requestDeadlineSeconds": self._whole_number("request_deadline_seconds"),
                "mcpServers": [gateway_rows.server_wire(row, tools) for row, tools in self.gateway_servers],
                "hooks": self._hooks(),
            } | self._routing()
        if v["runtime"] != "hosted":  # external, or a runtime typed by hand, which pydantic refuses by name
            return {
                "name": v["name"],
                "runtime": v["runtime"],
                "displayName": v["display_name"],
                "description": v["description"],
                "requestDeadlineSeconds": self._whole_number("request_deadline_seconds"),
                "tools": [self._external_tool(row) for row in self.rows["external_tools"]],
                "hooks": self._hooks(),
            } | self._routing()
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
            "tools": [
                with_approvers({"name": row.values["name"], "approval": row.values["approval"]}, row)
                for row in self.rows["tools"]
            ],
            "clientTools": [with_approvers(self._client_tool(row), row) for row in self.rows["client_tools"]],
            "mcpServers": [_mcp_server(row) for row in self.rows["mcp_servers"]],
            "parameters": [self._parameter(row) for row in self.rows["parameters"]],
            "hooks": self._hooks(),
        } | self._routing()

    @property
    def kind_routing(self) -> list[tuple[str, str, str, str, bool, list[tuple[str, str, str, str, str]]]]:
        """Each request kind's select: its field, label, chosen group ("" for anyone), error, whether only a
        hosted agent opens requests of that kind, and the inputs of what deciding them takes (name, label,
        example, value, error)."""
        return [
            (
                field,
                KIND_NAMES[kind].routes,
                self.values[field],
                self.errors.get(field, ""),
                KIND_NAMES[kind].hosted_only,
                [
                    (name, label, example, self.values[name], self.errors.get(name, ""))
                    for name, label, example in (
                        (f"{kind}_require", "Requires", "requires: 2 from sre, security"),
                        (f"{kind}_escalation", "Escalation", "escalation: 15m to sre-leads; 1h deny"),
                    )
                ],
            )
            for field, kind in KIND_FIELDS.items()
        ]

    @property
    def routed_kinds(self) -> list[str]:
        """The form fields of the request kinds routed to a group, in the order `requestKinds` lists them; an
        external agent's or a gateway's leave out the (hidden) kinds it never opens."""
        return [
            field
            for field, kind in KIND_FIELDS.items()
            if self.values[field] and not (self.runs_elsewhere and KIND_NAMES[kind].hosted_only)
        ]

    def _routing(self) -> dict[str, Any]:
        """The escalations' and request kinds' approver groups, as the wire names them."""
        for row in self.rows["escalations"]:
            if not row.values["approvers"]:
                row.errors["approvers"] = "Choose the group that answers these escalations."
        for field, kind in KIND_FIELDS.items():
            if not self.values[field] and (self.values[f"{kind}_require"] or self.values[f"{kind}_escalation"]):
                self.errors[field] = "Choose the group that answers these requests: what it takes is theirs."
        return {
            "escalations": [
                with_requirements({"binding": row.values["binding"] or None, "approvers": row.values["approvers"]}, row)
                for row in self.rows["escalations"]
            ],
            "requestKinds": [
                said_requirements(
                    {"kind": KIND_FIELDS[field], "approvers": self.values[field]},
                    self.values,
                    self.errors,
                    field.removesuffix("approvers"),
                )
                for field in self.routed_kinds
            ],
        }

    def _keep(self, wire: dict[str, Any]) -> dict[str, Any]:
        """`wire` with the top-level fields the edited version had and the form does not show (KEPT_FIELDS); a
        routing's list of groups (a select's value, comma-joined) as the list it is."""
        routed = [item for section in ROUTED_KEYS for item in wire.get(section) or []]
        routed += [tool for server in wire.get("mcpServers") or [] for tool in (server.get("tools") or {}).values()]
        for item in routed:
            if isinstance(item.get("approvers"), str) and "," in item["approvers"]:
                item["approvers"] = item["approvers"].split(",")
        if self.kept is None:
            return wire
        kept = self.kept.wire()
        elsewhere = "runtime" in wire  # an external agent or a gateway (a hosted agent's wire leaves it out)
        return wire | {key: kept[key] for key in KEPT_FIELDS if key in kept and not (elsewhere and key in HOSTED_KEPT)}

    def _whole_number(self, name: str) -> int | None:
        text = self.values[name]
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            self.errors[name] = "Give a whole number of seconds, or leave it empty."
            return None

    def _hooks(self) -> Any:
        """The declaration the policy fields hold, or the raw JSON one; None for no policies."""
        if not self.policies.raw:
            document = self.policies.document()
            if self.policies.has_errors:
                self.errors["hooks"] = "Correct the policy fields marked in red."
                return None
            self.values["hooks"] = hooks_text(document)  # the raw box shows what the fields make
            return document
        text = self.values["hooks"]
        if not text.strip():
            return None
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            self._refuse_hooks(f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno}).")
            return None
        if not isinstance(document, dict):
            self._refuse_hooks("Give a JSON object: an agent-hooks-declaration/1.0 document.")
            return None
        return document

    def _refuse_hooks(self, message: str) -> None:
        self.errors["hooks"] = message
        self.policies.problems.append(message)

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

    def _external_tool(self, row: Row) -> dict[str, Any]:
        return with_approvers(self._client_tool(row) | {"approval": row.values["approval"]}, row)

    def _parameter(self, row: Row) -> dict[str, Any]:
        v = row.values
        parameter = {
            "name": v["name"],
            "kind": v["kind"],
            "required": bool(v["required"]),
            "description": v["description"],
        }
        try:
            parameter["default"] = typed_default(v["kind"], v["default"])
        except ValueError as error:
            row.errors["default"] = str(error)
        return parameter

    def _check_unique_names(self) -> None:
        """Duplicate names are an error on the later row, where the user can see and fix it."""
        for section, key, clash in (
            ("tools", "name", "Another server tool is named “{}”."),
            ("client_tools", "name", "Another client tool is named “{}”."),
            ("mcp_servers", "connection", "Another MCP server uses “{}”."),
            ("parameters", "name", "Another parameter is named “{}”."),
            ("external_tools", "name", "Another tool is named “{}”."),
            ("gateway_servers", "connection", "Another MCP server uses “{}”."),
        ):
            if section not in self.sections:
                continue
            seen: set[str] = set()
            for row in self.rows[section]:
                name = row.values[key]
                if name and name in seen:
                    row.errors.setdefault(key, clash.format(name))
                seen.add(name)
        if self.runs_elsewhere:
            return
        server_tools = {row.values["name"] for row in self.rows["tools"]}
        for row in self.rows["client_tools"]:
            if row.values["name"] in server_tools:
                row.errors.setdefault("name", f"A server tool is named “{row.values['name']}” too.")

    def _place(self, path: str, message: str) -> None:
        """Put a pydantic error next to the input it is about."""
        if path == "hooks" or path.startswith("hooks."):
            # The loader's problems (joined with "; "), with their JSON pointers; a connection's path is one too.
            where = path.removeprefix("hooks").replace(".", "/")
            for problem in (f"at {where}: {message}" if where else message).split("; "):
                self.policies.place(problem)
            self.errors.setdefault("hooks", "The policies were refused.")
            return
        message = in_words(message)
        if path in FIELD_BY_PATH:
            self.errors.setdefault(FIELD_BY_PATH[path], message)
            return
        parts = path.split(".")
        if self.gateway and parts[0] == "mcpServers" and gateway_rows.place_error(self, parts, message):
            return
        if (
            parts[0] == "requestKinds"
            and len(parts) > 1
            and parts[1].isdigit()
            and int(parts[1]) < len(self.routed_kinds)
        ):
            self.errors.setdefault(self.routed_kinds[int(parts[1])], message)
            return
        if not any(SECTIONS[name].place(self.rows[name], path, message) for name in self.sections):
            self.errors.setdefault("__all__", message)


# The wire's routed sections.
ROUTED_KEYS = ("tools", "clientTools", "mcpServers", "escalations", "requestKinds")


def _mcp_server(row: Row) -> dict[str, Any]:
    v = row.values
    return with_approvers(
        {"connection": v["connection"], "approval": v["approval"], "toolPrefix": v["tool_prefix"] or None}, row
    )
