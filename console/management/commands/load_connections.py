import json
import sys
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from console.connections import OIDC_SETTINGS, OIDC_WIRE_FIELDS, OTLP_WIRE_FIELDS, SLACK_WIRE_FIELDS
from console.models import Connection, ConnectionKind, Tenant

# Wire name in the file -> model field.
FIELDS = {
    "kind": "kind",
    "description": "description",
    "baseUrl": "base_url",
    "apiKeyEnv": "api_key_env",
    "command": "command",
    "args": "args",
    "env": "env",
    "url": "url",
    "secretEnv": "secret_env",
    "address": "address",
    "tls": "tls",
}
# A kind's own words for the settings it keeps in the connection's fields.
WIRE_FIELDS_BY_KIND: dict[str, dict[str, str]] = {
    ConnectionKind.SLACK: SLACK_WIRE_FIELDS,
    ConnectionKind.OTLP: OTLP_WIRE_FIELDS,
    ConnectionKind.OIDC: OIDC_WIRE_FIELDS,
}


class Command(BaseCommand):
    help = (
        'Create or update connections from a JSON file ({"connections": [...]}, SPEC section 2): upsert by '
        "name, nothing else touched. All of the file or nothing is loaded."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file", help="the JSON file, or - for standard input")

    def handle(self, *args: Any, **options: Any) -> None:
        entries = self._entries(options["file"])
        with transaction.atomic():
            for index, entry in enumerate(entries):
                self._load(index, entry)
        self.stdout.write(f"Loaded {len(entries)} connection(s).")

    def _entries(self, path: str) -> list[dict[str, Any]]:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
            data = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CommandError(f"Cannot read {path}: {error}") from None
        entries = data.get("connections") if isinstance(data, dict) else None
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise CommandError('The file must be {"connections": [{...}, ...]}.')
        return entries

    def _load(self, index: int, entry: dict[str, Any]) -> None:
        where = f"connections[{index}]"
        words = WIRE_FIELDS_BY_KIND.get(str(entry.get("kind")))
        if words:
            # The kind's words for its settings (Slack's, SPEC section 17; OTLP's), kept in the connection's fields.
            named = {attribute: key for key, attribute in FIELDS.items()}
            entry = {named[words[key]] if key in words else key: v for key, v in entry.items()}
        oidc: dict[str, Any] = {}
        if entry.get("kind") == ConnectionKind.OIDC:
            # Its client and claim mapping (SPEC section 19); its `tenants` map claims, they grant nothing.
            oidc = {key: entry[key] for key in OIDC_SETTINGS if key in entry}
            entry = {key: value for key, value in entry.items() if key not in OIDC_SETTINGS}
        if not isinstance(entry.get("tls", False), bool):
            raise CommandError(f"{where}: tls is true or false.")
        name = entry.get("name")
        unknown = set(entry) - set(FIELDS) - {"name", "tenants"}
        if unknown:
            raise CommandError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}.")
        if not isinstance(name, str):
            raise CommandError(f"{where}: give the connection's name.")
        connection = Connection.objects.filter(name=name).first() or Connection(name=name)
        for wire, attribute in FIELDS.items():
            default: Any = [] if attribute in ("args", "env") else False if attribute == "tls" else ""
            setattr(connection, attribute, entry.get(wire, default) if entry.get(wire) is not None else default)
        connection.oidc = oidc
        tenants = entry.get("tenants", [])
        connection.all_tenants = tenants == "*"
        granted = self._tenants(where, tenants)
        try:
            connection.full_clean()
        except ValidationError as error:
            problems = "; ".join(f"{field}: {' '.join(messages)}" for field, messages in error.message_dict.items())
            raise CommandError(f"{where} ({name}): {problems}") from None
        connection.save()
        connection.tenants.set(granted)

    def _tenants(self, where: str, tenants: Any) -> list[Tenant]:
        if tenants == "*":
            return []
        if not isinstance(tenants, list) or not all(isinstance(slug, str) for slug in tenants):
            raise CommandError(f'{where}: "tenants" is "*" or a list of tenant slugs.')
        found = list(Tenant.objects.filter(slug__in=tenants))
        missing = set(tenants) - {tenant.slug for tenant in found}
        if missing:
            raise CommandError(f"{where}: no tenant {', '.join(sorted(missing))}.")
        return found
