"""The current tenant and role of a request, and the guards views use."""

from collections.abc import Callable
from contextvars import ContextVar
from functools import wraps
from typing import Any, cast
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.utils.functional import SimpleLazyObject
from django.utils.html import format_html
from django_htmx.http import trigger_client_event
from django_htmx.middleware import HtmxDetails

from console.models import Membership, Tenant

SESSION_KEY = "tenant_id"

# How the person acting in this request signed in: "session" (a console page, or the API with a browser session)
# or "token:<token id>" (the API's bearer token); None outside a request. Their receipts say it (SPEC section 13).
AUTH_METHOD: ContextVar[str | None] = ContextVar("airlock_auth_method", default=None)

# What a sign-in through an identity provider (SPEC section 19, identity/oidc_pages.py) keeps in the session: how it
# signed in, "oidc:<connection name>", which is the session's AUTH_METHOD (a password sign-in keeps none: "session");
# and where signing out sends the browser after (the provider's end-session URL), whose origin the session's pages
# allow as a form target (the logout form's redirect).
SIGNED_IN_WITH = "airlock_signed_in_with"
SIGN_OUT_AT = "airlock_sign_out_at"


class ConsoleRequest(HttpRequest):
    """A request as a guarded view or an authenticated API route sees it: `TenantMiddleware` (or the API's
    auth) set `membership` and `tenant`, django-htmx's middleware set `htmx`. Only an annotation: the
    request is a plain `HttpRequest` at run time."""

    membership: Membership
    tenant: Tenant
    htmx: HtmxDetails


class NotFound(Http404):
    """Raised by a tenant-scoped getter: Django's 404 on a page, a problem+json 404 with `code` in the API."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def current_membership(request: HttpRequest) -> Membership | None:
    """The membership of the tenant chosen in this session, else the user's first one."""
    user = request.user
    if not user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("tenant").filter(user=user).order_by("tenant__slug")
    chosen = request.session.get(SESSION_KEY)
    if chosen is not None:
        membership = memberships.filter(tenant_id=chosen).first()
        if membership is not None:
            return membership
    return memberships.first()


class TenantMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        console_request = cast("ConsoleRequest", request)  # what this middleware makes of it
        console_request.membership = cast("Membership", SimpleLazyObject(lambda: current_membership(request)))
        # Read through `membership` when first used, so the API's auth, which replaces it, is seen.
        console_request.tenant = cast("Tenant", SimpleLazyObject(lambda: console_request.membership.tenant))
        # How a person deciding in this request signed in, for their receipts (the API's token auth says "token").
        signed_in = AUTH_METHOD.set(
            request.session.get(SIGNED_IN_WITH, "session") if request.user.is_authenticated else None
        )
        try:
            response = self.get_response(request)
        finally:
            AUTH_METHOD.reset(signed_in)
        sign_out_at = request.session.get(SIGN_OUT_AT) if request.user.is_authenticated else None
        if sign_out_at and not hasattr(response, "_csp_config"):
            provider = "{0.scheme}://{0.netloc}".format(urlsplit(sign_out_at))
            response._csp_config = {  # type: ignore[attr-defined]
                **settings.SECURE_CSP,
                "form-action": [*settings.SECURE_CSP["form-action"], provider],
            }
        return response


def membership_of(request: HttpRequest) -> Membership | None:
    membership = getattr(request, "membership", None)
    # SimpleLazyObject wrapping None is still truthy-looking; unwrap by touching an attribute.
    if membership is None or getattr(membership, "pk", None) is None:
        return None
    return membership


# The client event of an htmx request made after its session ended: console.js says "You were signed out"
# and links to the login page this event names.
SIGNED_OUT_EVENT = "airlock:signed-out"


def signed_out(request: HttpRequest) -> HttpResponse:
    """The answer to an htmx request without a session: a 401 and the signed-out event, never the login page,
    which htmx would follow the redirect to and swap into the page (a card, the inbox list). Signing in
    returns to the page the person was on, not to the fragment it asked for."""
    htmx = cast("ConsoleRequest", request).htmx
    login = resolve_url(settings.LOGIN_URL) + "?" + urlencode({"next": htmx.current_url_abs_path or "/"})
    response = HttpResponse(format_html('You were signed out. <a href="{}">Sign in</a>', login), status=401)
    return trigger_client_event(response, SIGNED_OUT_EVENT, {"login": login})


def signed_in_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`login_required`, except for an htmx request, which is answered `signed_out`."""
    redirecting = login_required(view)

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated and cast("ConsoleRequest", request).htmx:
            return signed_out(request)
        return redirecting(request, *args, **kwargs)

    return guarded


def role_required(role: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Signed in (`signed_in_required`), then a membership in the current tenant with at least `role` (else 403)."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @signed_in_required
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            membership = membership_of(request)
            if membership is None or not membership.allows(role):
                raise PermissionDenied(f"This needs the {role} role in the current tenant.")
            cast("ConsoleRequest", request).tenant = membership.tenant  # the tenant itself, no longer lazy
            return view(request, *args, **kwargs)

        return guarded

    return decorator


def tenant_context(request: HttpRequest) -> dict[str, Any]:
    membership = membership_of(request)
    if membership is None:
        return {}
    return {
        "membership": membership,
        "tenant": membership.tenant,
        "can_operate": membership.allows("operator"),
        "can_admin": membership.allows("admin"),
        "all_memberships": Membership.objects.select_related("tenant").filter(user_id=membership.user_id),
    }
