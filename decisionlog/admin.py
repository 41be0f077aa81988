from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from decisionlog.models import SinkCursor


@admin.register(SinkCursor)
class SinkCursorAdmin(admin.ModelAdmin[SinkCursor]):
    """Where each sink stands for each tenant, and why it is behind: read-only, for the installation's operators."""

    list_display = ("connection", "tenant", "sequence", "delivered_at", "attempts", "retry_at", "last_error")
    list_filter = ("connection",)
    readonly_fields = [field.name for field in SinkCursor._meta.fields]

    # The sinks are connections: superusers only, as ConnectionAdmin.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
