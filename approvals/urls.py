"""The inbox, rules, audit and receipts pages (URL names not namespaced: `{% url 'inbox' %}`)."""

from django.urls import path

from approvals.views import (
    answer_pages,
    audit_pages,
    inbox_pages,
    preview_pages,
    receipt_pages,
    remember_pages,
    rule_pages,
)

urlpatterns = [
    path("inbox/", inbox_pages.inbox, name="inbox"),
    path("inbox/selection/", answer_pages.answer_selection, name="inbox_selection"),
    path("inbox/<uuid:request_id>/answer/", answer_pages.answer, name="inbox_answer"),
    path("inbox/<uuid:request_id>/remember/", remember_pages.remember_choice, name="inbox_remember"),
    path("inbox/<uuid:request_id>/claim/", answer_pages.claim_or_release, name="inbox_claim"),
    path("inbox/<uuid:request_id>/cancel-run/", answer_pages.cancel_card_run, name="inbox_cancel_run"),
    path("inbox/held/<uuid:batch>/", answer_pages.held_answer, name="held_answer"),
    path("inbox/held/<uuid:batch>/undo/", answer_pages.undo_answer, name="held_undo"),
    path("rules/", rule_pages.rule_list, name="rules"),
    path("rules/new/", rule_pages.rule_create, name="rule_create"),
    path("rules/condition-row/", rule_pages.condition_row, name="rule_condition_row"),
    path("rules/preview/", preview_pages.rule_preview, name="rule_preview"),
    path("rules/suggestions/", preview_pages.rule_suggestions, name="rule_suggestions"),
    path("rules/suggestions/adopt/", preview_pages.rule_suggestion_adopt, name="rule_suggestion_adopt"),
    path("rules/<uuid:rule_id>/edit/", rule_pages.rule_edit, name="rule_edit"),
    path("rules/<uuid:rule_id>/revoke/", rule_pages.rule_revoke, name="rule_revoke"),
    path("audit/", audit_pages.audit, name="audit"),
    path("receipts/", receipt_pages.receipt_list, name="receipts"),
    path("receipts/<uuid:receipt_id>/", receipt_pages.receipt_detail, name="receipt"),
    path("receipts/request/<uuid:request_id>/", receipt_pages.request_receipt, name="request_receipt"),
]
