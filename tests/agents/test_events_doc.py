"""docs/events.md lists every event type of Airlock's own (`EXTENSION_TYPES`): the recipe "A new event type" says
so, and a type added without its line would be a type no reader of the docs knows."""

from pathlib import Path

from agents.payloads.base import EXTENSION_TYPES

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def test_every_extension_type_has_its_line_in_the_events_doc() -> None:
    table = "\n".join(line for line in DOC.read_text().splitlines() if line.startswith("| type"))  # "| type(s) `…`"
    missing = sorted(kind.value for kind in EXTENSION_TYPES if f"`{kind.value}`" not in table)
    assert missing == [], f"docs/events.md has no table line for {missing}"
