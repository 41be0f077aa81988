"""The JSON Schemas tenants and agents give (tools' `parameters`, input requests' `requestedSchema`, MCP
elicitations): the only place they are checked and values validated against them (SPEC section 2, the trust
line: nothing a tenant writes may make the server read a file, open a URL, or hold its CPU for long).

`schema_refusal` is what saving or opening one checks; `schema_problems` checks it again (what it validates may
have been stored before these checks, or come from an MCP server) and then validates. A schema refers only
within itself: each `$ref` is `#…`, looked up in a `referencing` registry holding the schema alone, whose
retrieval refuses everything (jsonschema's default registry would fetch `file:` and `http:` references). Its
patterns run on RE2, linear in the text; a pattern RE2 cannot compile (a backreference, a lookaround) is refused.
"""

import json
from collections.abc import Iterator
from contextvars import ContextVar
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin

import re2
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012

# What one schema may weigh: its JSON text and how deeply its objects and arrays nest. External requests'
# own limits (approvals/external_wire.py) may read these.
SCHEMA_MAX_BYTES = 64 * 1024
SCHEMA_MAX_DEPTH = 32
# How many steps one validation may take, a keyword being one and a `$ref` (its lookup) six: about 10 µs each,
# under half a second. The largest arguments an external request may carry (approvals/external_wire.py, 10,000
# values) take about 25,000 against a plain schema. A schema whose `$ref`s fan out (each definition referring
# twice to the next) costs 2^n with no loop at all: past this budget the value is refused, the process not held.
EVALUATION_STEPS = 50_000
REF_STEPS = 6
# How many schemas (objects and booleans where a schema stands) one schema may hold: checking one against the
# meta-schema takes about 90 µs a schema.
SCHEMA_MAX_SCHEMAS = 2_000

# Keywords whose schemas apply to the same value (a loop through these alone never ends), and those whose
# schemas apply to the value's parts or are kept to be referred to.
_IN_PLACE = frozenset(("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas"))
_INTO_PARTS = frozenset(
    (
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "items",
        "prefixItems",
        "contains",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
        "$defs",
        "definitions",
        "dependencies",
    )
)
_APPLICATORS = _IN_PLACE | _INTO_PARTS
# Those that hold a schema per name.
_NAMED = frozenset(("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"))
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is the tenant's mistake, not a line in the server's log
_RE2_OPTIONS.never_capture = True


class _TooCostly(Exception):
    pass


