from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from agents.models import Agent
from console.models import ApiToken, Membership
from console.tenancy import SESSION_KEY, membership_of, role_required


@role_required("reader")
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    tenant = request.membership.tenant  # type: ignore[attr-defined]
    agents = Agent.objects.live().filter(tenant=tenant)
    return render(request, "console/dashboard.html", {"agent_count": agents.count(), "agents": agents[:10]})


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    membership = Membership.objects.filter(user=request.user, tenant_id=request.POST.get("tenant", "")).first()
    if membership is None:
        raise Http404("You are not a member of that tenant.")
    request.session[SESSION_KEY] = membership.tenant_id
    return redirect("dashboard")


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “CI pipeline”.")


@role_required("reader")
def tokens(request: HttpRequest) -> HttpResponse:
    membership = membership_of(request)
    assert membership is not None
    raw = None
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        _, raw = ApiToken.issue(membership, form.cleaned_data["name"])
        form = TokenForm()
    context = {"form": form, "raw": raw, "tokens": membership.tokens.order_by("-created_at")}
    return render(request, "console/tokens.html", context)


@role_required("reader")
@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    membership = membership_of(request)
    token = ApiToken.objects.filter(pk=token_id, membership=membership).first()
    if token is None:
        raise Http404("No such token.")
    token.revoke()
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("tokens")


@role_required("reader")
@require_GET
def not_yet(request: HttpRequest, page: str) -> HttpResponse:
    return render(request, "console/not_yet.html", {"page": page})


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database_ok(), "channel_layer": _channel_layer_ok()}
    return JsonResponse({"status": "ok" if all(checks.values()) else "unavailable", **checks},
                        status=200 if all(checks.values()) else 503)


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        return False


def _channel_layer_ok() -> bool:
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        async_to_sync(layer.send)("healthz.probe", {"type": "healthz.probe"})
        async_to_sync(layer.receive)("healthz.probe")
        return True
    except Exception:
        return False
