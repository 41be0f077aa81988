"""The Slack sections of the console's pages: `{% slack_channels %}` on the Tenant page (admins) and
`{% slack_link %}` on the Notifications page; their forms post to `slackapp.slack_pages`."""

from typing import Any

from django import template

from slackapp.channels import slack_connections, tenant_channels
from slackapp.models import SlackLink
from slackapp.slack_pages import ChannelForm

register = template.Library()


@register.inclusion_tag("slackapp/channels.html", takes_context=True)
def slack_channels(context: template.Context) -> dict[str, Any]:
    tenant = context["request"].tenant
    return {
        "channels": tenant_channels(tenant),
        "connections": slack_connections(tenant),
        "form": context.get("slack_form") or ChannelForm(tenant),
        "csrf_token": context.get("csrf_token"),
    }


@register.inclusion_tag("slackapp/link.html", takes_context=True)
def slack_link(context: template.Context) -> dict[str, Any]:
    membership = context["request"].membership
    return {
        "link": SlackLink.objects.filter(membership=membership).first(),
        "csrf_token": context.get("csrf_token"),
    }
