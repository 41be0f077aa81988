"""`/a2a/{agent}`: a hosted agent as an A2A server (SPEC section 16), served in the console's process
(`console.asgi` hands it every path under `/a2a/`) by the a2a-sdk's Starlette routes: the JSON-RPC endpoint at
`/a2a/{agent}` (the SDK's protocol version, and 0.3's method names through its compatibility adapter) and the agent
card at `/a2a/{agent}/.well-known/agent-card.json`.

Each request is authenticated here first, as the MCP gateway's are: an Airlock API token (`Authorization: Bearer`)
of the agent's tenant; the card takes any member's, the JSON-RPC endpoint an operator's or more. No token is 401,
an agent of another tenant (or one that runs elsewhere: external, gateway) 404: on the JSON-RPC endpoint as a
JSON-RPC error with that HTTP status, in the error shape of the caller's protocol version (0.3's for 0.3's method
names, as the SDK's own errors), on the card as the API's problem+json (A2A gives a card no error shape). A 0.3
request whose values the current protocol's types cannot hold is refused here as invalid params, a body that is not
UTF-8 or nests too deep to read as a parse error (`_unreadable`).
Every request runs its database work on one thread of its own (`ThreadSensitiveContext`), its connections closed
when it ends."""

import json
import re
from collections.abc import Callable
from typing import Any

from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.routes.jsonrpc_dispatcher import JSONRPC03Adapter
from a2a.utils.constants import VERSION_HEADER
from a2a.utils.errors import InvalidRequestError
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.db import connections
from django.http.request import split_domain_port, validate_host
from google.protobuf.json_format import ParseError
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agents.models import Agent, AgentVersion
from console.models import ApiToken
from console.problems import ApiError, problem
from console.tenancy import AUTH_METHOD
from protocols.a2a_cards import card_json
from protocols.a2a_handler import CALLER, AirlockRequestHandler, Caller

PREFIX = "/a2a/"
PATH = re.compile(r"^/a2a/([a-z0-9][a-z0-9_-]{0,62})(/|/\.well-known/agent-card\.json)?$")
CARD_SUFFIX = "/.well-known/agent-card.json"
# The largest JSON-RPC request a client may send.
MAX_MESSAGE_BYTES = 1024 * 1024
# The 0.3 method names the SDK's dispatcher hands to its 0.3 adapter (imported from the dispatcher's module: imported
# on its own first, the adapter's module is a circular import in the SDK).
V0_3_METHODS = frozenset(JSONRPC03Adapter.METHOD_TO_MODEL)
# How the SDK's 0.3 adapter turns each 0.3 request into the current protocol's before the handler sees it (its
# RequestHandler03): a value the current protocol's types cannot hold fails there, and the adapter answers it as an
# internal error (`_unreadable` answers it first).
_V0_3_CONVERSIONS: dict[str, Callable[[Any], Any]] = {
    "message/send": conversions.to_core_send_message_request,
    "message/stream": conversions.to_core_send_message_request,
    "tasks/get": conversions.to_core_get_task_request,
    "tasks/cancel": conversions.to_core_cancel_task_request,
    "tasks/resubscribe": conversions.to_core_subscribe_to_task_request,
    "tasks/pushNotificationConfig/set": conversions.to_core_create_task_push_notification_config_request,
    "tasks/pushNotificationConfig/get": conversions.to_core_get_task_push_notification_config_request,
    "tasks/pushNotificationConfig/list": conversions.to_core_list_task_push_notification_config_request,
    "tasks/pushNotificationConfig/delete": conversions.to_core_delete_task_push_notification_config_request,
    "agent/getAuthenticatedExtendedCard": conversions.to_core_get_extended_agent_card_request,
}
assert set(_V0_3_CONVERSIONS) == V0_3_METHODS, "a 0.3 method of the SDK's adapter without its conversion here"


