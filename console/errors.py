"""The console's own 403 and 404 pages: styled like every page (base.html), saying the server's reason.

Django answers a missing page with its technical 404 (the URL list) when DEBUG is on, and with a bare page
otherwise; `ErrorPagesMiddleware` renders `console/error.html` instead, whatever DEBUG is, for an address
no route matches and for `Http404` / `PermissionDenied` raised by a view. The API (`/api/`) answers its
errors itself as problem+json (console/api.py) and is left alone. `handler403` / `handler404` in the root
URLconf and `CSRF_FAILURE_VIEW` point here too, for what reaches Django's own handlers.
"""

from collections.abc import Callable

from django.core.exceptions import DisallowedHost, PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve
from django.views import defaults
from django_htmx.http import trigger_client_event

from console.problems import problem
from console.tenancy import membership_of, signed_out

API_PREFIX = "/api/"

TITLES = {403: "Not allowed", 404: "Page not found"}
FALLBACK_REASONS = {403: "You may not open this page.", 404: "There is no such page."}


def error_page(request: HttpRequest, status: int, reason: str, *, about_roles: bool = True) -> HttpResponse:
    """The console page for `status`, saying `reason` and, when signed in, the caller's role (and, for a 403 that
    is `about_roles`, who can change it)."""
    context = {
        "status": status,
        "title": TITLES[status],
        "reason": reason or FALLBACK_REASONS[status],
        "error_membership": membership_of(request),
        "about_roles": about_roles,
    }
    return render(request, "console/error.html", context, status=status)


def reason_of(exception: BaseException | None) -> str:
    """The message a view raised with; "" for none, and for a resolver's dictionary of tried patterns."""
    message = exception.args[0] if exception is not None and exception.args else ""
    return message if isinstance(message, str) else ""


def page_not_found(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    return error_page(request, 404, reason_of(exception) or f"There is no page at {request.path}.")


def bad_request(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    """A request Django refuses before any view (a Host not in ALLOWED_HOSTS): the API's problem+json for the API,
    Django's own page otherwise."""
    if not request.path_info.startswith(API_PREFIX):
        return defaults.bad_request(request, exception if isinstance(exception, Exception) else Exception())
    if isinstance(exception, DisallowedHost):
        return problem(400, "invalid_host", "The request's Host is not this console's.")
    return problem(400, "bad_request", "The request was refused before it was read.")


def permission_denied(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    return error_page(request, 403, reason_of(exception))


# The event an htmx request of a page whose security token is out of date gets (console.js says so, and holds
# the page's answers until it is reloaded).
STALE_EVENT = "airlock:stale"
STALE_PAGE = "This page was opened before you last signed in, so what it sent was refused and nothing changed."


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form posted without its security token (an old tab, cookies off): what to do about it. An htmx post
    of someone whose cookies are gone altogether is a signed-out session, and says so (`signed_out`); one of a
    signed-in page opened before the last sign-in (which renews the token) is stale, and says so (htmx shows no
    error page: the click did nothing, silently)."""
    if getattr(request, "htmx", False):
        if not request.user.is_authenticated:
            return signed_out(request)
        return trigger_client_event(HttpResponse(STALE_PAGE, status=403), STALE_EVENT, {})
    advice = "Go back to copy what you typed, then reload the page and send it again."
    return error_page(request, 403, f"{STALE_PAGE} {advice}", about_roles=False)


class ErrorPagesMiddleware:
    """Sits after the auth and tenant middleware, so the error page shows the navigation of who is signed in;
    inside CommonMiddleware, whose APPEND_SLASH redirect still turns a 404 for `/agents` into `/agents/`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith(API_PREFIX):
            try:
                resolve(request.path_info, getattr(request, "urlconf", None))
            except Resolver404:
                return page_not_found(request)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if request.path_info.startswith(API_PREFIX):
            return None
        if isinstance(exception, Http404):
            return page_not_found(request, exception)
        if isinstance(exception, PermissionDenied):
            return permission_denied(request, exception)
        return None
