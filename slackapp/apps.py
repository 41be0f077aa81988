from django.apps import AppConfig


class SlackAppConfig(AppConfig):
    name = "slackapp"
    label = "slackapp"
    verbose_name = "Slack"

    def ready(self) -> None:
        from slackapp import signals  # noqa: F401  (connects its receivers, as Django's apps do)