def authenticate(header: str | None, name: str, url: str, *, card: bool) -> Caller:
    """The caller of agent `name` (ApiError: 401 without a valid token, 403 for the JSON-RPC endpoint under an
    operator, 404 for no hosted agent of that name in the token's tenant)."""
    api_token = ApiToken.bearer(header)
    membership = api_token.membership
    if not card and not membership.allows("operator"):
        raise ApiError(403, "forbidden", "Sending an agent tasks takes an operator's token or more.")
    agent = Agent.objects.live().filter(tenant=membership.tenant, name=name).first()
    version = (
        AgentVersion.objects.select_related("agent").filter(agent=agent, number=agent.current_version).first()
        if agent is not None
        else None
    )
    if agent is None or version is None or version.definition.runs_elsewhere:
        raise ApiError(404, "agent_not_found", f"No hosted agent named {name!r} in this tenant.")
    return Caller(membership, api_token.pk, agent, version, url)


class CallerContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the authenticated caller the handler reads."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER] = request.scope[CALLER]
        return context


async def serve_agent_card(request: Request) -> JSONResponse:
    caller: Caller = request.scope[CALLER]
    return JSONResponse(card_json(caller.version, caller.url))


def _routes(handler: AirlockRequestHandler) -> list[Any]:
    built = CallerContext()
    rpc = [
        route
        for path in ("/a2a/{agent}", "/a2a/{agent}/")
        for route in create_jsonrpc_routes(handler, path, context_builder=built, enable_v0_3_compat=True)
    ]
    return [*rpc, Route("/a2a/{agent}" + CARD_SUFFIX, serve_agent_card, methods=["GET"])]


class A2AApp:
    """The ASGI application of `/a2a/…`."""

    def __init__(self) -> None:
        self.handler = AirlockRequestHandler()
        self.app = Starlette(routes=_routes(self.handler))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        match = PATH.match(scope["path"])
        card = bool(match and match.group(2) == CARD_SUFFIX)
        if match is None:
            await _refuse(send, ApiError(404, "not_found", "An A2A agent is served at /a2a/{agent}."), card=True)
            return
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if not validate_host(split_domain_port(host)[0], settings.ALLOWED_HOSTS):
            refusal = ApiError(400, "invalid_host", "The request's Host is not this console's.")
            await _refuse(send, refusal, card=card, receive=receive, asked=headers)
            return
        url = f"{scope.get('scheme', 'http')}://{host}{PREFIX}{match.group(1)}"
        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        async with ThreadSensitiveContext():
            try:
                try:
                    caller = await sync_to_async(authenticate)(authorization, match.group(1), url, card=card)
                except ApiError as refusal:
                    await _refuse(send, refusal, card=card, receive=receive, asked=headers)
                    return
                # Whoever answers a request here is signed in by this token (the receipts' `authMethod`).
                AUTH_METHOD.set(f"token:{caller.token_id}")
                scope = {**scope, CALLER: caller}
                if not card:
                    body, whole = await _body(receive)
                    refused = _unreadable(body) if whole else None
                    if refused is not None:
                        await JSONResponse(refused)(scope, receive, send)
                        return
                    receive = _replayed(body, whole, receive)
                await self.app(scope, receive, send)
            finally:
                await sync_to_async(connections.close_all)()


