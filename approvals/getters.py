"""The tenant-scoped getters pages and API routes share: the object, or a 404 for anything not the caller's."""

import uuid

from approvals.external_wire import request_ids
from approvals.models import PendingRequest, Rule
from approvals.remembered_rules import tenant_rules
from console.tenancy import ConsoleRequest, NotFound


def get_request_for(request: ConsoleRequest, request_id: uuid.UUID, *related: str) -> PendingRequest:
    """The pending request, with the `related` objects the caller reads joined in. `request_id` is its id, or the
    `requestId` its external agent sent (approvals.external_wire.request_ids)."""
    requests = PendingRequest.objects.select_related(*related) if related else PendingRequest.objects.all()
    pending = requests.filter(tenant=request.tenant, id__in=request_ids(request.tenant.pk, request_id)).first()
    if pending is None:
        raise NotFound("request_not_found", f"No request {request_id} in this tenant.")
    return pending


def get_rule_for(request: ConsoleRequest, rule_id: uuid.UUID) -> Rule:
    """A rule of the tenant's live agents (a deleted agent's rules are gone with it)."""
    rule = tenant_rules(request.tenant).filter(id=rule_id).first()
    if rule is None:
        raise NotFound("rule_not_found", f"No rule {rule_id} in this tenant.")
    return rule
