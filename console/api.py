"""The JSON API: authentication (bearer token or browser session), problem+json errors, the routers."""

import functools
import logging
from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, UnreadablePostError
from django.http.multipartparser import MultiPartParserError
from django.urls import URLPattern, URLResolver, re_path
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.openapi.schema import OpenAPISchema
from ninja.operation import Operation
from ninja.security import HttpBearer
from ninja.security.session import SessionAuth
from ninja.types import DictStrAny
from pydantic import Field

from console.json_bodies import JsonBody
from console.models import ApiToken, Membership
from console.problems import TITLES, ApiError, Problem, problem
from console.tenancy import AUTH_METHOD, ConsoleRequest, NotFound, current_membership

logger = logging.getLogger(__name__)


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Membership | None:
        api_token = ApiToken.authenticate(token)
        if api_token is None:
            return None
        console_request = cast("ConsoleRequest", request)
        console_request.membership = api_token.membership
        console_request.tenant = api_token.membership.tenant
        request.user = api_token.membership.user
        AUTH_METHOD.set(f"token:{api_token.pk}")  # reset with the request (TenantMiddleware)
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
            console_request = cast("ConsoleRequest", request)
            console_request.membership = membership
            console_request.tenant = membership.tenant
        return membership


UNSAFE_METHODS = {"post", "put", "patch", "delete"}


def error_statuses(method: str, operation: dict[str, Any]) -> set[int]:
    """The errors any operation of this shape can answer; a route declares the others it has (409, a 404
    without a path parameter) in its `response` as `Problem`."""
    statuses = set()
    if operation.get("security"):
        statuses.add(401)
    if method in UNSAFE_METHODS:
        statuses.add(403)  # every write needs a role above reader; the browser session also needs CSRF
    parameters = operation.get("parameters", [])
    if parameters or "requestBody" in operation:
        statuses.add(400)
    if any(parameter["in"] == "path" for parameter in parameters):
        statuses.add(404)
    if "requestBody" in operation:
        statuses |= {413, 415}
    return statuses


class ConsoleAPI(NinjaAPI):
    """The API, with every error as application/problem+json: from the views (the exception handlers
    below), for a method or a path no operation serves, and in the OpenAPI schema."""

    @property
    def urls(self) -> tuple[list[URLResolver | URLPattern], str, str]:
        patterns, app_name, namespace = super().urls
        for pattern in patterns:
            if isinstance(pattern, URLPattern):
                read_only = pattern.name in ("openapi-json", "openapi-view")
                pattern.callback = _api_view(pattern.callback, read_only=read_only)
        return [*patterns, re_path(r"", _no_route)], app_name, namespace

    def get_openapi_operation_id(self, operation: Operation) -> str:
        """An operation's id is its function's name (`create_run`), not ninja's module path plus name: a client
        generated from the schema keeps its method names when a route moves to another module."""
        return operation.view_func.__name__

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: DictStrAny | None = None
    ) -> OpenAPISchema:
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(problem_schema.pop("$defs", {}), Problem=problem_schema)
        for path_item in schema["paths"].values():
            for method, operation in path_item.items():
                responses = {int(status): response for status, response in operation["responses"].items()}
                for status in error_statuses(method, operation) | {s for s in responses if s >= 400}:
                    responses[status] = {
                        "description": TITLES[status],
                        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
                    }
                operation["responses"] = dict(sorted(responses.items()))
        return schema


