"""What every API error is: `ApiError`, raised anywhere below a route, and its application/problem+json body
(`problem`, the `Problem` schema every operation documents). `console.api` renders them and re-exports these."""

import json
from typing import Any

from django.http import HttpResponse
from ninja import Schema
from pydantic import ConfigDict, Field


class ApiError(Exception):
    """An error with a stable `code`, rendered as application/problem+json."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.extra = status, code, detail, extra

    @classmethod
    def of(cls, refused: "Refused") -> "ApiError":
        """An action's refusal as the API answers it, every member of its problem kept."""
        return cls(refused.status, refused.code, refused.detail, **refused.extra)


class Refused(Exception):
    """What an action refuses, nothing changed: the problem's `code`, `detail`, `status` (the class's, unless
    given) and its other members (`extra`: a 403's `reason`). Pages say `detail`; the API answers `ApiError.of`."""

    status = 400

    def __init__(self, code: str, detail: str, status: int | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.code, self.detail, self.extra = code, detail, extra
        if status is not None:
            self.status = status


TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Unprocessable",
    429: "Too many requests",
    500: "Server error",
}


def problem(status: int, code: str, detail: str, **extra: Any) -> HttpResponse:
    """An application/problem+json response (RFC 9457) with a stable `code`; `extra` adds members."""
    body = {
        "type": f"https://airlock.dev/problems/{code}",
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return HttpResponse(json.dumps(body), status=status, content_type="application/problem+json")


class FieldProblem(Schema):
    field: str = Field(description="The offending input, as its dotted path on the wire (`body` for the whole body).")
    message: str


class Problem(Schema):
    """The body of every error response: RFC 9457 problem details with a stable `code`."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": True})

    type: str
    title: str
    status: int
    detail: str
    code: str = Field(description="Stable and machine-readable, e.g. `invalid_request`, `agent_not_found`.")
    errors: list[FieldProblem] = Field(default=[], description="The offending fields, when some are.")
