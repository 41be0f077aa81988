"""Who must answer a request and how many of them (SPEC sections 11 and 14), as a definition declares it.

`approvers` names one group or a list of groups: a member of any of them (or an admin) may answer. `require` says
what a decision takes: `approvals` distinct people approving the same arguments, at least one from each group of
`fromEach`, and whether the person who started the run (or whose token opened the external request) may be one of
them (`selfApproval`, false wherever `require` is given). The count itself is kept where decisions are made
(`approvals.decisions.decide`).
"""

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    model_validator,
)
from pydantic.alias_generators import to_camel

SLUG = r"^[a-z0-9][a-z0-9_-]{0,62}$"
# At most this many groups in one `approvers` list (a request stores them joined, in 255 characters).
MOST_GROUPS = 4
MOST_APPROVALS = 10

GroupName = Annotated[str, StringConstraints(pattern=SLUG)]


def _distinct(groups: list[str]) -> list[str]:
    if len(set(groups)) != len(groups):
        raise ValueError("a group is named twice")
    return groups


class WireModel(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


DURATION = re.compile(r"^([1-9][0-9]{0,6})([smhd])$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MOST_STEPS = 5


def parse_duration(text: str) -> timedelta:
    """`<n>s`, `<n>m`, `<n>h` or `<n>d` as a timedelta (the text is checked by `EscalationStep`)."""
    found = DURATION.match(text)
    assert found is not None, text
    return timedelta(seconds=int(found[1]) * SECONDS[found[2]])


class EscalationStep(WireModel):
    """One step of a request's escalation (SPEC section 14), `after` its opening: `to` adds approver groups, or
    `then` ends the request (`deny`, `expire`, or `approve`)."""

    after: str = Field(pattern=DURATION.pattern)
    to: Annotated[list[GroupName], Field(min_length=1, max_length=MOST_GROUPS)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    then: Literal["deny", "expire", "approve"] | None = Field(default=None, exclude_if=lambda value: value is None)

    @model_validator(mode="after")
    def _one_thing(self) -> "EscalationStep":
        if (self.to is None) == (self.then is None):
            raise ValueError("a step either adds groups (`to`) or ends the request (`then`)")
        if parse_duration(self.after) < timedelta(seconds=5):
            raise ValueError("a step comes at least 5s after the opening")
        _distinct(self.to or [])
        return self


def _in_order(steps: list[EscalationStep]) -> list[EscalationStep]:
    afters = [parse_duration(step.after) for step in steps]
    if afters != sorted(afters) or len(set(afters)) != len(afters):
        raise ValueError("the steps come in order, each later than the one before")
    if any(step.then for step in steps[:-1]):
        raise ValueError("a step that ends the request (`then`) is the last")
    return steps


Escalated = Annotated[
    list[EscalationStep],
    Field(default_factory=list, max_length=MOST_STEPS, exclude_if=lambda value: not value),
    AfterValidator(_in_order),
]


class Require(WireModel):
    """What deciding a request takes beyond its first answer (SPEC section 14)."""

    approvals: StrictInt = Field(default=1, ge=1, le=MOST_APPROVALS)
    from_each: list[GroupName] = Field(default_factory=list, max_length=MOST_GROUPS)
    self_approval: StrictBool = False

    @model_validator(mode="after")
    def _reachable(self) -> "Require":
        _distinct(self.from_each)
        if len(self.from_each) > self.approvals:
            raise ValueError(
                f"approvals ({self.approvals}) must be at least the number of fromEach groups ({len(self.from_each)})"
            )
        return self


def approver_list(approvers: str | list[str] | None) -> list[str]:
    """The groups `approvers` names, in order (one group or a list)."""
    if approvers is None:
        return []
    return [approvers] if isinstance(approvers, str) else list(approvers)


def check_routing(approvers: str | list[str] | None, require: Require | None) -> None:
    """Refuse a `require` whose `fromEach` names a group the `approvers` do not: its members could not answer."""
    named = _distinct(approver_list(approvers))
    if require is not None and named:
        outside = [group for group in require.from_each if group not in named]
        if outside:
            raise ValueError(f"fromEach names {outside[0]!r}, which is not one of the approvers {named}")


class Routed(WireModel):
    """What names who answers its requests: `approvers` (one group or a list) and what deciding them `require`s
    (SPEC sections 11 and 14), declared last by each (so that they stay last in the stored content)."""

    @model_validator(mode="after")
    def _routing(self) -> "Routed":
        check_routing(getattr(self, "approvers"), self.routed_require)  # noqa: B009
        return self

    @property
    def routed_approvers(self) -> str | list[str] | None:
        return getattr(self, "approvers")  # noqa: B009

    @property
    def routed_require(self) -> Require | None:
        return getattr(self, "require")  # noqa: B009

    @property
    def routed_escalation(self) -> list[EscalationStep]:
        return getattr(self, "escalation")  # noqa: B009

    @property
    def routing_said(self) -> str:
        return routing_label(self)


# One group, or a list of 1 to MOST_GROUPS distinct groups; left out of the stored content when not given.
Approvers = Annotated[
    GroupName | Annotated[list[GroupName], Field(min_length=1, max_length=MOST_GROUPS)] | None,
    Field(default=None, exclude_if=lambda value: value is None),
]
Required = Annotated[Require | None, Field(default=None, exclude_if=lambda value: value is None)]


def joined(groups: list[str]) -> str:
    """The groups as a request stores them (`PendingRequest.approvers`): comma-joined, "" for anyone."""
    return ",".join(groups)


def stored_escalation(steps: list[EscalationStep]) -> list[dict[str, Any]] | None:
    """What a request keeps of its escalation: its steps in wire form, or None."""
    return [step.model_dump(by_alias=True, exclude_none=True) for step in steps] or None


def stored_require(require: Require | None) -> dict[str, Any] | None:
    """What a request keeps of its requirement: None when one answer decides it (no `require`, or one approval with
    self-approval allowed), else its wire form with every field."""
    if require is None:
        return None
    return require.model_dump(by_alias=True)


def routing_label(routed: Routed) -> str:
    """Who answers, as the agent page says it: "sre or security · 2 approvals (one from each of sre, security), not
    the requester"."""
    groups = " or ".join(approver_list(routed.routed_approvers)) or "any operator"
    require = routed.routed_require
    steps = [
        f"after {step.after} {'to ' + ', '.join(step.to) if step.to else step.then}"
        for step in routed.routed_escalation
    ]
    escalation = f" · escalates {'; '.join(steps)}" if steps else ""
    if require is None:
        return groups + escalation
    said = [f"{require.approvals} approval{'s' if require.approvals != 1 else ''}"]
    if require.from_each:
        said[0] += f" (one from each of {', '.join(require.from_each)})"
    if not require.self_approval:
        said.append("not the requester")
    return f"{groups} · {', '.join(said)}{escalation}"


@dataclass(frozen=True)
class Routing:
    """What a request stores of its routing (`PendingRequest.approvers`, `require`, `escalation`)."""

    approvers: str = ""
    require: dict[str, Any] | None = None
    escalation: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, routed: list[Routed]) -> "Routing":
        """From what routes a request, most specific first: each part from the first that says it."""
        return cls(
            joined(next((approver_list(r.routed_approvers) for r in routed if r.routed_approvers), [])),
            stored_require(next((r.routed_require for r in routed if r.routed_require is not None), None)),
            stored_escalation(next((r.routed_escalation for r in routed if r.routed_escalation), [])),
        )


def needs_several(require: dict[str, Any] | None) -> bool:
    """Whether a stored requirement takes more than one person's approval: no remembered rule may stand for it."""
    return require is not None and (int(require.get("approvals", 1)) > 1 or bool(require.get("fromEach")))


def self_approval(require: dict[str, Any] | None, requested_by_id: Any, *people: Any) -> bool:
    """Whether an approval by `people` (user ids: who answers, and whom they stand in for) is one the stored
    requirement refuses: one of them asked for the request, and it separates duties (SPEC section 14)."""
    if require is None or require.get("selfApproval") or requested_by_id is None:
        return False
    return requested_by_id in people


def next_step_at(steps: list[dict[str, Any]] | None, opened_at: Any, step: int) -> Any:
    """When step `step` of a request's stored escalation is due (from its opening); None when it has no such step."""
    if not steps or step >= len(steps) or opened_at is None:
        return None
    return opened_at + parse_duration(steps[step]["after"])
