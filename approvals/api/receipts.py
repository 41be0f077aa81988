"""The receipts routes of the JSON API (SPEC section 13): the list with its filters and cursor, a request's receipt,
and the JSONL export that `manage.py verify_receipts --file` checks. Any member may read them."""

import base64
import binascii
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from ninja import Field, Query, Router, Schema

from approvals.models import PendingRequest
from approvals.receipts import Receipt
from approvals.signing import CHUNK, export_lines
from console.api import ApiError
from console.tenancy import ConsoleRequest

router = Router(tags=["receipts"])

MAX_LIMIT = 500


class ReceiptFilters(Schema):
    agent: str | None = Field(default=None, max_length=63)
    tool: str | None = Field(default=None, max_length=200)
    result: str | None = Field(default=None, max_length=64)
    date_from: str | None = Field(default=None, alias="from", description="ISO date or datetime, inclusive")
    date_to: str | None = Field(default=None, alias="to", description="ISO date (the whole day) or datetime")


class ReceiptPaging(ReceiptFilters):
    cursor: str | None = Field(default=None, max_length=40, description="`nextCursor` of the page before")
    limit: int = Field(default=50, ge=1, le=MAX_LIMIT)


class ReceiptPage(Schema):
    items: list[dict[str, Any]]
    nextCursor: str | None


def _moment(field: str, value: str, end_of_day: bool) -> datetime:
    """A `from`/`to` bound: a datetime as given (UTC when naive), or a date's start (`to`: its end)."""
    try:
        moment = parse_datetime(value)
        day = None if moment is not None else parse_date(value)
    except ValueError:
        moment = day = None
    if day is not None:
        moment = datetime.combine(day + timedelta(days=1) if end_of_day else day, time())
    if moment is None:
        detail = f"`{field}` is an ISO date (2026-12-03) or datetime (2026-12-03T10:00:00Z), not {value!r}."
        raise ApiError(400, "invalid_filter", detail, errors=[{"field": field, "message": detail}])
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


def filtered(tenant: Any, filters: ReceiptFilters) -> QuerySet[Receipt]:
    """The tenant's receipts the filters pick (the page's and the API's)."""
    receipts = Receipt.objects.filter(tenant=tenant)
    if filters.agent:
        receipts = receipts.filter(agent=filters.agent)
    if filters.tool:
        receipts = receipts.filter(tool_name=filters.tool)
    if filters.result:
        receipts = receipts.filter(result=filters.result)
    if filters.date_from:
        receipts = receipts.filter(at__gte=_moment("from", filters.date_from, end_of_day=False))
    if filters.date_to:
        end = _moment("to", filters.date_to, end_of_day=True)
        receipts = receipts.filter(at__lt=end) if "T" not in filters.date_to else receipts.filter(at__lte=end)
    return receipts


def cursor_for(sequence: int) -> str:
    return base64.urlsafe_b64encode(f"r{sequence}".encode()).decode().rstrip("=")


def before_cursor(cursor: str) -> int:
    """The position a cursor continues before; a cursor this API did not make is a 400."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not text.startswith("r") or not text[1:].isdigit():
            raise ValueError(text)
        return int(text[1:])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        detail = "The cursor is not one this API gave (`nextCursor`)."
        raise ApiError(400, "invalid_cursor", detail, errors=[{"field": "cursor", "message": detail}]) from None


def receipts_page(tenant: Any, filters: ReceiptPaging) -> tuple[list[Receipt], str | None]:
    """One page, newest first, and the cursor of the next."""
    receipts = filtered(tenant, filters).order_by("-sequence")
    if filters.cursor:
        receipts = receipts.filter(sequence__lt=before_cursor(filters.cursor))
    rows = list(receipts[: filters.limit + 1])
    more = len(rows) > filters.limit
    rows = rows[: filters.limit]
    return rows, cursor_for(rows[-1].sequence) if more and rows else None


@router.get("/receipts", response=ReceiptPage)
def list_receipts(request: ConsoleRequest, filters: Query[ReceiptPaging]) -> dict[str, Any]:
    """The tenant's receipts, newest first; `nextCursor` continues the list."""
    rows, next_cursor = receipts_page(request.tenant, filters)
    return {"items": [receipt.wire() for receipt in rows], "nextCursor": next_cursor}


def export_response(tenant: Any, filters: ReceiptFilters) -> StreamingHttpResponse:
    """The receipts the filters pick as JSON Lines, oldest first, streamed in chunks: the header, the signed
    heads, one receipt a line. Unfiltered, it is the whole chain, as `verify_receipts --file` checks it."""
    receipts = filtered(tenant, filters).order_by("sequence")
    lines: Iterator[str] = export_lines(tenant, receipts.iterator(chunk_size=CHUNK))
    response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="receipts-{tenant.slug}-{stamp}.jsonl"'
    return response


@router.get(
    "/receipts/export",
    response={200: None},
    openapi_extra={"responses": {"200": {"description": "JSON Lines", "content": {"application/x-ndjson": {}}}}},
)
def export_receipts(request: ConsoleRequest, filters: Query[ReceiptFilters]) -> StreamingHttpResponse:
    """The receipts as JSON Lines (a header, the signed chain heads, then one receipt a line, oldest first)."""
    return export_response(request.tenant, filters)


@router.get("/requests/{request_id}/receipt", response=dict)
def get_request_receipt(request: ConsoleRequest, request_id: uuid.UUID) -> dict[str, Any]:
    """The receipt of a closed request (or of a call a rule or policy decided without one)."""
    receipt = Receipt.objects.filter(tenant=request.tenant, request_id=request_id).first()
    if receipt is not None:
        return receipt.wire()
    if PendingRequest.objects.filter(tenant=request.tenant, id=request_id).exists():
        raise ApiError(404, "receipt_not_found", "The request is still open: it has no receipt yet.")
    raise ApiError(404, "request_not_found", f"No request {request_id} in this tenant.")
