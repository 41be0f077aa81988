"""The approvals pages, one module per page: the inbox (`inbox_pages`: the list, its filters and pages, a run's
batch answer), what its cards post (`answer_pages`: answer, selection, claim, cancel), the rules page
(`rule_pages`, its previews and suggestions in `preview_pages`), the audit page (`audit_pages`, over the entries of
approvals/audit_entries.py) and the receipts pages (`receipt_pages`). approvals/urls.py names each view."""
