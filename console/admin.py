"""The Django admin (`/admin/`, staff only, its own login): where superusers manage connections."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from console.models import Connection


@admin.register(Connection)
class ConnectionAdmin(admin.ModelAdmin[Connection]):
    list_display = ("name", "kind", "all_tenants", "updated_at")
    list_filter = ("kind", "all_tenants")
    search_fields = ("name", "description")
    filter_horizontal = ("tenants",)
    fieldsets = (
        (None, {"fields": ("name", "kind", "description")}),
        ("Model provider", {"fields": ("base_url", "api_key_env")}),
        ("MCP server", {"fields": ("command", "args", "env", "url")}),
        ("Policy webhook", {"fields": ("secret_env",)}),
        ("Decision log sink (OTLP: url and secret variable; syslog)", {"fields": ("address", "tls")}),
        ("OpenID Connect sign-in (the issuer in URL, the client secret's variable above)", {"fields": ("oidc",)}),
        ("Granted to", {"fields": ("all_tenants", "tenants")}),
    )

    # Connections reach the host (processes, URLs, environment variables): superusers only, whatever
    # permissions a staff user was given.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    has_add_permission = has_module_permission  # type: ignore[assignment]
    has_change_permission = has_view_permission
    has_delete_permission = has_view_permission
