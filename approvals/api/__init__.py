"""The approvals routes of the JSON API, one router per concern: pending requests and answering them
(`requests`), remembered rules (`rules`), receipts (`receipts`); console/api.py adds them."""
