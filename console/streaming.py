"""Downloads streamed as they are made (the audit's and the receipts' exports)."""

from collections.abc import AsyncIterator, Iterator
from itertools import islice

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone


def download(
    request: HttpRequest, rows: Iterator[str], content_type: str, name: str, suffix: str
) -> StreamingHttpResponse:
    """`rows` as an attachment named `<name>-<time>.<suffix>`. Under ASGI a synchronous iterator would be read
    whole before sending; an asynchronous one streams."""
    content = _async(rows) if isinstance(request, ASGIRequest) else rows
    response = StreamingHttpResponse(content, content_type=content_type)
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.{suffix}"'
    return response


async def _async(rows: Iterator[str]) -> AsyncIterator[str]:
    """`rows` read in a worker thread (the ORM is synchronous), a few hundred rows per hop."""

    def take() -> str:
        return "".join(islice(rows, 200))

    while chunk := await sync_to_async(take)():
        yield chunk
