"""`GET /api/connections`: the connections a tenant's definitions may name (names and kinds only)."""

from ninja import Router, Schema

from console.models import Connection
from console.tenancy import ConsoleRequest

router = Router(tags=["connections"])


class ConnectionOut(Schema):
    name: str
    kind: str


@router.get("/connections", response=list[ConnectionOut])
def list_connections(request: ConsoleRequest) -> list[ConnectionOut]:
    specs = Connection.objects.specs_for(request.tenant)
    return [ConnectionOut(name=spec.name, kind=spec.kind) for spec in sorted(specs.values(), key=lambda s: s.name)]
