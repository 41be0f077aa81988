"""Approvals where people are: Slack (SPEC section 17). A top-layer app: it reads requests and answers them
through `approvals.actions.answer_request`; nothing below imports it."""
