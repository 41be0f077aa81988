"""The rules page's previews: the "New rule" form's Preview button (what the rule would have done to the agent's
last closed approvals, before it is saved) and the "Suggested rules" section with its Adopt buttons, loaded into
the page by htmx (approvals/previews.py does the counting; nothing here writes but Adopt)."""

import json
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from pydantic import ValidationError

from agents.models import Agent
from approvals.actions import remember_rule
from approvals.previews import PreviewRefused, checked_rule, preview_rule, suggestions
from approvals.remembered_rules import RuleIn, RuleRefused, default_expiry
from approvals.views.rule_pages import RuleForm
from console.tenancy import ConsoleRequest, role_required


@role_required("admin")
@require_POST
def rule_preview(request: ConsoleRequest) -> HttpResponse:
    """The "New rule" form previewed: its fields as saving reads them, the preview or why there is none."""
    form = RuleForm(request.POST, Agent.objects.live().names_in(request.tenant))
    context: dict[str, Any] = {"problems": []}
    if not form.is_valid() or form.wanted is None:
        context["problems"] = [error for errors in form.errors.values() for error in errors]
        context["problems"] += [error for row in form.rows for error in row.errors.values()]
    else:
        try:
            agent = checked_rule(request.tenant, form.wanted)
        except (RuleRefused, PreviewRefused) as refused:
            context["problems"] = [refused.detail]
        else:
            preview = preview_rule(agent, form.wanted)
            context |= {"preview": preview, "said": preview.said("approved")}
    return render(request, "approvals/_preview.html", context)


@role_required("admin")
@require_GET
def rule_suggestions(request: ConsoleRequest) -> HttpResponse:
    """The "Suggested rules" section: rules people keep approving by hand, each with its preview."""
    context = {"suggestions": suggestions(request.tenant), "expires_at": default_expiry()}
    return render(request, "approvals/_rule_suggestions.html", context)


@role_required("admin")
@require_POST
def rule_suggestion_adopt(request: ConsoleRequest) -> HttpResponse:
    """Adopt a suggestion: the rule for exactly those arguments, made as the "New rule" form makes one."""
    try:
        arguments = json.loads(request.POST.get("arguments", ""))
        agent, tool_name = request.POST.get("agent", ""), request.POST.get("tool_name", "")
        # An adopted suggestion is remembered "always", as an approval remembers it: until RULE_DEFAULT_EXPIRY.
        wanted = RuleIn(agent=agent, tool_name=tool_name, arguments=arguments, expires_at=default_expiry())
    except (json.JSONDecodeError, ValidationError):
        messages.error(request, "That suggestion could not be read; nothing was saved.")
        return redirect("rules")
    try:
        rule = remember_rule(request.membership, request.user, wanted)
    except RuleRefused as refused:
        if refused.status == 404:
            raise Http404(refused.detail) from None
        messages.error(request, f"Nothing was saved: {refused.detail}")
    else:
        done = f"Adopted a rule: {rule.agent.name} may call {rule.tool_name} with these exact arguments without asking"
        messages.success(request, done + (f" until {rule.expires_at:%Y-%m-%d %H:%M} UTC." if rule.expires_at else "."))
    return redirect("rules")
