from django.apps import AppConfig


class SlackAppConfig(AppConfig):
    name = "slackapp"
    label = "slackapp"
    verbose_name = "Slack"
