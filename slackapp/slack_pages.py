"""The console's Slack sections (SPEC section 17): on the Tenant page, admins map agents and approver groups to
channels; on the Notifications page, a member gets a one-time code to link their Slack user, or unlinks it. The
sections are this app's template tags (`slack_settings`); their forms post here and come back to the page."""

from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agents.models import Agent
from approvals.models import ApproverGroup
from console.models import Tenant
from console.tenancy import ConsoleRequest, role_required
from console.views.tenant_pages import render_tenant_page
from slackapp.channels import ChannelRefused, map_channel, slack_connections
from slackapp.linking import CODE_LIFETIME, new_code
from slackapp.models import SlackChannel, SlackLink


class ChannelForm(forms.Form):
    connection = forms.ChoiceField(label="Slack app", help_text="The installation's Slack app connections.")
    channel = forms.CharField(
        max_length=81, label="Channel", help_text="Its id (C0123ABCD, from the channel's details) or its name."
    )
    target = forms.ChoiceField(label="Requests of", help_text="A group's channel wins over its agent's.")

    def __init__(self, tenant: Tenant, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        connection = self.fields["connection"]
        target = self.fields["target"]
        assert isinstance(connection, forms.ChoiceField) and isinstance(target, forms.ChoiceField)
        connection.choices = [(c.name, c.name) for c in slack_connections(tenant)]
        agents = Agent.objects.filter(tenant=tenant, deleted_at__isnull=True).order_by("name")
        groups = ApproverGroup.objects.filter(tenant=tenant).order_by("name")
        target.choices = [
            ("Agents", [(f"agent:{name}", name) for name in agents.values_list("name", flat=True)]),
            ("Approver groups", [(f"group:{name}", name) for name in groups.values_list("name", flat=True)]),
        ]

    def save(self) -> str:
        """Map the channel; what to tell the admin (raises ChannelRefused)."""
        kind, _, name = self.cleaned_data["target"].partition(":")
        mapping = map_channel(
            self.tenant,
            self.cleaned_data["connection"],
            self.cleaned_data["channel"],
            agent=name if kind == "agent" else None,
            group=name if kind == "group" else None,
        )
        return f"The requests of {mapping.target} go to {mapping.channel}."


@role_required("admin")
@require_POST
def add_channel(request: ConsoleRequest) -> HttpResponse:
    form = ChannelForm(request.tenant, request.POST)
    if form.is_valid():
        try:
            messages.success(request, form.save())
            return redirect("tenant")
        except ChannelRefused as refused:
            form.add_error("channel" if refused.code in ("invalid_channel", "channel_exists") else None, refused.detail)
    return render_tenant_page(request, slack_form=form)


@role_required("admin")
@require_POST
def remove_channel(request: ConsoleRequest, channel_id: int) -> HttpResponse:
    mapping = SlackChannel.objects.select_related("agent", "group").filter(pk=channel_id, tenant=request.tenant).first()
    if mapping is None:
        raise Http404("No such Slack channel in this tenant.")
    mapping.delete()
    messages.success(request, f"The requests of {mapping.target} no longer go to {mapping.channel}.")
    return redirect("tenant")


@role_required("reader")
@require_POST
def link_code(request: ConsoleRequest) -> HttpResponse:
    """A one-time code to send the bot: `/airlock link CODE` (any earlier code stops working)."""
    code = new_code(request.membership)
    minutes = int(CODE_LIFETIME.total_seconds() // 60)
    messages.success(request, f"Send the Airlock app in Slack: /airlock link {code} (within {minutes} minutes).")
    return redirect("notifications")


@role_required("reader")
@require_POST
def unlink(request: ConsoleRequest) -> HttpResponse:
    SlackLink.objects.filter(membership=request.membership).delete()
    messages.success(request, "Your Slack user is unlinked: clicks in Slack answer nothing for you now.")
    return redirect("notifications")
