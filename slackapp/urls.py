"""Slack's own addresses (`/slack/...`, what Slack calls) and the forms of its console sections."""

from django.urls import path

from slackapp import inbound, slack_pages

urlpatterns = [
    path("slack/interactions", inbound.interactions, name="slack_interactions"),
    path("slack/commands", inbound.commands, name="slack_commands"),
    path("tenant/slack/channels/", slack_pages.add_channel, name="slack_channel_add"),
    path("tenant/slack/channels/<int:channel_id>/delete/", slack_pages.remove_channel, name="slack_channel_delete"),
    path("notifications/slack/code/", slack_pages.link_code, name="slack_link_code"),
    path("notifications/slack/unlink/", slack_pages.unlink, name="slack_unlink"),
]
