from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug

from console.models import Tenant


class Command(BaseCommand):
    help = "Create a tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default=None)

    def handle(self, *args: Any, slug: str, name: str | None, **options: Any) -> None:
        try:
            validate_slug(slug)
        except ValidationError:
            raise CommandError(f"{slug!r} is not a slug (letters, digits, - and _)") from None
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"tenant {slug!r} exists already")
        Tenant.objects.create(slug=slug, name=name or slug)
        self.stdout.write(f"created tenant {slug}")
