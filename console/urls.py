from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console.api import api
from console.views import dashboard, health, tenant, tokens
from console.views.login import LoginView

# What reaches Django's own handlers gets the console's pages too (most never do: console.errors).
handler403 = "console.errors.permission_denied"
handler404 = "console.errors.page_not_found"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tenant/", tenant.tenant_page, name="tenant"),
    path("tenant/switch/", tenant.switch_tenant, name="switch_tenant"),
    path("tenant/webhook/", tenant.choose_webhook, name="tenant_webhook"),
    path("tenant/groups/", tenant.create_group, name="tenant_group_create"),
    path("tenant/groups/<int:group_id>/members/", tenant.add_member, name="tenant_group_add"),
    path(
        "tenant/groups/<int:group_id>/members/<int:user_id>/remove/",
        tenant.remove_member,
        name="tenant_group_remove",
    ),
    path("tenant/groups/<int:group_id>/delete/", tenant.delete_group, name="tenant_group_delete"),
    path("notifications/", tenant.notifications, name="notifications"),
    path("tokens/", tokens.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", tokens.revoke_token, name="revoke_token"),
    path("", include("agents.urls")),
    path("healthz", health.healthz, name="healthz"),
    path("api/", api.urls),
    path("admin/", admin.site.urls),
    path("", include("approvals.urls")),
]
