"""The trial-run and runs pages. Apart from `agents/urls.py` because their URL names are not namespaced
(`{% url 'runs' %}`), and outside `/agents/`."""

from django.urls import path

from agents import run_views, trial_views

urlpatterns = [
    path("trial/", trial_views.trial, name="trial"),
    path("trial/turns/<uuid:run_id>/", trial_views.trial_turn, name="trial_turn"),
    path("runs/", run_views.run_list, name="runs"),
    path("runs/jobs/", run_views.jobs_panel, name="jobs"),
    path("runs/<uuid:run_id>/", run_views.run_detail, name="run"),
    path("runs/<uuid:run_id>/cancel/", run_views.run_cancel, name="run_cancel"),
    path("runs/<uuid:run_id>/replay/", run_views.run_replay, name="run_replay"),
    path("runs/<uuid:run_id>/fork/", run_views.run_fork, name="run_fork"),
]
