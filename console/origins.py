"""Which pages may open the console websocket: those of the console's own origins.

A browser sends the session cookie with a websocket handshake whatever page opens it, and nothing like CORS
stops that page from reading the pushes. So the handshake's Origin must be one of the console's origins,
compared by scheme, host and port (channels' AllowedHostsOriginValidator compares hosts only, which lets
`http://127.0.0.1:9999` read a console served on `http://127.0.0.1:8000`). The rule is the one Django's
CSRF check applies to an Origin header (`CsrfViewMiddleware._origin_verified`): the handshake's own scheme
and Host (the Host validated against ALLOWED_HOSTS), or an entry of CSRF_TRUSTED_ORIGINS (`*.` entries
match subdomains), which is how a console behind a TLS proxy names its public origin.

A handshake without an Origin is refused: browsers always send one on websockets, so only a non-browser
client lacks it, and such a client can send the console's origin like any other header.
"""

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.utils.http import is_same_domain


class Handshake(HttpRequest):
    """A websocket handshake as the HTTP request it is, so Django's own rules read its host and scheme
    (ALLOWED_HOSTS, USE_X_FORWARDED_HOST, SECURE_PROXY_SSL_HEADER)."""

    def __init__(self, scope: dict[str, Any]) -> None:
        super().__init__()
        for name, value in scope.get("headers", []):
            key = "HTTP_" + name.decode("latin1").upper().replace("-", "_")
            self.META.setdefault(key, value.decode("latin1"))
        self._secure = scope.get("scheme") in ("wss", "https")

    def _get_scheme(self) -> str:
        return "https" if self._secure else "http"

    @property
    def own_origin(self) -> str | None:
        if "HTTP_HOST" not in self.META:
            return None
        try:
            return f"{self.scheme}://{self.get_host()}"
        except DisallowedHost:
            return None


def trusted_origin(origin: str) -> bool:
    """Whether CSRF_TRUSTED_ORIGINS lists `origin`, exactly or through a `scheme://*.domain` entry."""
    if origin in (entry for entry in settings.CSRF_TRUSTED_ORIGINS if "*" not in entry):
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        allowed = urlsplit(entry)
        wildcard = "*" in allowed.netloc and allowed.scheme == parsed.scheme
        if wildcard and is_same_domain(parsed.netloc, allowed.netloc.lstrip("*")):
            return True
    return False


def console_origin(scope: dict[str, Any]) -> bool:
    """Whether the handshake of `scope` comes from a page of one of the console's origins."""
    handshake = Handshake(scope)
    origin = handshake.META.get("HTTP_ORIGIN")
    if origin is None:
        return False
    return origin == handshake.own_origin or trusted_origin(origin)


class ConsoleOriginValidator:
    """Refuses, before anything else runs, a websocket handshake from a page of another origin (daphne
    answers 403)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket" and not console_origin(scope):
            await WebsocketDenier()(scope, receive, send)
            return
        await self.application(scope, receive, send)
