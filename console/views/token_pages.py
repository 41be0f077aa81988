"""The API tokens page: a member's tokens, making one (once per form shown) and revoking one."""

import uuid

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from console.models import ApiToken
from console.tenancy import ConsoleRequest, role_required


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


# Never kept by the browser: the page that shows a new token's secret must not come back with Back.
@never_cache
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
