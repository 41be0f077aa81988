from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from console.models import Membership, Role, Tenant


class Command(BaseCommand):
    help = "Create a user with a role in a tenant; adds (or changes) the membership when the user exists."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--role", required=True, choices=[r.value for r in Role])
        parser.add_argument("--password", default=None)

    @transaction.atomic
    def handle(self, *args: Any, username: str, tenant: str, role: str, password: str | None, **options: Any) -> None:
        target = Tenant.objects.filter(slug=tenant).first()
        if target is None:
            raise CommandError(f"no tenant {tenant!r}; create it with create_tenant first")
        user, created = get_user_model().objects.get_or_create(username=username)
        if password:
            user.set_password(password)
            user.save()
        elif created:
            user.set_unusable_password()
            user.save()
        Membership.objects.update_or_create(user=user, tenant=target, defaults={"role": role})
        self.stdout.write(f"{'created' if created else 'updated'} user {username} as {role} in {tenant}")
