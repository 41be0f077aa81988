"""The attachments route of the JSON API: upload a file that runs reference by id."""

import hashlib
from typing import Any

from django.conf import settings
from ninja import Router, Status

from agents.models import Attachment
from console.api import ApiError, require_role
from console.tenancy import ConsoleRequest

router = Router(tags=["runs"])


# The view reads the upload itself (its size is checked before the body is read); the schema says what it takes.
ATTACHMENT_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {"file": {"type": "string", "format": "binary"}},
                "required": ["file"],
            }
        }
    },
}


@router.post("/attachments", response={201: dict}, openapi_extra={"requestBody": ATTACHMENT_BODY})
def upload_attachment(request: ConsoleRequest) -> Any:
    """Upload a file (multipart field `file`) to reference from runs by id."""
    membership = require_role(request, "operator")
    if request.content_type != "multipart/form-data":
        raise ApiError(415, "unsupported_media_type", "Send the file as multipart/form-data, in the field `file`.")
    limit = settings.ATTACHMENT_MAX_BYTES
    # Refuse an oversized body before reading it (the multipart envelope adds a little to the file).
    declared = request.headers.get("Content-Length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit + 64 * 1024:
        raise ApiError(413, "attachment_too_large", f"The file is larger than the limit of {limit} bytes.")
    upload = request.FILES.get("file")
    if upload is None:
        raise ApiError(400, "file_required", "Send the file as the multipart field `file`.")
    if "\x00" in f"{upload.name}{upload.content_type}":
        errors = [{"field": "file", "message": "its name or content type contains a NUL character"}]
        raise ApiError(400, "invalid_request", "The request has invalid fields.", errors=errors)
    most = Attachment._meta.get_field("content_type").max_length or 0
    if len(upload.content_type or "") > most:
        errors = [{"field": "file", "message": f"its content type is longer than {most} characters"}]
        raise ApiError(400, "invalid_request", "The request has invalid fields.", errors=errors)
    if upload.size is None or upload.size > limit:
        raise ApiError(413, "attachment_too_large", f"The file is larger than the limit of {limit} bytes.")
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    attachment = Attachment(
        tenant=membership.tenant,
        name=(upload.name or "file")[:255],
        content_type=upload.content_type or "application/octet-stream",
        size=upload.size,
        sha256=digest.hexdigest(),
        created_by=membership.user,
    )
    attachment.file.save(attachment.name, upload, save=False)
    try:
        attachment.save()
    except BaseException:
        attachment.file.delete(save=False)  # no file without its row
        raise
    return Status(
        201,
        {
            "id": str(attachment.id),
            "name": attachment.name,
            "contentType": attachment.content_type,
            "size": attachment.size,
            "sha256": attachment.sha256,
        },
    )
