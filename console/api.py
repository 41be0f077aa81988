"""The JSON API: authentication (bearer token or browser session), problem+json errors, the routers."""

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.security import HttpBearer
from ninja.security.session import SessionAuth

from console.models import ApiToken, Membership
from console.tenancy import current_membership


class ApiError(Exception):
    """An error with a stable `code`, rendered as application/problem+json."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.extra = status, code, detail, extra


TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    409: "Conflict",
    413: "Payload too large",
    422: "Unprocessable",
    500: "Server error",
}


def problem(status: int, code: str, detail: str, **extra: Any) -> HttpResponse:
    body = {
        "type": f"https://airlock.dev/problems/{code}",
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
    return HttpResponse(json.dumps(body), status=status, content_type="application/problem+json")


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Membership | None:
        api_token = ApiToken.authenticate(token)
        if api_token is None:
            return None
        request.membership = api_token.membership  # type: ignore[attr-defined]
        request.user = api_token.membership.user
        return api_token.membership


class BrowserSession(SessionAuth):
    """The console's own session; CSRF is checked on unsafe methods."""

    def _get_key(self, request: HttpRequest) -> str | None:
        # Without a logged-in session there is nothing to forge: skip the CSRF check so a request
        # without valid credentials ends as 401, not as a misleading 403 "CSRF check failed".
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> Membership | None:
        membership = current_membership(request)
        if membership is not None:
            request.membership = membership  # type: ignore[attr-defined]
        return membership


api = NinjaAPI(
    title="Airlock API",
    version="1",
    urls_namespace="api",
    auth=[BearerToken(), BrowserSession()],
    docs_url="/docs",
    openapi_url="/openapi.json",
)


def require_role(request: HttpRequest, role: str) -> Membership:
    membership: Membership = request.membership  # type: ignore[attr-defined]
    if not membership.allows(role):
        raise ApiError(403, "forbidden", f"This needs the {role} role; you are {membership.role}.")
    return membership


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return problem(exc.status, exc.code, exc.detail, **exc.extra)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return problem(401, "unauthenticated", "Send a valid `Authorization: Bearer` token or log in.")


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    code = "csrf_failed" if "CSRF" in exc.message else "http_error"
    return problem(exc.status_code, code, exc.message)


@api.exception_handler(NinjaValidationError)
def _invalid(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    errors = []
    for item in exc.errors:
        loc = [str(p) for p in item.get("loc", ())]
        # ninja prefixes ("body", "<param name>", ...); the wire path is what the client sent.
        if loc[:1] == ["body"]:
            loc = loc[2:]
        elif loc[:1] in (["query"], ["path"]):
            loc = loc[1:]
        loc = [p for p in loc if p not in {"str", "float", "bool", "int"}]
        errors.append({"field": ".".join(loc) or "body", "message": item["msg"].removeprefix("Value error, ")})
    return problem(400, "invalid_request", "The request has invalid fields.", errors=errors)


def page_of(query: Any, limit: int, offset: int, wire: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """One page of an ordered query as `{items, limit, offset, next}` (limit kept within 1..200)."""
    limit = max(1, min(limit, 200))
    rows = list(query[offset : offset + limit + 1])
    return {
        "items": [wire(row) for row in rows[:limit]],
        "limit": limit,
        "offset": offset,
        "next": offset + limit if len(rows) > limit else None,
    }


api.add_router("/agents", "agents.api.router")
api.add_router("", "agents.runs_api.router")
api.add_router("", "approvals.api.router")
api.add_router("", "approvals.rules_api.router")
