"""The agents app's pages: the agents' under `/agents/` (URL names namespaced: `{% url 'agents:detail' name %}`),
the trial-run and runs pages at the root (not namespaced: `{% url 'runs' %}`)."""

from django.urls import include, path

from agents import views

agent_pages = [
    path("", views.agent_list, name="list"),
    path("new/", views.agent_create, name="create"),
    path("row/<str:section>/", views.blank_row, name="row"),
    path("policies/starter/", views.starter_policy, name="starter_policy"),
    path("policies/row/<str:kind>/", views.policy_row, name="policy_row"),
    path("<slug:name>/", views.agent_detail, name="detail"),
    path("<slug:name>/edit/", views.agent_edit, name="edit"),
    path("<slug:name>/try/", views.agent_try, name="try"),
    path("<slug:name>/policy-preview/", views.policy_preview, name="policy_preview"),
    path("<slug:name>/versions/", views.agent_versions, name="versions"),
    path("<slug:name>/versions/<int:number>/", views.agent_version, name="version"),
    path("<slug:name>/diff/", views.agent_diff, name="diff"),
    path("<slug:name>/rollback/", views.agent_rollback, name="rollback"),
    path("<slug:name>/delete/", views.agent_delete, name="delete"),
]

urlpatterns = [
    path("agents/", include((agent_pages, "agents"))),
    path("trial/", views.trial, name="trial"),
    path("trial/turns/<uuid:run_id>/", views.trial_turn, name="trial_turn"),
    path("runs/", views.run_list, name="runs"),
    path("runs/jobs/", views.jobs_panel, name="jobs"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<uuid:run_id>/replay/", views.run_replay, name="run_replay"),
    path("runs/<uuid:run_id>/fork/", views.run_fork, name="run_fork"),
]
