"""`manage.py verify_receipts [--tenant SLUG] [--file EXPORT.jsonl] [--public-key PEM] [--allow-unsigned]` (SPEC
section 13)."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from approvals.signing import (
    UnreadableExport,
    Verified,
    key_path,
    load_public_key,
    verify_file,
    verify_tenant,
)
from console.models import Tenant


class Command(BaseCommand):
    help = (
        "Recompute each tenant's chain of receipts (or an export's) and check its signed heads with the public key;"
        " name the first receipt that does not verify and exit 1. A chain whose end no signed head covers fails"
        " unless --allow-unsigned."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant's chain (its slug)")
        parser.add_argument("--file", type=Path, help="verify a JSONL export (GET /api/receipts/export) instead")
        parser.add_argument(
            "--public-key",
            type=Path,
            help="the installation's public key (PEM); by default the key file RECEIPT_SIGNING_KEY_FILE names",
        )
        parser.add_argument(
            "--allow-unsigned",
            action="store_true",
            help="accept receipts at a chain's end that no signed head covers yet (they are named, not proven)",
        )

    def handle(
        self,
        *args: Any,
        tenant: str | None,
        file: Path | None,
        public_key: Path | None,
        allow_unsigned: bool,
        **options: Any,
    ) -> None:
        source = public_key or key_path()
        try:
            key = load_public_key(source.read_bytes())
        except (OSError, ValueError) as error:
            raise CommandError(f"cannot read the public key from {source}: {error}") from None
        results: list[Verified] = []
        if file is not None:
            try:
                with file.open(encoding="utf-8") as export:
                    results.append(verify_file(export, key, allow_unsigned=allow_unsigned))
            except OSError as error:
                raise CommandError(f"cannot read {file}: {error}") from None
            except UnreadableExport as error:
                raise CommandError(f"{file}: {error}") from None
        else:
            tenants = Tenant.objects.order_by("slug")
            if tenant is not None:
                tenants = tenants.filter(slug=tenant)
                if not tenants.exists():
                    raise CommandError(f"no tenant {tenant!r}")
            results = [verify_tenant(each, key, allow_unsigned=allow_unsigned) for each in tenants]
        for result in results:
            (self.stderr if result.broken else self.stdout).write(str(result))
        if any(result.broken for result in results):
            raise SystemExit(1)
