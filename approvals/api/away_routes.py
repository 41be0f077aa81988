"""`/api/me/away`: the member's own absence and who stands in for them (SPEC section 14, delegation)."""

from typing import Any

from ninja import Field, Router, Schema

from approvals.answerers import Away, AwayRefused, set_away
from console.api import ApiError, require_role
from console.moments import Moment
from console.tenancy import ConsoleRequest

router = Router(tags=["delegation"])


class AwayIn(Schema):
    starts_at: Moment | None = Field(default=None, alias="from")
    until: Moment
    delegate: str = Field(min_length=1, max_length=150)


class AwayOut(Schema):
    away: dict[str, Any] | None = Field(description="{from, until, delegate, active}; null when not away")


def _current(request: ConsoleRequest) -> dict[str, Any]:
    away = Away.objects.select_related("delegate__user").filter(membership=request.membership).first()
    return {"away": away.wire() if away is not None else None}


@router.get("/me/away", response=AwayOut)
def get_away(request: ConsoleRequest) -> dict[str, Any]:
    """Whether you are marked away in this tenant, until when, and who stands in for you."""
    return _current(request)


@router.put("/me/away", response=AwayOut)
def put_away(request: ConsoleRequest, payload: AwayIn) -> dict[str, Any]:
    """Mark yourself away (from now unless `from`) until `until`: `delegate`, another member with role operator or
    admin, may answer what you may meanwhile; their answers say `onBehalfOf` you. 400 `invalid_delegate`."""
    membership = require_role(request, "operator")
    try:
        set_away(membership, payload.starts_at, payload.until, payload.delegate)
    except AwayRefused as refused:
        raise ApiError.of(refused) from None
    return _current(request)


@router.delete("/me/away", response=AwayOut)
def end_away(request: ConsoleRequest) -> dict[str, Any]:
    """You are back: your delegate answers for you no more."""
    Away.objects.filter(membership=request.membership).delete()
    return _current(request)
