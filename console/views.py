import asyncio
import uuid

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, get_channel_layer
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.models import Agent, Run
from console.dashboard import AGENTS_SHOWN, chart, days, oldest_waiting, recent_trouble
from console.models import ApiToken, Membership
from console.tenancy import SESSION_KEY, ConsoleRequest, role_required

# Load balancers give up after a few seconds; answer before they do.
HEALTHZ_TIMEOUT_SECONDS = 2


@role_required("reader")
@require_GET
def dashboard(request: ConsoleRequest) -> HttpResponse:
    """The first look: what waits longest, what went wrong lately, and the last 14 days as a chart."""
    tenant, now = request.tenant, timezone.now()
    agents = list(Agent.objects.live().filter(tenant=tenant).order_by("name")[: AGENTS_SHOWN + 1])
    chart_days = days(tenant, timezone.localdate(now))
    context = {
        "agents": agents[:AGENTS_SHOWN],
        "more_agents": len(agents) > AGENTS_SHOWN,
        "has_runs": Run.objects.filter(tenant=tenant).exists() if agents else False,
        "waiting": oldest_waiting(request.membership),
        "trouble": recent_trouble(tenant, now),
        "days": chart_days,
        "chart": chart(chart_days),
    }
    return render(request, "console/dashboard.html", context)


class SwitchTenantForm(forms.Form):
    tenant = forms.IntegerField(min_value=1, max_value=2**63 - 1)


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    form = SwitchTenantForm(request.POST)
    # A tampered value ("", "abc", 30 digits) is no tenant of the user's rather than a database error.
    membership = (
        Membership.objects.filter(user_id=request.user.pk or 0, tenant_id=form.cleaned_data["tenant"]).first()
        if form.is_valid()
        else None
    )
    if membership is None:
        raise Http404("You are not a member of that tenant.")
    request.session[SESSION_KEY] = membership.tenant_id
    return redirect("dashboard")


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “CI pipeline”.")
    # One token per form shown: a reload that sends the form again (the browser offers it) makes no second one.
    once = forms.CharField(widget=forms.HiddenInput, required=False)


FORMS_KEPT = 20  # forms not sent yet, per browser session


def _token_form(request: ConsoleRequest) -> TokenForm:
    """A form to create a token, with a one-time key kept in the session until the form is sent."""
    once = uuid.uuid4().hex
    request.session["token_forms"] = [*request.session.get("token_forms", [])[-(FORMS_KEPT - 1) :], once]
    return TokenForm(initial={"once": once})


@role_required("reader")
def tokens(request: ConsoleRequest) -> HttpResponse:
    membership = request.membership
    raw = None
    sent_before = False
    if request.method == "POST":
        waiting = request.session.get("token_forms", [])
        once = request.POST.get("once", "")
        form = TokenForm(request.POST)
        if once not in waiting:
            sent_before, form = True, _token_form(request)
        elif form.is_valid():
            request.session["token_forms"] = [key for key in waiting if key != once]
            _, raw = ApiToken.issue(membership, form.cleaned_data["name"])
            form = _token_form(request)
    else:
        form = _token_form(request)
    tokens = membership.tokens.order_by("-created_at")
    context = {"form": form, "raw": raw, "sent_before": sent_before, "tokens": tokens}
    return render(request, "console/tokens.html", context)


@role_required("reader")
@require_POST
def revoke_token(request: ConsoleRequest, token_id: int) -> HttpResponse:
    membership = request.membership
    token = ApiToken.objects.filter(pk=token_id, membership=membership).first()
    if token is None:
        raise Http404("No such token.")
    token.revoke()
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("tokens")


@role_required("reader")
@require_GET
def not_yet(request: ConsoleRequest, page: str) -> HttpResponse:
    return render(request, "console/not_yet.html", {"page": page})


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database_ok(), "channel_layer": _channel_layer_ok()}
    return JsonResponse(
        {"status": "ok" if all(checks.values()) else "unavailable", **checks},
        status=200 if all(checks.values()) else 503,
    )


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
        return async_to_sync(_round_trip)(layer)
    except Exception:
        return False


async def _round_trip(layer: BaseChannelLayer) -> bool:
    """Send a message to a fresh channel of our own and read it back, within a bounded time.

    A channel of our own keeps concurrent probes (several daphne processes on one Redis) from reading
    each other's messages; the timeout makes an unreachable layer a 503 rather than a hung probe.
    """
    async with asyncio.timeout(HEALTHZ_TIMEOUT_SECONDS):
        channel = await layer.new_channel("healthz.")
        await layer.send(channel, {"type": "healthz.probe"})
        message = await layer.receive(channel)
    return message.get("type") == "healthz.probe"
