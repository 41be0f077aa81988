from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.models import ApiToken, Membership


class Command(BaseCommand):
    help = "Create an API token for USERNAME in a tenant; prints the token and nothing else."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", default="command line")

    def handle(self, *args: Any, username: str, tenant: str, name: str, **options: Any) -> None:
        membership = Membership.objects.filter(user__username=username, tenant__slug=tenant).first()
        if membership is None:
            raise CommandError(f"{username!r} is not a member of tenant {tenant!r}")
        _, raw = ApiToken.issue(membership, name)
        self.stdout.write(raw)
