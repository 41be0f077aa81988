"""The receipts a list picks (SPEC section 13), alike for `GET /api/receipts`, its export and the receipts page:
the filters, the cursor, the JSONL download."""

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone

from approvals.receipts import Receipt
from approvals.signing import CHUNK, export_lines
from console.streaming import download


class BadFilter(Exception):
    """A filter or cursor the list cannot read; `field` is its name on the wire."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(detail)
        self.field, self.detail = field, detail


@dataclass(frozen=True)
class Picked:
    """What the list is narrowed to; empty means any. A date bound covers its whole day."""

    agent: str = ""
    tool: str = ""
    result: str = ""
    since: datetime | date | None = None
    until: datetime | date | None = None


def _start(bound: datetime | date, *, after: bool) -> datetime:
    if isinstance(bound, datetime):
        return bound if timezone.is_aware(bound) else timezone.make_aware(bound, UTC)
    day = bound + timedelta(days=1) if after else bound
    return timezone.make_aware(datetime.combine(day, time()), UTC)


def filtered(tenant: Any, picked: Picked) -> QuerySet[Receipt]:
    receipts = Receipt.objects.filter(tenant=tenant)
    if picked.agent:
        receipts = receipts.filter(agent=picked.agent)
    if picked.tool:
        receipts = receipts.filter(tool_name=picked.tool)
    if picked.result:
        receipts = receipts.filter(result=picked.result)
    if picked.since is not None:
        receipts = receipts.filter(at__gte=_start(picked.since, after=False))
    if isinstance(picked.until, datetime):
        receipts = receipts.filter(at__lte=_start(picked.until, after=True))
    elif picked.until is not None and picked.until < date.max:  # the calendar's last day has no day after it
        receipts = receipts.filter(at__lt=_start(picked.until, after=True))
    return receipts


def cursor_for(sequence: int) -> str:
    return base64.urlsafe_b64encode(f"r{sequence}".encode()).decode().rstrip("=")


def before_cursor(cursor: str) -> int:
    """The position a cursor continues before; BadFilter for one no list gave."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not text.startswith("r") or not text[1:].isdigit():
            raise ValueError(text)
        return int(text[1:])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadFilter("cursor", "The cursor is not one this list gave (`nextCursor`).") from None


def page(tenant: Any, picked: Picked, cursor: str | None, limit: int) -> tuple[list[Receipt], str | None]:
    """One page, newest first, and the cursor of the next (None on the last)."""
    receipts = filtered(tenant, picked).order_by("-sequence")
    if cursor:
        receipts = receipts.filter(sequence__lt=before_cursor(cursor))
    rows = list(receipts[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, cursor_for(rows[-1].sequence) if more and rows else None


def export(request: HttpRequest, tenant: Any, picked: Picked) -> StreamingHttpResponse:
    """The picked receipts as JSON Lines, oldest first, streamed: the header, the signed heads, one receipt a line.
    Unpicked, it is the whole chain, as `verify_receipts --file` checks it."""
    receipts = filtered(tenant, picked).order_by("sequence").iterator(chunk_size=CHUNK)
    return download(request, export_lines(tenant, receipts), "application/x-ndjson", f"receipts-{tenant.slug}", "jsonl")
