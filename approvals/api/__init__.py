"""The approvals routes of the JSON API, one router per concern: pending requests and answering them
(`request_routes`), remembered rules (`rule_routes`), what a rule or policy would have done (`preview_routes`),
receipts (`receipt_routes`); console/api.py adds them."""
