"""The inbox page: every pending request of the tenant, live; operators answer from here."""

import json
import uuid
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from pydantic import ValidationError

from approvals.answers import Response, ResponseRefused, respond
from approvals.models import PendingRequest, RequestKind, RequestStatus
from approvals.push import render_request
from console.tenancy import membership_of, role_required


def _open_requests(request: HttpRequest) -> Any:
    tenant = request.membership.tenant  # type: ignore[attr-defined]
    return (
        PendingRequest.objects.select_related("agent", "session")
        .filter(tenant=tenant, status=RequestStatus.PENDING, answer__isnull=True)
        .order_by("opened_at", "id")
    )


@role_required("reader")
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    requests = _open_requests(request)
    for name in ("agent", "kind", "tool"):
        value = request.GET.get(name)
        if value:
            requests = requests.filter(**{{"agent": "agent__name", "kind": "kind", "tool": "tool_name"}[name]: value})
    template = "approvals/inbox.html#requests" if request.htmx else "approvals/inbox.html"  # type: ignore[attr-defined]
    return render(request, template, {"requests": list(requests[:500])})


def _form_response(pending: PendingRequest, post: Any) -> Response:
    """The answer a posted inbox form gives; ValueError for input that is not valid JSON."""
    data: dict[str, Any] = {"requestId": str(pending.id)}
    if pending.kind == RequestKind.APPROVAL:
        data["approved"] = post.get("decision") == "approve"
        data["reason"] = post.get("reason") or None
        data["remember"] = bool(post.get("remember"))
        data["rememberArgumentsOnly"] = bool(post.get("remember_arguments_only"))
        if post.get("override_arguments", "").strip():
            data["overrideArguments"] = json.loads(post["override_arguments"])
    elif pending.kind == RequestKind.CLIENT_TOOL:
        if post.get("error_message", "").strip():
            data["errorMessage"] = post["error_message"].strip()
        else:
            raw = post.get("result", "")
            try:
                data["result"] = json.loads(raw)
            except json.JSONDecodeError:
                data["result"] = raw
    else:
        data["action"] = post.get("action") or "accept"
        if data["action"] == "accept":
            data["content"] = json.loads(post.get("content") or "{}")
    return Response.model_validate(data)


@role_required("operator")
@require_POST
def answer(request: HttpRequest, request_id: uuid.UUID) -> HttpResponse:
    membership = membership_of(request)
    assert membership is not None
    pending = (
        PendingRequest.objects.select_related("run", "agent").filter(tenant=membership.tenant, id=request_id).first()
    )
    if pending is None:
        raise Http404("No such request.")
    error = None
    try:
        outcome = respond(membership, request.user, pending.run, _form_response(pending, request.POST), via="inbox")
        if outcome.status != "accepted":
            error = outcome.message
    except (ValueError, ValidationError) as problem:
        error = f"Not valid: {problem}"
    except ResponseRefused as refused:
        error = refused.detail
    if not request.htmx:  # type: ignore[attr-defined]
        if error:
            messages.error(request, error)
        return redirect("inbox")
    if error is None:
        return HttpResponse("")
    pending.refresh_from_db()
    html = render_request(pending, can_answer=True)
    return HttpResponse(
        html.replace('<pre class="args">', f'<p class="field-error">{_escape(error)}</p><pre class="args">', 1)
    )


def _escape(text: str) -> str:
    from django.utils.html import escape

    return str(escape(text))
