from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from console.models import MetricsToken


class Command(BaseCommand):
    help = (
        "Create a bearer token for GET /metrics (the installation's, not a tenant's); prints the token and nothing"
        " else. --replace revokes the earlier ones."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="command line", help="What the token is for (a Prometheus server).")
        parser.add_argument("--replace", action="store_true", help="Revoke every earlier metrics token.")

    def handle(self, *args: Any, name: str, replace: bool, **options: Any) -> None:
        with transaction.atomic():
            if replace:
                MetricsToken.objects.all().delete()
            _, raw = MetricsToken.issue(name[:100])
        self.stdout.write(raw)
