"""The console websocket: one connection per open console tab, joined to its tenant's group."""

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.models import Membership


def tenant_group(tenant_id: int) -> str:
    return f"tenant.{tenant_id}"


class ConsoleConsumer(AsyncJsonWebsocketConsumer):
    membership_id: int | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        membership = await self._membership(user.pk, self.scope["session"].get("tenant_id"))
        if membership is None:
            await self.close(code=4403)
            return
        self.membership_id = membership.pk
        self.group = tenant_group(membership.tenant_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send_json({"type": "heartbeat", "pending": await self._pending_count()})

    async def disconnect(self, code: int) -> None:
        if self.membership_id is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if content == {"type": "ping"}:
            await self.send_json({"type": "heartbeat", "pending": await self._pending_count()})

    @database_sync_to_async
    def _membership(self, user_id: int, tenant_id: int | None) -> Membership | None:
        memberships = Membership.objects.filter(user_id=user_id, user__is_active=True).order_by("tenant__slug")
        if tenant_id is not None:
            chosen = memberships.filter(tenant_id=tenant_id).first()
            if chosen is not None:
                return chosen
        return memberships.first()

    @database_sync_to_async
    def _pending_count(self) -> int:
        return 0  # pending requests arrive with the approvals issue
