"""`GET /api/connections`: the connections a tenant's definitions may name (names and kinds only)."""

from django.http import HttpRequest
from ninja import Router, Schema

from console.models import Connection

router = Router(tags=["connections"])


class ConnectionOut(Schema):
    name: str
    kind: str


@router.get("/connections", response=list[ConnectionOut])
def list_connections(request: HttpRequest) -> list[ConnectionOut]:
    specs = Connection.objects.specs_for(request.membership.tenant)  # type: ignore[attr-defined]
    return [ConnectionOut(name=spec.name, kind=spec.kind) for spec in sorted(specs.values(), key=lambda s: s.name)]
