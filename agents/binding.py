"""What a run binds from its request: the culture's instructions and the parameter values."""

import re
from typing import Any

from agents.definition_checks import PLACEHOLDER
from agents.definitions import DefinitionContent


class BindingError(ValueError):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


def resolve_culture(content: DefinitionContent, culture: str | None) -> str:
    """The instructions for `culture`: the exact culture, then its parents (tr-TR -> tr), then the default."""
    by_culture = {key.lower(): text for key, text in content.instructions_by_culture.items()}
    parts = (culture or "").lower().split("-")
    while parts and parts[0]:
        text = by_culture.get("-".join(parts))
        if text is not None:
            return text
        parts.pop()
    return content.instructions


def bind_parameters(content: DefinitionContent, values: dict[str, Any]) -> dict[str, Any]:
    """Check `values` against the declared parameters and fill in defaults."""
    declared = {p.name: p for p in content.parameters}
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise BindingError("unknown_parameter", f"The agent declares no parameter {', '.join(map(repr, unknown))}.")
    bound: dict[str, Any] = {}
    for name, parameter in declared.items():
        # null is "no value", as if the name were left out: the default applies.
        value = values.get(name)
        if value is None:
            value = parameter.default
        if value is None:
            if parameter.required:
                raise BindingError("missing_parameter", f"The parameter {name!r} is required and has no default.")
            continue
        if not _fits(parameter.kind, value):
            raise BindingError(
                "invalid_parameter", f"The parameter {name!r} must be a {parameter.kind}; got {value!r}."
            )
        bound[name] = value
    return bound


def _fits(kind: str, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str)


def render_instructions(template: str, bound: dict[str, Any]) -> str:
    """Fill `{{name}}` placeholders in one pass; a placeholder without a value is left as written."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in bound:
            return match.group(0)
        bound_value = bound[name]
        if isinstance(bound_value, bool):
            return "true" if bound_value else "false"
        if isinstance(bound_value, float) and bound_value.is_integer():
            return str(int(bound_value))
        return str(bound_value)

    return PLACEHOLDER.sub(value, template)
