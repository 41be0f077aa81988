"""What every console page shows of the approvals app."""

from typing import Any

from django.http import HttpRequest

from approvals.push import pending_count, pending_label
from console.tenancy import membership_of


def pending_requests(request: HttpRequest) -> dict[str, Any]:
    """The tenant's open request count, for the inbox badge in the navigation (`pending_label` as it reads)."""
    membership = membership_of(request)
    if membership is None:
        return {}
    count = pending_count(membership.tenant_id)
    return {"pending_count": count, "pending_label": pending_label(count)}
