"""Form fields generated from a JSON Schema (elicitation requests, parameter declarations)."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SchemaField:
    name: str
    label: str
    input: str  # text | number | integer | checkbox | select | json
    required: bool
    description: str = ""
    choices: list[Any] = field(default_factory=list)
    default: Any = None


def schema_fields(schema: dict[str, Any] | None) -> list[SchemaField]:
    """One field per top-level property of an object schema, in declaration order."""
    if not schema:
        return []
    required = set(schema.get("required") or [])
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        if "enum" in prop:
            widget = "select"
        elif kind in ("number", "integer"):
            widget = kind
        elif kind == "boolean":
            widget = "checkbox"
        elif kind in ("object", "array"):
            widget = "json"
        else:
            widget = "text"
        fields.append(
            SchemaField(
                name=name,
                label=prop.get("title") or name.replace("_", " ").capitalize(),
                input=widget,
                required=name in required,
                description=prop.get("description") or "",
                choices=list(prop.get("enum") or []),
                default=prop.get("default"),
            )
        )
    return fields
