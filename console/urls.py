from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import views
from console.api import api
from console.login import LoginView

# What reaches Django's own handlers gets the console's pages too (most never do: console.errors).
handler403 = "console.errors.permission_denied"
handler404 = "console.errors.page_not_found"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tenant/", views.switch_tenant, name="switch_tenant"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.revoke_token, name="revoke_token"),
    path("agents/", include("agents.urls")),
    path("healthz", views.healthz, name="healthz"),
    path("api/", api.urls),
    path("admin/", admin.site.urls),
    path("", include("agents.run_urls")),
    path("", include("approvals.urls")),
]
