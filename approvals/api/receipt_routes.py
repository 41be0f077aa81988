"""The receipts routes of the JSON API (SPEC section 13): the list with its filters and cursor, a request's receipt,
and the JSONL export that `manage.py verify_receipts --file` checks. Any member may read them."""

import uuid
from datetime import date, datetime
from typing import Any

from django.http import StreamingHttpResponse
from django.utils.dateparse import parse_date, parse_datetime
from ninja import Field, Query, Router, Schema

from approvals import receipt_lists
from approvals.external_wire import request_ids
from approvals.models import PendingRequest
from approvals.receipts import Receipt
from console.api import ApiError
from console.moments import storable
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


def _moment(field: str, value: str | None) -> datetime | date | None:
    """A `from`/`to` bound: an ISO datetime, or a date (its whole day)."""
    if value is None:
        return None
    try:
        found: datetime | date | None = parse_datetime(value) or parse_date(value)
        if isinstance(found, datetime):
            storable(found)
    except ValueError:
        found = None
    if found is None:
        detail = (
            f"`{field}` is an ISO date (2026-12-03) or datetime (2026-12-03T10:00:00Z) within the years 1 to 9999,"
            f" not {value!r}."
        )
        raise ApiError(400, "invalid_filter", detail, errors=[{"field": field, "message": detail}])
    return found


def _picked(filters: ReceiptFilters) -> receipt_lists.Picked:
    since, until = _moment("from", filters.date_from), _moment("to", filters.date_to)
    return receipt_lists.Picked(filters.agent or "", filters.tool or "", filters.result or "", since, until)


@router.get("/receipts", response=ReceiptPage)
def list_receipts(request: ConsoleRequest, filters: Query[ReceiptPaging]) -> dict[str, Any]:
    """The tenant's receipts, newest first; `nextCursor` continues the list."""
    try:
        rows, next_cursor = receipt_lists.page(request.tenant, _picked(filters), filters.cursor, filters.limit)
    except receipt_lists.BadFilter as bad:
        raise ApiError(
            400, "invalid_cursor", bad.detail, errors=[{"field": bad.field, "message": bad.detail}]
        ) from None
    return {"items": [receipt.wire() for receipt in rows], "nextCursor": next_cursor}


@router.get(
    "/receipts/export",
    response={200: None},
    openapi_extra={"responses": {"200": {"description": "JSON Lines", "content": {"application/x-ndjson": {}}}}},
)
def export_receipts(request: ConsoleRequest, filters: Query[ReceiptFilters]) -> StreamingHttpResponse:
    """The receipts as JSON Lines (a header, the signed chain heads, then one receipt a line, oldest first)."""
    return receipt_lists.export(request, request.tenant, _picked(filters))


@router.get("/requests/{request_id}/receipt", response=dict)
def get_request_receipt(request: ConsoleRequest, request_id: uuid.UUID) -> dict[str, Any]:
    """The receipt of a closed request (or of a call a rule or policy decided without one)."""
    ids = request_ids(request.tenant.pk, request_id)  # its id, or the requestId its external agent sent
    receipt = Receipt.objects.filter(tenant=request.tenant, request_id__in=ids).first()
    if receipt is not None:
        return receipt.wire()
    if PendingRequest.objects.filter(tenant=request.tenant, id__in=ids).exists():
        raise ApiError(404, "receipt_not_found", "The request is still open: it has no receipt yet.")
    raise ApiError(404, "request_not_found", f"No request {request_id} in this tenant.")
