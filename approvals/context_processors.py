"""What every console page shows of the approvals app."""

from typing import Any

from django.http import HttpRequest

from approvals import push
from console.tenancy import membership_of


def pending_requests(request: HttpRequest) -> dict[str, Any]:
    """The tenant's open request count, for the inbox badge in the navigation (`pending_label` as it reads; the
    badge tells console.js `pending_counted`, where counting stops)."""
    membership = membership_of(request)
    if membership is None:
        return {}
    count = push.pending_count(membership.tenant_id)
    return {"pending_count": count, "pending_label": push.pending_label(count), "pending_counted": push.PENDING_COUNTED}
