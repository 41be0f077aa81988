"""The current tenant and role of a request, and the guards views use."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject

from console.models import Membership

SESSION_KEY = "tenant_id"


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
        request.membership = SimpleLazyObject(lambda: current_membership(request))  # type: ignore[attr-defined]
        return self.get_response(request)


def membership_of(request: HttpRequest) -> Membership | None:
    membership = getattr(request, "membership", None)
    # SimpleLazyObject wrapping None is still truthy-looking; unwrap by touching an attribute.
    if membership is None or getattr(membership, "pk", None) is None:
        return None
    return membership


def role_required(role: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Login required, then a membership in the current tenant with at least `role` (else 403)."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @login_required
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            membership = membership_of(request)
            if membership is None or not membership.allows(role):
                raise PermissionDenied(f"This needs the {role} role in the current tenant.")
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
