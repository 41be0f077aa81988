"""The inbox, rules, audit and receipts pages (URL names not namespaced: `{% url 'inbox' %}`)."""

from django.urls import path

from approvals.views import answers, audit, inbox, previews, receipts, rules

urlpatterns = [
    path("inbox/", inbox.inbox, name="inbox"),
    path("inbox/selection/", answers.answer_selection, name="inbox_selection"),
    path("inbox/<uuid:request_id>/answer/", answers.answer, name="inbox_answer"),
    path("inbox/<uuid:request_id>/claim/", answers.claim_or_release, name="inbox_claim"),
    path("inbox/<uuid:request_id>/cancel-run/", answers.cancel_card_run, name="inbox_cancel_run"),
    path("inbox/held/<uuid:batch>/", answers.held_answer, name="held_answer"),
    path("inbox/held/<uuid:batch>/undo/", answers.undo_answer, name="held_undo"),
    path("rules/", rules.rule_list, name="rules"),
    path("rules/new/", rules.rule_create, name="rule_create"),
    path("rules/condition-row/", rules.condition_row, name="rule_condition_row"),
    path("rules/preview/", previews.rule_preview, name="rule_preview"),
    path("rules/suggestions/", previews.rule_suggestions, name="rule_suggestions"),
    path("rules/suggestions/adopt/", previews.rule_suggestion_adopt, name="rule_suggestion_adopt"),
    path("rules/<uuid:rule_id>/edit/", rules.rule_edit, name="rule_edit"),
    path("rules/<uuid:rule_id>/revoke/", rules.rule_revoke, name="rule_revoke"),
    path("audit/", audit.audit, name="audit"),
    path("receipts/", receipts.receipt_list, name="receipts"),
    path("receipts/<uuid:receipt_id>/", receipts.receipt_detail, name="receipt"),
    path("receipts/request/<uuid:request_id>/", receipts.request_receipt, name="request_receipt"),
]
