"""`/api/slack/...` (SPEC section 17): a tenant's channel mappings (`POST`, `GET /api/slack/channels`, `DELETE
/api/slack/channels/{id}`) and an admin linking a member's Slack user (`PUT /api/slack/links/{username}`)."""

from datetime import datetime
from typing import Any

from ninja import Field, Path, Router, Schema, Status

from console.api import ApiError, Problem, require_role
from console.models import Membership
from console.tenancy import ConsoleRequest, NotFound
from slackapp.channels import ChannelRefused, map_channel, tenant_channels
from slackapp.linking import link
from slackapp.models import SlackChannel

router = Router(tags=["slack"])

SLACK_ID = r"^[A-Z0-9]{1,32}$"


class ChannelIn(Schema):
    connection: str = Field(min_length=1, max_length=63, description="A Slack app connection granted to the tenant.")
    channel: str = Field(min_length=1, max_length=81, description="The channel's id (C0123ABCD) or name.")
    agent: str | None = Field(default=None, max_length=63, description="The agent whose requests go there; or:")
    group: str | None = Field(default=None, max_length=63, description="The approver group whose requests go there.")


class ChannelOut(Schema):
    id: int
    connection: str
    channel: str
    agent: str | None
    group: str | None
    created_at: datetime = Field(alias="createdAt")


class LinkIn(Schema):
    slack_user_id: str = Field(alias="slackUserId", pattern=SLACK_ID)
    slack_team_id: str = Field(alias="slackTeamId", pattern=SLACK_ID)


class LinkOut(Schema):
    username: str
    slack_user_id: str = Field(alias="slackUserId")
    slack_team_id: str = Field(alias="slackTeamId")
    linked_at: datetime = Field(alias="linkedAt")


def get_channel_for(request: ConsoleRequest, channel_id: int) -> SlackChannel:
    """A channel mapping of the tenant; any other is a 404."""
    found = SlackChannel.objects.filter(pk=channel_id, tenant=request.tenant).first()
    if found is None:
        raise NotFound("channel_not_found", f"No Slack channel mapping {channel_id} in this tenant.")
    return found


@router.get("/slack/channels", response=list[ChannelOut], by_alias=True)
def list_channels(request: ConsoleRequest) -> list[dict[str, Any]]:
    """The tenant's Slack channels: where the requests of an agent, or those routed to a group, are posted."""
    return [mapping.wire() for mapping in tenant_channels(request.tenant)]


@router.post("/slack/channels", response={201: ChannelOut, 409: Problem}, by_alias=True)
def create_channel(request: ConsoleRequest, payload: ChannelIn) -> Status[dict[str, Any]]:
    """Post the requests of `agent`, or those routed to `group` (one of them), to `channel` of the Slack app
    `connection` (admins). 400 `unknown_connection`, `unknown_agent`, `unknown_group`, `invalid_channel`; 409
    `channel_exists`."""
    require_role(request, "admin")
    try:
        mapping = map_channel(
            request.tenant, payload.connection, payload.channel, agent=payload.agent, group=payload.group
        )
    except ChannelRefused as refused:
        raise ApiError.of(refused) from None
    return Status(201, mapping.wire())


@router.delete("/slack/channels/{channel_id}", response={204: None})
def delete_channel(request: ConsoleRequest, channel_id: int = Path(..., ge=1, le=2**63 - 1)) -> Status[None]:
    """Stop posting to the channel (admins); its messages already posted are still updated when they end."""
    require_role(request, "admin")
    get_channel_for(request, channel_id).delete()
    return Status(204, None)


@router.put("/slack/links/{username}", response={200: LinkOut, 404: Problem}, by_alias=True)
def put_link(request: ConsoleRequest, username: str, payload: LinkIn) -> dict[str, Any]:
    """Link a member's Slack user (admins): their clicks in Slack are their answers. 404 `member_not_found`."""
    require_role(request, "admin")
    member = Membership.objects.select_related("user").filter(tenant=request.tenant, user__username=username).first()
    if member is None:
        raise NotFound("member_not_found", f"No member {username!r} in this tenant.")
    linked = link(member, payload.slack_team_id, payload.slack_user_id)
    return {
        "username": member.user.username,
        "slackUserId": linked.user_id,
        "slackTeamId": linked.team_id,
        "linkedAt": linked.linked_at,
    }
