"""A tenant's Slack channels (SPEC section 17): mapping an agent or an approver group to a channel of a Slack app
connection granted to the tenant, and which channels a request goes to (for a routed request, its groups' channels
win over its agent's)."""

import re
from collections.abc import Iterable

from django.db import IntegrityError, transaction

from agents.models import Agent
from approvals.models import ApproverGroup, PendingRequest
from console.models import Connection, ConnectionKind, Tenant
from console.problems import Refused
from slackapp.models import SlackChannel

# A channel's id (C0123ABCD) or its name without the '#' (approvals-prod).
CHANNEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")


class ChannelRefused(Refused):
    """A channel mapping refused: 400 (unknown connection, agent or group, a bad channel), 409 (mapped already)."""


def slack_connections(tenant: Tenant) -> list[Connection]:
    """The Slack app connections granted to the tenant."""
    return list(Connection.objects.granted_to(tenant).filter(kind=ConnectionKind.SLACK).order_by("name"))


def map_channel(tenant: Tenant, connection: str, channel: str, *, agent: str | None, group: str | None) -> SlackChannel:
    """Post the requests of `agent`, or those routed to `group`, to `channel` of the Slack app `connection`."""
    channel = channel.strip().removeprefix("#")
    if not CHANNEL.fullmatch(channel):
        raise ChannelRefused("invalid_channel", "Give a channel's id (C0123ABCD) or its name: letters, digits, - _ .")
    if (agent is None) == (group is None):
        raise ChannelRefused("invalid_channel", "Map the channel to an agent or to an approver group: one of them.")
    found = next((c for c in slack_connections(tenant) if c.name == connection), None)
    if found is None:
        # The same answer for a connection that does not exist and one not granted (SPEC section 2).
        raise ChannelRefused("unknown_connection", f"No Slack app connection {connection!r} is granted to this tenant.")
    mapping = SlackChannel(tenant=tenant, connection=found, channel=channel)
    if agent is not None:
        mapping.agent = Agent.objects.filter(tenant=tenant, name=agent, deleted_at__isnull=True).first()
        if mapping.agent is None:
            raise ChannelRefused("unknown_agent", f"This tenant has no agent {agent!r}.")
    else:
        mapping.group = ApproverGroup.objects.filter(tenant=tenant, name=group).first()
        if mapping.group is None:
            raise ChannelRefused("unknown_group", f"This tenant has no approver group {group!r}.")
    try:
        with transaction.atomic():
            mapping.save()
    except IntegrityError:
        raise ChannelRefused(
            "channel_exists", f"{channel} gets the requests of {mapping.target} already.", 409
        ) from None
    return mapping


def tenant_channels(tenant: Tenant) -> list[SlackChannel]:
    return list(SlackChannel.objects.filter(tenant=tenant).select_related("connection", "agent", "group"))


def channels_for(request: PendingRequest, mappings: Iterable[SlackChannel]) -> list[SlackChannel]:
    """The channels `request` is posted to, of its tenant's `mappings` made before it opened: its groups' when it
    is routed and one of them has a channel, else its agent's."""
    before = [m for m in mappings if m.created_at <= request.opened_at]
    groups = set(request.groups)
    routed = [m for m in before if m.group is not None and m.group.name in groups]
    return routed or [m for m in before if m.agent_id is not None and m.agent_id == request.agent_id]