def _refuse_retrieval(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


# Holds nothing: the validator adds the schema itself as its root; any other URI is refused, never fetched.
_LOCAL_ONLY: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


_HEX = frozenset("0123456789abcdefABCDEF")


def _re2_syntax(pattern: str) -> str:
    """ECMA-262's `\\uXXXX` (JSON Schema's patterns are ECMA-262's; Python's `re` read it too) as RE2's
    `\\x{XXXX}`; a scan, as a pattern must not be rewritten by a pattern that may backtrack."""
    if "\\u" not in pattern:
        return pattern
    out, index = [], 0
    while index < len(pattern):
        if pattern[index] == "\\" and index + 1 < len(pattern):
            digits = pattern[index + 2 : index + 6]
            if pattern[index + 1] == "u" and len(digits) == 4 and set(digits) <= _HEX:
                out.append(f"\\x{{{digits}}}")
                index += 6
            else:
                out.append(pattern[index : index + 2])
                index += 2
        else:
            out.append(pattern[index])
            index += 1
    return "".join(out)


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    return re2.compile(_re2_syntax(pattern), _RE2_OPTIONS)


def _pattern_refusal(pattern: str) -> str | None:
    """Why RE2 cannot compile `pattern`, or None when it can."""
    try:
        _compiled(pattern)
    except re2.error as error:
        reason = error.args[0].decode(errors="replace") if error.args and isinstance(error.args[0], bytes) else error
        return f"{reason}; patterns are RE2 (no backreferences or lookaround)"
    return None


_REGEX_FORMAT = FormatChecker(formats=())


@_REGEX_FORMAT.checks("regex", raises=ValueError)
def _is_re2(instance: object) -> bool:
    if isinstance(instance, str) and (refusal := _pattern_refusal(instance)):
        raise ValueError(refusal)
    return True


def _static(value: Any) -> Any:
    if isinstance(value, list):
        return [_static(item) for item in value]
    if not isinstance(value, dict):
        return value
    static = {key: _static(item) for key, item in value.items() if key != "$dynamicRef"}
    if value.get("$dynamicRef") == "#meta":
        static["$ref"] = "#"
    if isinstance(ref := value.get("$ref"), str):
        static["$ref"] = "#" + ref.partition("#")[2]
    return static


def _one_document_metaschema() -> dict[str, Any]:
    """The 2020-12 meta-schema as one document: its vocabularies' keywords side by side, each `$dynamicRef` to
    `#meta` a `$ref` to its top. It checks the same, without the dynamic scope jsonschema searches at every
    subschema (ten times faster: a 56 KB schema took 3 s to check, holding the process)."""
    top = SPECIFICATIONS.contents(Draft202012Validator.META_SCHEMA["$id"])
    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for vocabulary in top["allOf"]:
        contents = SPECIFICATIONS.contents(urljoin(top["$id"], vocabulary["$ref"]))
        properties |= contents.get("properties", {})
        defs |= contents.get("$defs", {})
    return _static({"type": ["object", "boolean"], "properties": properties | top["properties"], "$defs": defs})


_METASCHEMA = Draft202012Validator(_one_document_metaschema(), registry=_LOCAL_ONLY, format_checker=_REGEX_FORMAT)


def _searches(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


# The keywords that run a schema's patterns, on RE2 (jsonschema's own run Python's `re`, backtracking).
def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _searches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _searches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    declared = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [
        key for key in instance if key not in declared and not any(_searches(pattern, key) for pattern in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        if patterns:
            regexes = ", ".join(repr(pattern) for pattern in sorted(patterns))
            yield ValidationError(
                f"{listed} {'does' if len(extras) == 1 else 'do'} not match any of the regexes: {regexes}"
            )
        else:
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {'was' if len(extras) == 1 else 'were'} unexpected)"
            )


_BUDGET: ContextVar[list[int]] = ContextVar("schema_budget")


def _counted(keyword: Any, cost: int) -> Any:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        left = _BUDGET.get(None)
        if left is not None:
            left[0] -= cost
            if left[0] < 0:
                raise _TooCostly
        return keyword(validator, value, instance, schema)

    return counted


_KEYWORDS = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}
_Validator = validators.extend(
    Draft202012Validator,
    {name: _counted(keyword, REF_STEPS if name == "$ref" else 1) for name, keyword in _KEYWORDS.items()},
)


def _depth_refusal(schema: Any) -> str | None:
    stack = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > SCHEMA_MAX_DEPTH:
            return f"the schema nests deeper than {SCHEMA_MAX_DEPTH} levels"
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return None


def _where(path: list[str]) -> str:
    return f" (at {'/'.join(path)})" if path else ""


def _identifier_refusal(value: Any, path: list[str]) -> str | None:
    """A reference that would leave the schema: refused wherever it stands (even inside an `enum` value, which a
    `$ref` may point into)."""
    stack: list[tuple[Any, list[str]]] = [(value, path)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, list):
            stack.extend((item, [*path, str(index)]) for index, item in enumerate(value))
            continue
        if not isinstance(value, dict):
            continue
        ref = value.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            return f"the $ref {ref!r} is refused: a schema may refer only within itself ('#/…'){_where(path)}"
        if "$dynamicRef" in value:
            return f"$dynamicRef is refused: use a $ref within the schema ('#/…'){_where(path)}"
        for key in ("$id", "$schema"):
            if path and isinstance(value.get(key), str):
                return f"{key} is refused inside a schema (only at its top){_where(path)}"
        stack.extend((item, [*path, str(key)]) for key, item in value.items())
    return None


def _children(schema: dict[str, Any], keywords: frozenset[str]) -> Iterator[tuple[Any, list[str]]]:
    for keyword in keywords & schema.keys():
        value = schema[keyword]
        if isinstance(value, dict) and keyword in _NAMED:
            yield from ((item, [keyword, name]) for name, item in value.items())
        elif isinstance(value, list):
            yield from ((item, [keyword, str(index)]) for index, item in enumerate(value))
        else:
            yield value, [keyword]


def _schemas(root: dict[str, Any]) -> dict[int, tuple[dict[str, Any], list[str]]]:
    """Every schema object in `root` (by identity, which `$ref` lookups keep), with where it stands."""
    found: dict[int, tuple[dict[str, Any], list[str]]] = {}
    stack: list[tuple[Any, list[str]]] = [(root, [])]
    while stack:
        schema, path = stack.pop()
        if isinstance(schema, dict) and id(schema) not in found:
            found[id(schema)] = (schema, path)
            stack.extend((child, path + place) for child, place in _children(schema, _APPLICATORS))
    return found


def _reference_refusal(root: dict[str, Any], schemas: dict[int, tuple[dict[str, Any], list[str]]]) -> str | None:
    """Each `$ref` found in the schema and pointing at a schema of it, and no loop of `$ref`s that stays on the
    same value (jsonschema would recurse until Python gives up)."""
    resolver = _LOCAL_ONLY.resolver_with_root(DRAFT202012.create_resource(root))
    edges: dict[int, list[tuple[dict[str, Any], str | None]]] = {}
    for key, (schema, path) in schemas.items():
        targets: list[tuple[dict[str, Any], str | None]] = [
            (child, None) for child, _ in _children(schema, _IN_PLACE) if isinstance(child, dict)
        ]
        ref = schema.get("$ref")
        if isinstance(ref, str):
            try:
                target = resolver.lookup(ref).contents
            except Unresolvable:
                return f"the $ref {ref!r} points to nothing in this schema{_where(path)}"
            if isinstance(target, dict) and id(target) in schemas:
                targets.append((target, ref))
            elif not isinstance(target, bool):
                return f"the $ref {ref!r} points to a value that is not a schema{_where(path)}"
        edges[key] = targets
    return _loop(edges)


def _loop(edges: dict[int, list[tuple[dict[str, Any], str | None]]]) -> str | None:
    """The `$ref` that closes a loop of schemas applying to the same value, if one does (a depth-first search)."""
    done: set[int] = set()
    for start in edges:
        if start in done:
            continue
        on_path: set[int] = {start}
        stack = [(start, iter(edges[start]))]
        while stack:
            key, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                stack.pop()
                on_path.discard(key)
                done.add(key)
                continue
            target, ref = step
            if id(target) in on_path:
                return f"the $ref {ref!r} loops back to where it stands without going into the value"
            if id(target) not in done:
                on_path.add(id(target))
                stack.append((id(target), iter(edges[id(target)])))
    return None


def _without_dialect(schema: dict[str, Any]) -> dict[str, Any]:
    # jsonschema switches to the validator a `$schema` names (whose patterns run on `re`) wherever a `$ref`
    # enters a schema that has one: every schema here is read as 2020-12, by the RE2 validator.
    return {key: value for key, value in schema.items() if key != "$schema"}


def schema_refusal(schema: Any) -> str | None:
    """Why `schema` is refused (said for the person who wrote it, with where in it), or None when it may be used."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return "a JSON Schema is an object"
    refusal = _depth_refusal(schema)
    if refusal:
        return refusal
    text = json.dumps(schema, sort_keys=True, ensure_ascii=False)
    size = len(text.encode())
    if size > SCHEMA_MAX_BYTES:
        return f"the schema is {size} bytes; at most {SCHEMA_MAX_BYTES}"
    return _refusal_of(text)


# Answers check the schema they are validated against again: the same schemas come back, a check is a tenth of
# a second for the largest.
@lru_cache(maxsize=256)
def _refusal_of(text: str) -> str | None:
    schema = json.loads(text)
    refusal = _identifier_refusal(schema, [])
    if refusal:
        return refusal
    schema = _without_dialect(schema)
    schemas = _schemas(schema)
    count = 1 + sum(1 for each, _ in schemas.values() for _child in _children(each, _APPLICATORS))
    if count > SCHEMA_MAX_SCHEMAS:
        return f"the schema holds {count} schemas; at most {SCHEMA_MAX_SCHEMAS}"
    error = next(_METASCHEMA.iter_errors(schema), None)
    if error is not None:
        where = _where([str(p) for p in error.path])
        if error.validator == "format" and error.cause is not None:
            return f"the pattern {error.instance!r} is refused: {error.cause}{where}"
        return f"not a valid JSON Schema: {error.message}{where}"
    if {"unevaluatedProperties", "patternProperties"} <= {keyword for each, _ in schemas.values() for keyword in each}:
        # jsonschema's unevaluatedProperties runs the patterns it meets on `re`.
        return "unevaluatedProperties beside patternProperties is refused (its patterns would run unbounded)"
    return _reference_refusal(schema, schemas)


def schema_problems(schema: Any, content: Any, root: str = "(content)") -> str:
    """Where `content` does not fit `schema`: each problem at its path (`root` for the whole), joined by "; ".
    A schema `schema_refusal` refuses is a problem of its own: nothing is validated against it."""
    refusal = schema_refusal(schema)
    if refusal:
        return f"{root}: the schema is refused: {refusal}"
    validator = _Validator(
        _without_dialect(schema) if isinstance(schema, dict) else schema, registry=_LOCAL_ONLY, format_checker=None
    )
    token = _BUDGET.set([EVALUATION_STEPS])
    try:
        errors = sorted(validator.iter_errors(content), key=lambda e: list(e.path))
    except _TooCostly:
        return f"{root}: checking this value against its schema takes more than {EVALUATION_STEPS} steps; refused"
    except (RecursionError, Unresolvable):
        return f"{root}: this value cannot be checked against its schema"
    finally:
        _BUDGET.reset(token)
    said = dict.fromkeys(f"{'/'.join(map(str, where)) or root}: {words}" for e in errors for where, words in _said(e))
    return "; ".join(said)


# A JSON type in words.
_TYPE_WORDS = {
    "string": "text",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}


def _said(error: Any) -> list[tuple[list[Any], str]]:
    """A validation error in words, at its path: a missing or unexpected property at its own name; a wrong type,
    an enum, an anyOf/oneOf no branch of which fits, said plainly; any other in jsonschema's words."""
    path = list(error.path)
    instance = error.instance if isinstance(error.instance, dict) else {}
    match error.validator:
        case "required":  # an error for each name missing, each saying them all (`schema_problems` says each once)
            missing = [name for name in error.validator_value if name not in instance]
            return [([*path, name], "is required") for name in missing] or [(path, error.message)]
        case "additionalProperties" if error.validator_value is False:
            known = set(error.schema.get("properties") or {})
            extra = [] if error.schema.get("patternProperties") else [name for name in instance if name not in known]
            return [([*path, name], "is not allowed here") for name in extra] or [(path, error.message)]
        case "type":
            wanted = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
            return [(path, "must be " + " or ".join(_TYPE_WORDS.get(str(kind), str(kind)) for kind in wanted))]
        case "enum":
            return [(path, "must be one of " + ", ".join(json.dumps(choice) for choice in error.validator_value))]
        case "anyOf" | "oneOf":
            return [(path, "fits none of the forms it may take")]
    return [(path, error.message)]
