from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        from approvals import signals  # noqa: F401 - connects the receivers
