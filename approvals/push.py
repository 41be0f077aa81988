"""Every push to open consoles goes through here, one function per event.

A push is rendered and JSON-encoded once per role variant (answer buttons or not), never once per socket,
and carries the tenant's members as read when it leaves: each consumer finds its user in that list, sends
its variant's text as it is, and closes itself when its user is no longer a member. Domain code calls these
functions, never the channel layer directly. A request opened or closed is also announced to the tenant's
webhook (approvals/webhooks.py), off this thread.
"""

import json
import time
from typing import Any

from channels.layers import get_channel_layer
from django.db.models.expressions import RawSQL
from django.template.loader import render_to_string
from django.utils import timezone

from approvals import waiting, webhooks
from approvals.models import ApproverGroup, Away, PendingRequest
from console.loops import run_here
from console.models import ROLE_RANK, Membership, Role, Tenant


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


# The open requests are counted up to this many; more read "1000+". Counting reads an index entry per open
# request: uncapped, every page and every push cost more as the backlog grew (~2 ms at 10,000 open requests,
# bench/inbox_scale.py). The navigation's badge gives it to the console's scripts (static/console/console.js).
PENDING_COUNTED = 1000


def pending_count(tenant_id: int) -> int:
    """The tenant's open requests, counted up to PENDING_COUNTED + 1 (a count past PENDING_COUNTED: more)."""
    return PendingRequest.objects.open().filter(tenant_id=tenant_id).order_by()[: PENDING_COUNTED + 1].count()


def pending_label(count: int) -> str:
    """A `pending_count` as people read it."""
    return f"{PENDING_COUNTED}+" if count > PENDING_COUNTED else str(count)


def render_request(request: PendingRequest, *, can_answer: bool, error: str | None = None) -> str:
    return render_to_string("approvals/request.html", {"r": request, "can_answer": can_answer, "error": error})


def member_key(user_id: int) -> str:
    """How a user appears in a push's member lists (see `_members`)."""
    return f" {user_id} "


def _members(tenant_id: int, group: str = "") -> tuple[str, str, int]:
    """The tenant's active members now, as two strings of ` id ` keys: those who may answer (operators; for
    requests routed to `group`, admins and that group's members), and the others, who watch; and the tenant's
    `pending_count`, read in the same query (0 for a tenant without members: nobody to tell).

    Strings rather than sets: the in-memory layer deep-copies a message for every socket and the Redis layer
    serialises it for every socket, and a string costs one copy however many members it lists.
    """
    approvers: set[int] = set()
    if group:
        routed = ApproverGroup.objects.filter(tenant_id=tenant_id, name__in=group.split(","))
        approvers = set(routed.values_list("members", flat=True))
        # The delegates of away members who may answer it answer it too (SPEC section 14).
        now = timezone.now()
        away = Away.objects.filter(membership__tenant_id=tenant_id, starts_at__lte=now, ends_at__gt=now)
        standing = away.values_list("membership__user_id", "membership__role", "delegate__user_id")
        approvers |= {delegate for user_id, role, delegate in standing if user_id in approvers or role == Role.ADMIN}
    open_requests = PendingRequest.objects.open().filter(tenant_id=tenant_id).order_by().values("pk")
    sql, params = open_requests[: PENDING_COUNTED + 1].query.sql_with_params()
    counted = RawSQL(f"SELECT COUNT(*) FROM ({sql}) AS open_requests", params)  # Django's own SQL
    members = Membership.objects.filter(tenant_id=tenant_id, user__is_active=True).annotate(pending=counted)
    operators, readers, counts = [" "], [" "], [0]
    for user_id, role, count in members.values_list("user_id", "role", "pending"):
        counts[0] = count
        rank = ROLE_RANK[Role(role)]
        may_answer = rank >= ROLE_RANK[Role.OPERATOR] and (
            not group or rank >= ROLE_RANK[Role.ADMIN] or user_id in approvers
        )
        (operators if may_answer else readers).append(f"{user_id} ")
    return "".join(operators), "".join(readers), counts[0]


