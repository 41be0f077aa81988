from django.apps import AppConfig


class DecisionLogConfig(AppConfig):
    name = "decisionlog"
    label = "decisionlog"
    verbose_name = "Decision log"

    def ready(self) -> None:
        from decisionlog import signals  # noqa: F401  (connects its receivers, as Django's apps do)
