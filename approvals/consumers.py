"""The console websocket: one connection per open console tab, joined to its tenant's group.

Pushes arrive from approvals/push.py already rendered and encoded, one text for those who may answer and one
for readers, with the tenant's members as read when the push left. Before each send the consumer looks its
user up in those members: it forwards the text of the user's role as it is, or closes the socket when the
user is no longer an active member. A membership change also reaches the socket at once (push.py's
`notify_membership_changed`), so a removed member's socket closes even when nothing is pushed.

What a client may cost is bounded: a user holds at most `WEBSOCKETS_PER_USER` sockets open in this process (the
next is accepted and closed at once with `TOO_MANY_SOCKETS`), and a socket gets at most one heartbeat per
`PING_INTERVAL_SECONDS` for its pings; the frames that come in between are dropped unread.
"""

import json
import time
from typing import Any

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from approvals.push import member_key, pending_count, tenant_group
from console import metrics
from console.models import Membership
from console.slots import Slot, Slots

# The longest frame worth parsing: a client only ever sends {"type": "ping"}.
MAX_CLIENT_FRAME = 256
# A heartbeat reads the database; pings faster than this get none (the console itself never pings).
PING_INTERVAL_SECONDS = 1.0
# The close code of a socket over its user's cap (4000-4999 are the application's; 429 as in HTTP).
TOO_MANY_SOCKETS = 4429
SOCKETS = Slots("WEBSOCKETS_PER_USER")


class ConsoleConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None
    user_id: int | None = None
    tenant_id: int | None = None
    key = ""
    slot: Slot | None = None
    # When the last ping was answered (time.monotonic()); none yet.
    answered = float("-inf")

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' own dispatch first closes stale database connections in the sync thread: a thread hop
        # per message (about a millisecond here), taken socket after socket through one thread, which made up
        # most of a push's fan-out. This consumer reads the database only through database_sync_to_async,
        # which closes stale connections itself, so its messages go straight to their handlers.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        membership = await self._membership(user.pk, self.scope["session"].get("tenant_id"))
        if membership is None:
            await self.close(code=4403)
            return
        self.slot = SOCKETS.take(user.pk)
        if self.slot is None:
            # Accepted first: a socket refused at the handshake shows its client no code at all.
            await self.accept()
            await self.close(code=TOO_MANY_SOCKETS, reason="too many open websockets")
            return
        self.user_id, self.tenant_id, self.key = user.pk, membership.tenant_id, member_key(user.pk)
        metrics.websocket_opened(membership.tenant_id)
        self.group = tenant_group(membership.tenant_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "heartbeat", "pending": await self._pending()})

    async def disconnect(self, code: int) -> None:
        if self.slot is not None:
            self.slot.release()
        if self.tenant_id is not None:
            metrics.websocket_closed(self.tenant_id)
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any) -> None:
        """A client sends only pings; anything else, malformed or not, is ignored (never a crash that
        closes the socket). Long frames, and every frame within PING_INTERVAL_SECONDS of the last ping
        answered, are not parsed at all."""
        if text_data is None or len(text_data) > MAX_CLIENT_FRAME:
            return
        if time.monotonic() - self.answered < PING_INTERVAL_SECONDS:
            return
        try:
            content = json.loads(text_data)
        except ValueError:
            return
        await self.receive_json(content)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if content != {"type": "ping"}:
            return
        self.answered = time.monotonic()
        if await self._still_member():
            await self.send_json({"type": "heartbeat", "pending": await self._pending()})

    async def console_push(self, event: dict[str, Any]) -> None:
        if self.group is None:
            return
        if self.key in event["operators"]:
            await self.send(text_data=event["operator"])
        elif self.key in event["readers"]:
            await self.send(text_data=event["reader"])
        else:
            await self._leave()

    async def console_membership_changed(self, event: dict[str, Any]) -> None:
        """Still a member: a heartbeat, on which the inbox reads its cards again (the role or the groups that
        decide which cards this user may answer may have changed); else the socket closes."""
        if event["user_id"] == self.user_id and await self._still_member():
            await self.send_json({"type": "heartbeat", "pending": await self._pending()})

    async def _still_member(self) -> bool:
        """Re-read the membership; a removed member's socket is closed."""
        if self.group is not None and await self._current():
            return True
        await self._leave()
        return False

    async def _leave(self) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None
            await self.close(code=4403)

    @database_sync_to_async
    def _membership(self, user_id: int, tenant_id: int | None) -> Membership | None:
        memberships = Membership.objects.filter(user_id=user_id, user__is_active=True).order_by("tenant__slug")
        if tenant_id is not None:
            chosen = memberships.filter(tenant_id=tenant_id).first()
            if chosen is not None:
                return chosen
        return memberships.first()

    @database_sync_to_async
    def _current(self) -> bool:
        assert self.user_id is not None and self.tenant_id is not None
        return Membership.objects.filter(user_id=self.user_id, tenant_id=self.tenant_id, user__is_active=True).exists()

    @database_sync_to_async
    def _pending(self) -> int:
        assert self.tenant_id is not None
        return pending_count(self.tenant_id)
