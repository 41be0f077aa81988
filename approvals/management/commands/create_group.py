import re
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from agents.definitions import SLUG
from approvals.models import ApproverGroup
from console.models import Membership, Tenant


class Command(BaseCommand):
    help = (
        "Create a group of a tenant's members that requests can be routed to (a definition's"
        ' "approvers": NAME); adds the --member users when the group exists.'
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--member", action="append", default=[], metavar="USERNAME")

    @transaction.atomic
    def handle(self, *args: Any, name: str, tenant: str, member: list[str], **options: Any) -> None:
        target = Tenant.objects.filter(slug=tenant).first()
        if target is None:
            raise CommandError(f"no tenant {tenant!r}; create it with create_tenant first")
        if not re.fullmatch(SLUG, name):
            raise CommandError(f"{name!r} is not a group name: up to 63 lowercase letters, digits, - and _")
        users = {user.username: user for user in get_user_model().objects.filter(username__in=member)}
        memberships = Membership.objects.filter(tenant=target, user__in=users.values())
        members = set(memberships.values_list("user_id", flat=True))
        strangers = [username for username in member if username not in users or users[username].pk not in members]
        if strangers:
            raise CommandError(f"not members of {tenant}: {', '.join(strangers)} (add them with create_user)")
        group, created = ApproverGroup.objects.get_or_create(tenant=target, name=name)
        group.members.add(*users.values())
        listed = ", ".join(sorted(group.members.values_list("username", flat=True))) or "no members"
        self.stdout.write(f"{'created' if created else 'updated'} group {name} in {tenant}: {listed}")
