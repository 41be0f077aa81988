"""Receipts for the decision log's tests, written by the chain's own writer (`approvals.receipts.record`)."""

import uuid
from typing import Any

from django.db.models import Max
from django.utils import timezone

from approvals.receipts import Receipt, digest, record
from console.models import Connection, Tenant


def write_receipts(tenant: Tenant, count: int) -> list[Receipt]:
    """`count` receipts of calls a rule approved, appended to the tenant's chain."""
    now = timezone.now()
    facts: list[dict[str, Any]] = [
        {
            "requestId": str(uuid.uuid4()),
            "runId": str(uuid.uuid4()),
            "sessionId": None,
            "agent": "assistant",
            "definitionVersion": 1,
            "kind": "approval",
            "toolName": "send_email",
            "argumentsDigest": digest({"to": f"person{index}@example.com"}),
            "originalArgumentsDigest": None,
            "result": "approved",
            "reason": None,
            "decisionSource": "rule",
            "answeredBy": "7@1",
            "authMethod": None,
            "at": now.isoformat(),
        }
        for index in range(count)
    ]
    return record(tenant.pk, facts)


def chain_of(tenant: Tenant) -> list[dict[str, Any]]:
    return [receipt.wire() for receipt in Receipt.objects.filter(tenant=tenant).order_by("sequence")]


def last_sequence(tenant: Tenant) -> int:
    return Receipt.objects.filter(tenant=tenant).aggregate(last=Max("sequence"))["last"] or 0


def sink(name: str, kind: str, tenants: list[Tenant] | None = None, **settings: Any) -> Connection:
    """A log sink connection granted to `tenants` (all when None), checked as the admin and load_connections do."""
    connection = Connection(name=name, kind=kind, all_tenants=tenants is None, **settings)
    connection.full_clean()
    connection.save()
    connection.tenants.set(tenants or [])
    return connection
