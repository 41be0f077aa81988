"""What every console page shows of the approvals app."""

from typing import Any

from django.http import HttpRequest

from approvals.push import pending_count
from console.tenancy import membership_of


def pending_requests(request: HttpRequest) -> dict[str, Any]:
    """The tenant's open request count, for the inbox badge in the navigation."""
    membership = membership_of(request)
    if membership is None:
        return {}
    return {"pending_count": pending_count(membership.tenant_id)}
