"""A click in Slack as an answer (SPEC section 17): the linked member answers through the one answer action
(`approvals.actions.answer_request`: routing, requirements, receipts), at once (no undo hold), signed in as
`slack:<team id>/<slack user id>`. What they are told when it changed nothing is a sentence for an ephemeral
message or the modal's error."""

import uuid
from dataclasses import dataclass

from approvals.actions import answer_request
from approvals.decisions import Actor
from approvals.kinds import KINDS
from approvals.models import NotAnApprover, PendingRequest, Via
from approvals.responses import Response, ResponseRefused
from console.models import Membership
from console.tenancy import AUTH_METHOD


@dataclass(frozen=True)
class Clicked:
    """What a click did: `changed` something (an answer or an approval recorded), and what to tell the one who
    clicked ("" when the updated message says it)."""

    changed: bool
    told: str = ""


def not_linked(tenant_name: str) -> str:
    return (
        f"Your Slack user is not linked to a member of {tenant_name}: get a code on Airlock's Notifications page and"
        " send it here as `/airlock link CODE`. Nothing was changed."
    )


def answer_refusal(membership: Membership, request: PendingRequest) -> str | None:
    """Why the member may not answer `request`, or None (the respond API's check says it again when they answer)."""
    if not membership.allows("operator"):
        return f"As a {membership.role} of {membership.tenant.name} you answer no request. Nothing was changed."
    if not request.answerable_by(membership):
        return NotAnApprover(request).detail + " Nothing was changed."
    if not KINDS[request.kind].selectable:  # its message has no Approve or Deny (slackapp/blocks.py)
        return "This request takes more than a yes or no: answer it in Airlock. Nothing was changed."
    return None


def answer_in_slack(
    membership: Membership, team_id: str, user_id: str, request_id: uuid.UUID, *, approved: bool, reason: str = ""
) -> Clicked:
    """The member's approval or denial (with `reason`) of the request, given in Slack."""
    auth = f"slack:{team_id}/{user_id}"
    signed_in = AUTH_METHOD.set(auth)
    try:
        actor = Actor.person(membership.user, Via.SLACK, auth)
        response = Response(request_id=request_id, approved=approved, reason=reason or None)
        outcome = answer_request(membership, actor, response)
    except ResponseRefused as refused:
        return Clicked(False, f"{refused.detail} Nothing was changed.")
    except PendingRequest.DoesNotExist:
        return Clicked(False, "Airlock has no such request. Nothing was changed.")
    finally:
        AUTH_METHOD.reset(signed_in)
    if outcome.status == "accepted":
        return Clicked(True)
    if outcome.status == "recorded":
        return Clicked(True, outcome.message)
    return Clicked(False, outcome.message)
