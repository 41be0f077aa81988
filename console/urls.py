from django.contrib import admin
from django.urls import include, path

from console.api import api
from console.views import dashboard_pages, health_pages, metrics_pages, tenant_pages, token_pages
from console.views.login_pages import LoginView, LogoutView

# What reaches Django's own handlers gets the console's pages too (most never do: console.errors).
handler400 = "console.errors.bad_request"
handler403 = "console.errors.permission_denied"
handler404 = "console.errors.page_not_found"

urlpatterns = [
    # First: Django tries the patterns in order, and an API request went through every page's before its own (issue
    # 56). No page's path starts with `api/`.
    path("api/", api.urls),
    path("", dashboard_pages.dashboard, name="dashboard"),
    path("first-steps/hide/", dashboard_pages.hide_first_steps, name="hide_first_steps"),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", LogoutView.as_view(), name="logout"),
    path("tenant/", tenant_pages.tenant_page, name="tenant"),
    path("tenant/switch/", tenant_pages.switch_tenant, name="switch_tenant"),
    path("tenant/webhook/", tenant_pages.choose_webhook, name="tenant_webhook"),
    path("tenant/groups/", tenant_pages.create_group, name="tenant_group_create"),
    path("tenant/groups/<int:group_id>/members/", tenant_pages.add_member, name="tenant_group_add"),
    path(
        "tenant/groups/<int:group_id>/members/<int:user_id>/remove/",
        tenant_pages.remove_member,
        name="tenant_group_remove",
    ),
    path("tenant/groups/<int:group_id>/delete/", tenant_pages.delete_group, name="tenant_group_delete"),
    path("notifications/", tenant_pages.notifications, name="notifications"),
    path("notifications/away/", tenant_pages.away, name="away"),
    path("tokens/", token_pages.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", token_pages.revoke_token, name="revoke_token"),
    path("", include("agents.urls")),
    path("healthz", health_pages.healthz, name="healthz"),
    path("metrics", metrics_pages.metrics_page, name="metrics"),
    path("admin/", admin.site.urls),
    path("", include("approvals.urls")),
    path("", include("slackapp.urls")),
    path("", include("identity.urls")),
]