def _send(tenant_id: int, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is not None:
        run_here(layer.group_send(tenant_group(tenant_id), message))


def _push(
    tenant_id: int,
    operator: dict[str, Any],
    reader: dict[str, Any] | None = None,
    *,
    group: str = "",
    counted: bool = False,
    cards: list[PendingRequest] | None = None,
) -> None:
    """Push `operator` to the members who may answer (requests routed to `group`, comma-joined: their members and
    admins) and
    `reader` (the same when None) to the others; `counted`: both say the tenant's `pending` count; `cards`: both
    carry them as `html`, with their forms for those who may answer. Nothing is read or rendered when no console
    of the tenant is open."""
    if not waiting.listened_groups([tenant_group(tenant_id)]):
        return
    operators, readers, pending = _members(tenant_id, group)
    if cards is not None:
        operator = {**operator, "html": "".join(render_request(r, can_answer=True) for r in cards)}
        reader = {**(reader or {}), "html": "".join(render_request(r, can_answer=False) for r in cards)}
    # When the push left (rendered, counted, members read), so clients and benchmarks see the fan-out latency.
    sent_at: dict[str, Any] = {"sentAt": time.time(), **({"pending": pending} if counted else {})}
    operator_text = json.dumps({**operator, **sent_at})
    message = {
        "type": "console.push",
        "operators": operators,
        "readers": readers,
        "operator": operator_text,
        "reader": operator_text if reader is None else json.dumps({**reader, **sent_at}),
    }
    _send(tenant_id, message)


def notify_requests_opened(requests: list[PendingRequest]) -> None:
    """New requests: every open inbox of the tenant shows them; those who may not answer them (readers, and
    operators outside the group a request is routed to) get the card without its forms."""
    if not requests:
        return
    first = requests[0]
    tenant = first.tenant if PendingRequest.tenant.is_cached(first) else first.tenant_id
    webhooks.announce(webhooks.OPENED, tenant, [r.id for r in requests])
    _show(requests)


def _show(requests: list[PendingRequest], *, titles: bool = True) -> None:
    """Push the cards of `requests` to every open inbox; `titles` for a browser notification of them."""
    tenant_id = requests[0].tenant_id
    by_group: dict[str, list[PendingRequest]] = {}
    for request in requests:
        by_group.setdefault(request.approvers, []).append(request)
    for group, routed in by_group.items():
        common = {
            "type": "requests_opened",
            "ids": [str(r.id) for r in routed],
            "titles": [f"{r.agent.name}: {r.tool_name}" for r in routed] if titles else [],
        }
        _push(tenant_id, common, common, group=group, counted=True, cards=routed)


def notify_requests_closed(tenant_id: int, request_ids: list[str], tenant: Tenant | None = None) -> None:
    """Answered or terminated requests: every open inbox drops them (`tenant`: the tenant, when read already)."""
    if not request_ids:
        return
    webhooks.announce(webhooks.CLOSED, tenant or tenant_id, request_ids)
    waiting.wake(request_ids)
    _push(tenant_id, {"type": "requests_closed", "ids": request_ids}, counted=True)


def notify_requests_held(tenant_id: int, request_ids: list[str]) -> None:
    """Answers held for their undo window (approvals.actions.held): every open inbox drops the cards as it
    drops answered ones, but nothing is announced and no waiter wakes, for nothing is decided yet."""
    _push(tenant_id, {"type": "requests_closed", "ids": request_ids}, counted=True)


def notify_requests_released(requests: list[PendingRequest]) -> None:
    """Held answers undone: their cards come back to every open inbox; no webhook, the requests never closed."""
    if requests:
        _show(requests, titles=False)  # nobody needs telling again


def notify_request_claimed(request: PendingRequest) -> None:
    """A request claimed or released: every open inbox says who handles it (`claimedBy` None: nobody)."""
    claimed_by = request.claimed_by.username if request.claimed_by else None
    claimed_at = request.claimed_at.isoformat() if request.claimed_at else None
    _push(
        request.tenant_id,
        {"type": "request_claimed", "id": str(request.id), "claimedBy": claimed_by, "claimedAt": claimed_at},
    )


def notify_approvals(request: PendingRequest) -> None:
    """An approval toward a request's quorum (SPEC section 14): every open inbox shows its card as it is now (the
    approvals given, who is still needed); the card of the one who approved, dropped while held, comes back."""
    common = {"type": "request_approvals", "id": str(request.id)}
    _push(request.tenant_id, common, common, group=request.approvers, cards=[request])


def notify_request_escalated(request: PendingRequest) -> None:
    """An escalation step added groups to those who may answer (SPEC section 14): every open inbox shows the card
    again (its new members get its forms), and the webhooks and browsers hear of it as of a new request."""
    notify_requests_held(request.tenant_id, [str(request.id)])  # out of every inbox first: shown anew below
    notify_requests_opened([request])


def notify_membership_changed(tenant_id: int, user_id: int) -> None:
    """A membership changed or ended: that user's consoles re-check it at once."""
    _send(tenant_id, {"type": "console.membership_changed", "user_id": user_id})
