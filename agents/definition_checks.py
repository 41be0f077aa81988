"""The checks of a definition's content that are not its fields' types (agents/definitions.py wires them into
`DefinitionContent`): inline connection settings refused, server tools registered, names distinct, the policies'
declaration loaded against the tools it names, `{{name}}` placeholders declared by a parameter; and a pydantic
refusal said by field path (`error_map`), for the form and problem+json bodies.
"""

import re
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

from pydantic import AfterValidator, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from agents.policies import declaration_problems, unlisted_tools
from agents.server_tools import REGISTRY

# A `{{name}}` in instructions, filled from the parameter of that name (agents.binding.render_instructions).
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def refuse_inline(value: Any) -> Any:
    raise ValueError(
        "inline connection settings are refused: connections belong to the installation; "
        "name one granted to this tenant instead (GET /api/connections lists them)"
    )


def registered(name: str) -> str:
    if name not in REGISTRY:
        raise ValueError(f"no server tool named {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return name


def distinct_sub_agents(names: list[str]) -> list[str]:
    if len(set(names)) != len(names):
        raise ValueError("a sub-agent is named twice")
    return names


def distinct_names(what: str, items: list[Any]) -> list[Any]:
    """Names must differ within the list; the error points at the list ("parameters")."""
    seen: set[str] = set()
    for item in items:
        if item.name in seen:
            raise ValueError(f"two {what} are named {item.name!r}")
        seen.add(item.name)
    return items


def unique(what: str) -> AfterValidator:
    return AfterValidator(partial(distinct_names, what))


def hooks_problems(hooks: dict[str, Any], tools: list[str]) -> list[str]:
    """Why a declaration of policies cannot be saved: the loader's problems, else the tools it names that the
    definition does not have; empty when none."""
    problems = declaration_problems(hooks)
    if not problems:
        problems = unlisted_tools(hooks, tools)
    return problems


def placeholder_errors(
    texts: Sequence[tuple[tuple[str, ...], str, str]], declared: Collection[str]
) -> list[InitErrorDetails]:
    """A pydantic error for each of `texts` (its location, what it is in words, the text) that uses a `{{name}}`
    no parameter declares."""
    return [
        InitErrorDetails(
            type=PydanticCustomError("undefined_placeholder", "{message}", {"message": message}),
            loc=loc,
            input=text,
        )
        for loc, what, text in texts
        if (message := _undefined_placeholders(what, text, declared))
    ]


def _undefined_placeholders(what: str, text: str, declared: Collection[str]) -> str:
    """Why `text` cannot be saved: the placeholders in it that no parameter declares; "" when none."""
    undefined = sorted({name for name in PLACEHOLDER.findall(text) if name not in declared})
    if not undefined:
        return ""
    names = ", ".join("{{" + name + "}}" for name in undefined)
    known = ", ".join(sorted(declared)) or "none yet"
    return f"{what} use {names}, which no parameter declares: add it under Parameters (declared: {known})"


def error_map(error: ValidationError, strip: int = 0) -> dict[str, str]:
    """Field path ("parameters.0.default") -> message, for forms and problem+json bodies."""
    fields: dict[str, str] = {}
    for item in error.errors():
        loc = [str(p) for p in item["loc"][strip:]]
        # Union branches add the tried type to the path ("default.str"); the field is what matters.
        path = ".".join(p for p in loc if p not in {"str", "float", "bool", "int"}) or "__all__"
        message = item["msg"].removeprefix("Value error, ")
        fields.setdefault(path, message)
    return fields
