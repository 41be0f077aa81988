"""Table rows a user adds and removes in the browser: the sections of the agent-definition form
(agents/forms/definition.py) and the conditions of a new rule (approvals/views/rule_pages.py), one mechanism for both.

A row has a random key, so its inputs are named `<prefix>-<key>-<field>` and survive rows added (a blank row
served by the form's row view, appended by htmx) and removed (`data-remove-row`, static/console/console.js)
with no renumbering. Posted rows keep the order in which their inputs came and a row left empty is dropped;
an error that pydantic finds at `<list>.2.<field>` goes back on the third kept row, next to that input.
"""

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from uuid import uuid4

from django.http import QueryDict

_INPUT_NAME = re.compile(r"^(?P<prefix>[a-z_]+)-(?P<key>[0-9a-f]{8})-(?P<field>[a-z_]+)$")
_CAPITAL = re.compile(r"(?<=[a-z0-9])([A-Z])")


@dataclass
class Row:
    """One row: its key, what was typed (as text) and an error message per field."""

    key: str
    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)


def clean_text(value: str, multiline: bool) -> str:
    """A posted value: a textarea as typed, with one kind of line end (browsers send CRLF, and an unchanged
    edit must compare equal), anything else stripped."""
    value = value.replace("\r\n", "\n")
    return value if multiline else value.strip()


@dataclass(frozen=True)
class RowKind:
    """The rows of one table: their inputs and how a post of them reads."""

    prefix: str
    fields: tuple[str, ...]  # in the order their inputs appear
    error_field: str  # where an error about the row as a whole is shown
    wire: str | None = None  # the list the rows become in the wire content, as pydantic names it in error paths
    blank: Mapping[str, str] = field(default_factory=dict)  # a new row's values other than ""
    choices: Collection[str] = ()  # selects and checkboxes: their value alone keeps no row
    multiline: Collection[str] = ()  # textareas, kept as typed

    def new(self, **values: str) -> Row:
        """A row with a fresh key: blank, or holding `values`."""
        return Row(uuid4().hex[:8], {name: values.get(name, self.blank.get(name, "")) for name in self.fields})

    def posted(self, data: QueryDict) -> list[Row]:
        """The rows of a post, in the order their inputs came; an input a browser leaves out (an unchecked
        checkbox) is empty, a row with nothing typed is dropped."""
        rows: dict[str, Row] = {}
        for name in data:
            match = _INPUT_NAME.match(name)
            if match and match["prefix"] == self.prefix and match["field"] in self.fields:
                row = rows.setdefault(match["key"], Row(match["key"], {}))
                row.values[match["field"]] = clean_text(data.get(name, ""), match["field"] in self.multiline)
        for row in rows.values():
            row.values = {name: row.values.get(name, "") for name in self.fields}
        return [row for row in rows.values() if any(v for k, v in row.values.items() if k not in self.choices)]

    def place(self, rows: list[Row], path: str, message: str) -> bool:
        """Put an error found at `path` (a wire path like `conditions.2.value`) on its row, next to that input
        unless it shows an error already; False when the path is not about one of `rows`."""
        parts = path.split(".")
        if parts[0] != self.wire or len(parts) < 2 or not parts[1].isdigit() or int(parts[1]) >= len(rows):
            return False
        name = _CAPITAL.sub(r"_\1", parts[2]).lower() if len(parts) > 2 else self.error_field
        rows[int(parts[1])].errors.setdefault(name if name in self.fields else self.error_field, message)
        return True