def _api_view(view: Callable[..., Any], *, read_only: bool = False) -> Callable[..., Any]:
    """A path's view, with what ninja answers outside its operations as problems: a name in the path no row
    can have (NUL: a 404 before the database refuses it), a method the path does not have (ninja's bare 405;
    the schema and its docs page are `read_only`: GET and HEAD). Every view of this API is synchronous
    (ConsoleASGIHandler runs it on the request's thread)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if any("\x00" in str(value) for value in kwargs.values()):
            return _no_route(request)
        if read_only and request.method not in ("GET", "HEAD"):
            response: HttpResponse = HttpResponseNotAllowed(["GET", "HEAD"])
        else:
            response = view(request, *args, **kwargs)
        if not isinstance(response, HttpResponseNotAllowed):
            return response
        allowed = response["Allow"]
        refused = problem(405, "method_not_allowed", f"{request.method} is not allowed here; use {allowed}.")
        refused["Allow"] = allowed
        return refused

    # Operations check CSRF themselves (ninja's session auth); the schema and docs change nothing.
    return csrf_exempt(wrapped)


@csrf_exempt  # it changes nothing, and a bearer client has no CSRF token to send
def _no_route(request: HttpRequest) -> HttpResponse:
    return problem(404, "not_found", f"No API route {request.path}.")


api = ConsoleAPI(
    title="Airlock API",
    version="1",
    urls_namespace="api",
    auth=[BearerToken(), BrowserSession()],
    docs_url="/docs",
    openapi_url="/openapi.json",
    parser=JsonBody(),
)


def require_role(request: ConsoleRequest, role: str) -> Membership:
    membership = request.membership
    if not membership.allows(role):
        raise ApiError(403, "forbidden", f"This needs the {role} role; you are {membership.role}.")
    return membership


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return problem(exc.status, exc.code, exc.detail, **exc.extra)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    refused = problem(401, "unauthenticated", "Send a valid `Authorization: Bearer` token or log in.")
    refused["WWW-Authenticate"] = 'Bearer realm="airlock"'  # what a 401 must name (RFC 9110, 11.6.1)
    return refused


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # ninja wraps whatever the body parser raised (JsonBody's 415 and `invalid_json`) in a 400 of its own.
    if isinstance(exc.__cause__, ApiError):
        return _api_error(request, exc.__cause__)
    code = "csrf_failed" if "CSRF" in exc.message else "http_error"
    return problem(exc.status_code, code, exc.message)


# What Django raises while reading a body the client sent (request.body, request.POST, request.FILES).


@api.exception_handler(RequestDataTooBig)
def _body_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return problem(413, "body_too_large", f"The request body is larger than the limit of {limit} bytes.")


@api.exception_handler(MultiPartParserError)
def _invalid_multipart(request: HttpRequest, exc: MultiPartParserError) -> HttpResponse:
    return problem(400, "invalid_multipart", f"The multipart body cannot be read ({exc}).")


@api.exception_handler(TooManyFieldsSent)
@api.exception_handler(TooManyFilesSent)
def _too_many_parts(request: HttpRequest, exc: TooManyFieldsSent | TooManyFilesSent) -> HttpResponse:
    """A body of more fields or more files than Django reads: `too_many_fields` or `too_many_files`."""
    if isinstance(exc, TooManyFilesSent):
        parts, limit = "files", settings.DATA_UPLOAD_MAX_NUMBER_FILES
    else:
        parts, limit = "fields", settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    return problem(400, f"too_many_{parts}", f"The body has more than {limit} {parts}.")


@api.exception_handler(SuspiciousOperation)
def _suspicious(request: HttpRequest, exc: SuspiciousOperation) -> HttpResponse:
    return problem(400, "bad_request", "The request cannot be read.")


@api.exception_handler(UnreadablePostError)
def _unreadable(request: HttpRequest, exc: UnreadablePostError) -> HttpResponse:
    return problem(400, "unreadable_body", "The request body ended before its Content-Length.")


@api.exception_handler(NotFound)
def _object_not_found(request: HttpRequest, exc: NotFound) -> HttpResponse:
    return problem(404, exc.code, exc.detail)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return problem(404, "not_found", "Nothing here.")


@api.exception_handler(Exception)
def _server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The safety net: a defect, logged with its traceback; the client learns nothing of its details."""
    logger.error("Unexpected error in %s %s", request.method, request.path, exc_info=exc)
    return problem(500, "server_error", "Something went wrong on the server; it has been logged.")


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
    if any(error["field"].split(".")[0] == "hooks" for error in errors):
        # A definition's policies the agent-hooks loader (or a policy compiler) refused (SPEC section 8).
        return problem(400, "invalid_hooks", "The definition's hooks cannot be loaded.", errors=errors)
    return problem(400, "invalid_request", "The request has invalid fields.", errors=errors)


# A page has 1..MAX_LIMIT items. An offset past MAX_OFFSET is refused before it reaches the database
# (SQLite's OFFSET is a signed 64-bit integer: a larger one was a server error).
MAX_LIMIT = 200
MAX_OFFSET = 1_000_000_000


class Paging(Schema):
    """The `limit` and `offset` query parameters of a paged list (see `page_of`); out of bounds is a 400."""

    limit: int = Field(default=50, ge=1, le=MAX_LIMIT)
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET)


def page_of(query: Any, limit: int, offset: int, wire: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """One page of an ordered query as `{items, limit, offset, next}` (bounds checked by `Paging`)."""
    rows = list(query[offset : offset + limit + 1])
    return {
        "items": [wire(row) for row in rows[:limit]],
        "limit": limit,
        "offset": offset,
        "next": offset + limit if len(rows) > limit else None,
    }


api.add_router("", "agents.api.router")
api.add_router("", "approvals.api.request_routes.router")
# Before the rules' router: `POST /rules/preview` is not a rule's `/rules/{rule_id}`.
api.add_router("", "approvals.api.preview_routes.router")
api.add_router("", "approvals.api.rule_routes.router")
api.add_router("", "approvals.api.receipt_routes.router")
api.add_router("", "approvals.api.away_routes.router")
api.add_router("", "console.connections_api.router")
api.add_router("", "slackapp.slack_routes.router")  # Slack (SPEC section 17)
api.add_router("", "protocols.agui_routes.router")  # AG-UI (SPEC section 16)
