"""Where a quorum stands (SPEC section 14): the approvals that count toward a request's decision and who is still
needed, as the card, the API, the respond contract and the chat messages say it. Below the counting itself
(approvals/quorum.py), so that what only shows a request reads it without the decision's machinery.
"""

from dataclasses import dataclass, field
from typing import Any

from agents.requirements import needs_several
from approvals.models import Approval, PendingRequest


@dataclass
class Tally:
    """Where a request's quorum stands after an approval: `given` of `required` counted (`by` whom), the groups of
    `fromEach` none of them is from (`missing`); `mine`: the approval to write when it completes the quorum."""

    given: int
    required: int
    by: list[str]
    missing: list[str] = field(default_factory=list)
    repeated: bool = False
    mine: Approval | None = None
    counted: list[Approval] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.given >= self.required and not self.missing

    def wire(self) -> dict[str, Any]:
        """The respond contract's `approvals` (SPEC section 14)."""
        return {"given": self.given, "required": self.required, "by": self.by}

    def summary(self) -> dict[str, Any]:
        """A request's JSON `quorum`: `wire()` and the `fromEach` groups it is `waitingFor` (as the
        `request.approval_recorded` event names them); with `given` short of `required`, who is still needed."""
        return {**self.wire(), "waitingFor": self.missing}

    @property
    def named(self) -> list[str]:
        """Who gave the approvals counted, as the card names them: a delegate with whom they stood in for ("dan for
        sam", SPEC section 14)."""
        named = []
        for given in self.counted:
            stood_in_for = given.on_behalf_of  # no query for an approval in one's own right
            named.append(f"{given.username} for {stood_in_for.username}" if stood_in_for else given.username)
        return named

    def waiting_for(self) -> str:
        """Who is still needed, as the card and the respond contract say it."""
        if self.missing:
            return "waiting for " + " and ".join(self.missing)
        more = self.required - self.given
        return f"waiting for {more} more approval{'s' if more != 1 else ''}"


def counting(given: list[Approval], arguments_digest: str) -> list[Approval]:
    """The approvals of `given` (in order) that count toward approving `arguments_digest`: those of these arguments
    since the last approval of other arguments (an edit starts the count again)."""
    counted: list[Approval] = []
    for approval in given:
        counted = [*counted, approval] if approval.arguments_digest == arguments_digest else []
    return counted


def standing(pending: PendingRequest) -> Tally | None:
    """Where `pending`'s quorum stands (the card, the API): the count on the arguments last approved; None for a
    request one answer decides."""
    require = pending.require or {}
    if not needs_several(pending.require):
        return None
    given = list(pending.approvals.all())
    counted = counting(given, given[-1].arguments_digest) if given else []
    return tallied(counted, require, list(require.get("fromEach") or []))


def tallied(counted: list[Approval], require: dict[str, Any], from_each: list[str], *, repeated: bool = False) -> Tally:
    """The quorum of `require` with the approvals `counted`."""
    covered = {group for given in counted for group in given.groups}
    return Tally(
        given=len(counted),
        required=int(require.get("approvals", 1)),
        by=[given.username for given in counted],
        missing=[group for group in from_each if group not in covered],
        repeated=repeated,
        counted=counted,
    )
