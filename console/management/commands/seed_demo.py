import os
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from agents.definitions import DefinitionContent
from agents.models import Agent
from console.models import Membership, Role, Tenant

DEMO_USERS = {"admin": Role.ADMIN, "operator": Role.OPERATOR, "viewer": Role.READER}


def demo_agent() -> DefinitionContent:
    return DefinitionContent.model_validate(
        {
            "name": "assistant",
            "displayName": "Assistant",
            "description": "The demo agent: tells the time, sends mail (with approval), asks the browser "
            "for the user's location, and books meetings through a bundled MCP server.",
            "instructions": "You are a helpful assistant for the {{team}} team. Answer briefly.",
            "instructionsByCulture": {"tr": "{{team}} ekibi için yardımcı bir asistansın. Kısa yanıt ver."},
            "tools": [{"name": "get_time", "approval": "never"}, {"name": "send_email", "approval": "always"}],
            "clientTools": [
                {
                    "name": "get_user_location",
                    "description": "Ask the user's browser where the user is.",
                    "parameters": {
                        "type": "object",
                        "properties": {"precision": {"type": "string", "enum": ["city", "exact"]}},
                    },
                }
            ],
            "mcpServers": [{"connection": "meetings", "approval": "never"}],
            "parameters": [
                {
                    "name": "team",
                    "kind": "text",
                    "required": False,
                    "default": "support",
                    "description": "The team the assistant works for.",
                }
            ],
        }
    )


class Command(BaseCommand):
    help = "Create the demo tenant, users and agent (safe to run again)."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        chosen = os.environ.get("DEMO_PASSWORD") or None
        tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
        User = get_user_model()
        existing = set(User.objects.filter(username__in=DEMO_USERS).values_list("username", flat=True))
        # An existing user's password changes only when DEMO_PASSWORD says so: a start without it
        # never resets what a person chose or was told before.
        password = chosen or (self._generated() if len(existing) < len(DEMO_USERS) else None)
        for username, role in DEMO_USERS.items():
            user, _ = User.objects.get_or_create(username=username)
            if password is not None and (chosen or username not in existing) and not user.check_password(password):
                user.set_password(password)
                user.save(update_fields=["password"])
            Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
        admin = User.objects.get(username="admin")
        if not Agent.objects.live().filter(tenant=tenant, name="assistant").exists():
            Agent.create(tenant, demo_agent(), admin)
        self.stdout.write("Demo tenant 'demo' is ready. Log in as admin, operator or viewer")
        if password is None:
            kept = settings.DATA_DIR / "demo-password"
            if kept.exists() and admin.check_password(kept.read_text().strip()):
                password = kept.read_text().strip()
        if password is not None:
            self.stdout.write(f"with the password: {password}")
        else:
            self.stdout.write("with the passwords they had (set DEMO_PASSWORD to set them all again).")

    def _generated(self) -> str:
        """The password kept in the data folder, made on the first run without DEMO_PASSWORD."""
        stored = settings.DATA_DIR / "demo-password"
        if stored.exists():
            return stored.read_text().strip()
        stored.parent.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(12)
        stored.write_text(password + "\n")
        stored.chmod(0o600)
        return password
