from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from agents import run_views, trial_views
from approvals import audit_views, rule_views
from approvals import views as approval_views
from console import views
from console.api import api
from console.login import LoginView

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
    path("trial/", trial_views.trial, name="trial"),
    path("trial/turns/<uuid:run_id>/", trial_views.trial_turn, name="trial_turn"),
    path("runs/", run_views.run_list, name="runs"),
    path("runs/jobs/", run_views.jobs_panel, name="jobs"),
    path("runs/<uuid:run_id>/", run_views.run_detail, name="run"),
    path("runs/<uuid:run_id>/cancel/", run_views.run_cancel, name="run_cancel"),
    path("inbox/", approval_views.inbox, name="inbox"),
    path("inbox/<uuid:request_id>/answer/", approval_views.answer, name="inbox_answer"),
    path("rules/", rule_views.rule_list, name="rules"),
    path("rules/new/", rule_views.rule_create, name="rule_create"),
    path("rules/condition-row/", rule_views.condition_row, name="rule_condition_row"),
    path("rules/<uuid:rule_id>/revoke/", rule_views.rule_revoke, name="rule_revoke"),
    path("audit/", audit_views.audit, name="audit"),
]