async def _body(receive: Any) -> tuple[bytes, bool]:
    """The request's body as far as it was read, and whether that is all of it: reading stops past
    MAX_MESSAGE_BYTES."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > MAX_MESSAGE_BYTES:
            return body, False
        if message.get("type") != "http.request" or not message.get("more_body"):
            return body, True


def _replayed(body: bytes, whole: bool, receive: Any) -> Any:
    """A `receive` that gives the SDK the `body` read (refusing one over MAX_MESSAGE_BYTES: the SDK's dispatcher
    answers the 413 as a JSON-RPC error), then whatever comes next (a disconnect)."""
    given = False

    async def replay() -> dict[str, Any]:
        nonlocal given
        if not whole:
            raise HTTPException(413, f"A request holds at most {MAX_MESSAGE_BYTES} bytes.")
        if given:
            return dict(await receive())
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _unreadable(body: bytes) -> dict[str, Any] | None:
    """The JSON-RPC answer to what the SDK would answer as an internal error (-32603, with Python's words): a body
    that is not UTF-8 or nests too deep to read (-32700, a parse error, as the SDK answers other bodies that are not
    JSON), and a request in 0.3's names that its 0.3 adapter reads but cannot convert to the current protocol (an
    unpaired surrogate in any text, a file's bytes not base64, a history length past 32 bits, data nested past
    protobuf's 100 levels: 0.3's -32602 invalid params). None for any other request, which the SDK answers."""
    try:
        request = json.loads(body)
    except UnicodeDecodeError:
        return build_error_response(None, JSONParseError(message="The body is not UTF-8 text."))
    except RecursionError:
        return build_error_response(None, JSONParseError(message="The body nests too deep to read."))
    except ValueError:
        return None  # the SDK says where it does not parse
    method = request.get("method") if isinstance(request, dict) else None
    if not isinstance(method, str) or method not in _V0_3_CONVERSIONS:
        return None
    try:
        typed = JSONRPC03Adapter.METHOD_TO_MODEL[method].model_validate(request)  # type: ignore[attr-defined]
    except ValidationError:
        return None  # the adapter refuses it in its words
    try:
        _V0_3_CONVERSIONS[method](typed)
    except UnicodeError:
        detail = "A text in the request holds an unpaired surrogate, which UTF-8 cannot encode."
    except (ValueError, TypeError, OverflowError, ParseError) as error:
        detail = f"The request's params cannot be read: {error}."
    else:
        return None
    refusal = types_v03.InvalidParamsError(message=detail, data={"code": "invalid_request"})
    return {"jsonrpc": "2.0", "id": _echoed_id(request), "error": refusal.model_dump(by_alias=True)}


async def _refuse(
    send: Any, refusal: ApiError, *, card: bool, receive: Any = None, asked: dict[bytes, bytes] | None = None
) -> None:
    """The refusal as the card's problem+json (console.problems.problem), or as a JSON-RPC error for the endpoint
    (`_jsonrpc_refusal`: the request is read for its method and id)."""
    if card:
        response = problem(refusal.status, refusal.code, refusal.detail)
        body, kind = response.content, b"application/problem+json"
    else:
        request = await _read_request(receive) if receive is not None else None
        body, kind = _jsonrpc_refusal(refusal, request, asked or {}), b"application/json"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    if refusal.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="airlock"'))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_request(receive: Any) -> dict[str, Any] | None:
    """The JSON-RPC request a refused client sent, when it is a JSON object of at most MAX_MESSAGE_BYTES."""
    body, whole = await _body(receive)
    if not whole:
        return None
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return request if isinstance(request, dict) else None


def _jsonrpc_refusal(refusal: ApiError, request: dict[str, Any] | None, headers: dict[bytes, bytes]) -> bytes:
    """The refusal as a JSON-RPC error (-32600, Airlock's `code` in its data) in the shape of the caller's protocol
    version, as the SDK answers its own errors: 0.3's (`data` the object) for a 0.3 method name, 1.0's (`data` a
    list of details, the code in one's `metadata`) for any other; a request whose method cannot be read is 1.0's
    with an `A2A-Version: 1.x` header and 0.3's without one (the SDK reads no header as 0.3). The request's id is
    echoed when it is one JSON-RPC allows."""
    method = request.get("method") if request is not None else None
    request_id = _echoed_id(request)
    data = {"code": refusal.code}
    if isinstance(method, str) and method:
        speaks_0_3 = method in V0_3_METHODS
    else:
        version = headers.get(VERSION_HEADER.lower().encode(), b"").decode("latin-1").strip()
        speaks_0_3 = not version.startswith("1.")
    if speaks_0_3:
        error = types_v03.InvalidRequestError(message=refusal.detail, data=data).model_dump(by_alias=True)
        return bytes(JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}).body)
    return bytes(JSONResponse(build_error_response(request_id, InvalidRequestError(refusal.detail, data=data))).body)


def _echoed_id(request: dict[str, Any] | None) -> str | int | None:
    """The request's id, when it is one JSON-RPC allows (a string or an integer)."""
    request_id = request.get("id") if request is not None else None
    return None if isinstance(request_id, bool) or not isinstance(request_id, str | int) else request_id


__all__ = ["PREFIX", "A2AApp"]
