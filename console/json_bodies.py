"""How the JSON API reads a body (`JsonBody`, ninja's parser): JSON only, bounded in depth and size before any
route reads it, and no text a database column cannot store."""

import json
import math
import sys
from typing import Any

from django.http import HttpRequest
from django.utils.datastructures import MultiValueDict
from ninja.parser import Parser
from ninja.types import DictStrAny

from console.problems import ApiError

# Deeper JSON than this is refused before anything walks it (a definition's JSON schemas need far less; Python's
# encoders and validators give up near 1,000 levels, with a server error).
MAX_JSON_DEPTH = 64
# More values than this in one body are refused before any route reads them: every later step (validation, the
# checks of each route, storing) walks them again, and a 10 MB body of 400,000 keys held a request thread for
# seconds. The largest a route takes (a definition, an external request at its limits) has a few tens of thousands.
MAX_JSON_VALUES = 200_000
# The largest number JSON's readers hold (a double): Python reads a longer integer exactly, and PostgreSQL stores it,
# but a receipt's digest (RFC 8785) and every reader in ECMAScript cannot.
LARGEST_NUMBER = sys.float_info.max
# An integer of 309 digits may be past LARGEST_NUMBER: a body without such a run is not walked for one. Its digits
# read as zeros, the run is a plain substring search, linear in C (a regular expression took 3 s of CPU for 10 MB of
# 308-digit runs, one try from every digit).
_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_LONG_INTEGER = b"0" * 309


def _shape_problem(value: Any) -> str | None:
    """Why `value` (parsed JSON) is too deep or too large to go on with, counting its keys and values once without
    recursion; None when it is neither."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_JSON_VALUES:
            return f"The body holds more than {MAX_JSON_VALUES} values."
        if isinstance(item, dict):
            if depth >= MAX_JSON_DEPTH and item:
                return f"The body is nested deeper than {MAX_JSON_DEPTH} levels."
            seen += len(item)  # the keys
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            if depth >= MAX_JSON_DEPTH and item:
                return f"The body is nested deeper than {MAX_JSON_DEPTH} levels."
            stack.extend((child, depth + 1) for child in item)
    return None


def unstorable(value: Any, path: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """Where `value` (parsed JSON, its shape checked) holds what no database column takes, as `{field, message}`
    errors: text with NUL characters (PostgreSQL refuses them in text and JSON) or unpaired surrogates (not
    encodable as UTF-8), and numbers JSON has not (NaN, infinities: a parser other than `JsonBody`'s, such as the
    MCP SDK's or protobuf's, lets them through; an integer past LARGEST_NUMBER, which every parser reads)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [{"field": ".".join(path) or "body", "message": "is not a finite number"}]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > LARGEST_NUMBER:
        return [{"field": ".".join(path) or "body", "message": "is a number too large for JSON (past 1.8e308)"}]
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return [{"field": ".".join(path) or "body", "message": "contains an unpaired surrogate"}]
        if "\x00" in value:
            return [{"field": ".".join(path) or "body", "message": "contains a NUL character"}]
        return []
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return []
    errors = []
    for key, item in items:
        errors += unstorable(key, path) if isinstance(key, str) else []
        errors += unstorable(item, (*path, str(key)))
    return errors


def unstorable_said(value: Any, path: tuple[str, ...] = ()) -> str | None:
    """`unstorable`'s errors as one sentence's words ("arguments.city contains a NUL character; …"); None without."""
    found = unstorable(value, path)
    return "; ".join(f"{error['field']} {error['message']}" for error in found) if found else None


def _finite_number(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range")
    return number


def _not_a_number(name: str) -> None:
    # Python reads NaN and Infinity; JSON has no such numbers, and no JSON column stores them.
    raise ValueError(f"{name} is not a JSON number")


def _refuse_unstorable(value: Any, raw: bytes | None = None) -> None:
    """Refuse JSON too deep or too large (400 `invalid_json`), or with text no column stores (400
    `invalid_request`). JSON text carries a NUL only as a `\\u` escape (a raw one does not parse), a lone
    surrogate as one or as UTF-8-like bytes starting 0xED (which `json.loads` lets through), and an integer too
    large as a run of 309 digits: a `raw` body with none of them is not walked for them."""
    shape = _shape_problem(value)
    if shape is not None:
        raise ApiError(400, "invalid_json", shape)
    walked = raw is None or b"\\u" in raw or b"\xed" in raw or _LONG_INTEGER in raw.translate(_DIGITS_AS_ZEROS)
    errors = unstorable(value) if walked else []
    if errors:
        raise ApiError(400, "invalid_request", "The request has invalid fields.", errors=errors)


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


class JsonBody(Parser):
    """Reads a body as JSON only when its Content-Type says JSON (415 otherwise: a client must not get an
    answer by accident; an empty body is no fields), and says when it does not parse or nests too deep (400
    `invalid_json`). Text no database stores (NUL, unpaired surrogates) is refused in bodies and query parameters
    as invalid fields."""

    def parse_body(self, request: HttpRequest) -> DictStrAny:
        if not request.body:
            return {}  # no body is no fields (a route whose body is optional needs none), whatever the type says
        content_type = (request.content_type or "").lower()
        if not _is_json(content_type):
            sent = f"not {content_type}" if content_type else "with a Content-Type header"
            raise ApiError(415, "unsupported_media_type", f"Send the body as application/json, {sent}.")
        try:
            body: DictStrAny = json.loads(request.body, parse_float=_finite_number, parse_constant=_not_a_number)
        except (ValueError, RecursionError) as error:
            raise ApiError(400, "invalid_json", f"The body is not valid JSON ({error}).") from None
        _refuse_unstorable(body, request.body)
        return body

    def parse_querydict(
        self, data: MultiValueDict[str, Any], list_fields: list[str], request: HttpRequest
    ) -> DictStrAny:
        parsed = super().parse_querydict(data, list_fields, request)
        _refuse_unstorable(parsed)
        return parsed
