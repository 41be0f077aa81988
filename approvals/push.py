"""Every push to open consoles goes through here, one function per event.

A push renders its fragment once per role variant (answer buttons or not), never once per socket;
the consumers pick their variant and forward it. Domain code calls these functions, never the
channel layer directly.
"""

import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

from approvals.models import PendingRequest, RequestStatus


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


def pending_count(tenant_id: int) -> int:
    return PendingRequest.objects.filter(tenant_id=tenant_id, status=RequestStatus.PENDING, answer__isnull=True).count()


def render_request(request: PendingRequest, *, can_answer: bool, error: str | None = None) -> str:
    return render_to_string("approvals/request.html", {"r": request, "can_answer": can_answer, "error": error})


def _send(tenant_id: int, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(tenant_group(tenant_id), message)


def notify_requests_opened(requests: list[PendingRequest]) -> None:
    """New requests: every open inbox of the tenant shows them."""
    if not requests:
        return
    tenant_id = requests[0].tenant_id
    html = {
        "operator": "".join(render_request(r, can_answer=True) for r in requests),
        "reader": "".join(render_request(r, can_answer=False) for r in requests),
    }
    _send(
        tenant_id,
        {
            "type": "approvals.requests_opened",
            "ids": [str(r.id) for r in requests],
            "html": html,
            "titles": [f"{r.agent.name}: {r.tool_name}" for r in requests],
            "pending": pending_count(tenant_id),
            # When the push left (rendered, counted), so clients and benchmarks can see the fan-out latency.
            "sentAt": time.time(),
        },
    )


def notify_requests_closed(tenant_id: int, request_ids: list[str]) -> None:
    """Answered or terminated requests: every open inbox drops them."""
    if not request_ids:
        return
    _send(
        tenant_id,
        {"type": "approvals.requests_closed", "ids": request_ids, "pending": pending_count(tenant_id)},
    )


def notify_membership_changed(tenant_id: int, user_id: int) -> None:
    """A membership changed or ended: that user's consoles re-check it at once."""
    _send(tenant_id, {"type": "console.membership_changed", "user_id": user_id})
