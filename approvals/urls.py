"""The inbox, rules and audit pages (URL names not namespaced: `{% url 'inbox' %}`)."""

from django.urls import path

from approvals import audit_views, rule_views, views

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/selection/", views.answer_selection, name="inbox_selection"),
    path("inbox/<uuid:request_id>/answer/", views.answer, name="inbox_answer"),
    path("inbox/<uuid:request_id>/claim/", views.claim_or_release, name="inbox_claim"),
    path("inbox/<uuid:request_id>/cancel-run/", views.cancel_run, name="inbox_cancel_run"),
    path("rules/", rule_views.rule_list, name="rules"),
    path("rules/new/", rule_views.rule_create, name="rule_create"),
    path("rules/condition-row/", rule_views.condition_row, name="rule_condition_row"),
    path("rules/<uuid:rule_id>/revoke/", rule_views.rule_revoke, name="rule_revoke"),
    path("audit/", audit_views.audit, name="audit"),
]
