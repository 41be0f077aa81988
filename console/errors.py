"""The console's own 403 and 404 pages: styled like every page (base.html), saying the server's reason.

Django answers a missing page with its technical 404 (the URL list) when DEBUG is on, and with a bare page
otherwise; `ErrorPagesMiddleware` renders `console/error.html` instead, whatever DEBUG is, for an address
no route matches and for `Http404` / `PermissionDenied` raised by a view. The API (`/api/`) answers its
errors itself as problem+json (console/api.py) and is left alone. `handler403` / `handler404` in the root
URLconf and `CSRF_FAILURE_VIEW` point here too, for what reaches Django's own handlers.
"""

from collections.abc import Callable

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve

from console.tenancy import membership_of, signed_out

API_PREFIX = "/api/"

TITLES = {403: "Not allowed", 404: "Page not found"}
FALLBACK_REASONS = {403: "You may not open this page.", 404: "There is no such page."}


def error_page(request: HttpRequest, status: int, reason: str) -> HttpResponse:
    """The console page for `status`, saying `reason` and, when signed in, the caller's role."""
    context = {
        "status": status,
        "title": TITLES[status],
        "reason": reason or FALLBACK_REASONS[status],
        "error_membership": membership_of(request),
    }
    return render(request, "console/error.html", context, status=status)


def reason_of(exception: BaseException | None) -> str:
    """The message a view raised with; "" for none, and for a resolver's dictionary of tried patterns."""
    message = exception.args[0] if exception is not None and exception.args else ""
    return message if isinstance(message, str) else ""


def page_not_found(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    return error_page(request, 404, reason_of(exception) or f"There is no page at {request.path}.")


def permission_denied(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    return error_page(request, 403, reason_of(exception))


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form posted without its security token (an old tab, cookies off): what to do about it. An htmx post
    of someone whose cookies are gone altogether is a signed-out session, and says so (`signed_out`)."""
    if getattr(request, "htmx", False) and not request.user.is_authenticated:
        return signed_out(request)
    return error_page(
        request, 403, "The form was sent without a valid security token: reload the page and send it again."
    )


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
