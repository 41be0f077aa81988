"""The approvals routes of the JSON API, one router per concern: pending requests and answering them
(`requests`), remembered rules (`rules`), what a rule or policy would have done (`previews`), receipts
(`receipts`); console/api.py adds them."""
