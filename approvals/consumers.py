"""The console websocket: one connection per open console tab, joined to its tenant's group.

Pushes arrive from approvals/push.py with their fragments already rendered (one variant for those who
may answer, one for readers); the consumer only picks its variant and forwards it, after making sure
its user is still a member (re-checked when told a membership changed, and at most every few seconds).
"""

import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from approvals.push import pending_count, tenant_group
from console.models import Membership

RECHECK_SECONDS = 5.0


class ConsoleConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None
    user_id: int | None = None
    tenant_id: int | None = None
    can_answer = False
    checked_at = 0.0

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        membership = await self._membership(user.pk, self.scope["session"].get("tenant_id"))
        if membership is None:
            await self.close(code=4403)
            return
        self.user_id, self.tenant_id = user.pk, membership.tenant_id
        self._remember(membership)
        self.group = tenant_group(membership.tenant_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "heartbeat", "pending": await self._pending()})

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if content == {"type": "ping"} and await self._still_member():
            await self.send_json({"type": "heartbeat", "pending": await self._pending()})

    async def approvals_requests_opened(self, event: dict[str, Any]) -> None:
        if await self._still_member():
            variant = "operator" if self.can_answer else "reader"
            await self.send_json(
                {
                    "type": "requests_opened",
                    "ids": event["ids"],
                    "html": event["html"][variant],
                    "titles": event["titles"],
                    "sentAt": event["sentAt"],
                    "pending": event["pending"],
                }
            )

    async def approvals_requests_closed(self, event: dict[str, Any]) -> None:
        if await self._still_member():
            await self.send_json({"type": "requests_closed", "ids": event["ids"], "pending": event["pending"]})

    async def console_membership_changed(self, event: dict[str, Any]) -> None:
        if event["user_id"] == self.user_id:
            self.checked_at = 0.0
            await self._still_member()

    async def _still_member(self) -> bool:
        """Re-read the membership when it may have changed; a removed member's socket is closed."""
        if time.monotonic() - self.checked_at < RECHECK_SECONDS:
            return True
        membership = await self._current(self.user_id, self.tenant_id)
        if membership is None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None
            await self.close(code=4403)
            return False
        self._remember(membership)
        return True

    def _remember(self, membership: Membership) -> None:
        self.can_answer = membership.allows("operator")
        self.checked_at = time.monotonic()

    @database_sync_to_async
    def _membership(self, user_id: int, tenant_id: int | None) -> Membership | None:
        memberships = Membership.objects.filter(user_id=user_id, user__is_active=True).order_by("tenant__slug")
        if tenant_id is not None:
            chosen = memberships.filter(tenant_id=tenant_id).first()
            if chosen is not None:
                return chosen
        return memberships.first()

    @database_sync_to_async
    def _current(self, user_id: int | None, tenant_id: int | None) -> Membership | None:
        if user_id is None or tenant_id is None:
            return None
        return Membership.objects.filter(user_id=user_id, tenant_id=tenant_id, user__is_active=True).first()

    @database_sync_to_async
    def _pending(self) -> int:
        assert self.tenant_id is not None
        return pending_count(self.tenant_id)
