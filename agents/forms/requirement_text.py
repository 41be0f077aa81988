"""A routing's requirement and escalation (SPEC section 14) as the agent form's two short inputs read and write
them: "2 from sre, security" (and ", requester may approve") and "15m to sre-leads; 1h deny"."""

import re
from typing import Any

from console.rows import Row

_REQUIRE = re.compile(
    r"^(?P<n>\d{1,2})(?:\s+from\s+(?P<groups>[a-z0-9][a-z0-9_, -]*?))?(?P<self>\s*,\s*requester may approve)?$"
)
_STEP = re.compile(r"^(?P<after>\S+)\s+(?:to\s+(?P<to>[a-z0-9][a-z0-9_, -]*)|(?P<then>deny|expire|approve))$")
REQUIRE_HELP = 'How many approve, e.g. "2" or "2 from sre, security"; add ", requester may approve" to allow it.'
ESCALATION_HELP = 'Steps after the opening, e.g. "15m to sre-leads; 1h deny" (then: deny, expire or approve).'


def _groups(text: str) -> list[str]:
    return [group.strip() for group in text.split(",") if group.strip()]


def require_text(require: dict[str, Any] | None) -> str:
    if not require:
        return ""
    said = str(require.get("approvals", 1))
    if require.get("fromEach"):
        said += " from " + ", ".join(require["fromEach"])
    return said + (", requester may approve" if require.get("selfApproval") else "")


def escalation_text(steps: list[dict[str, Any]] | None) -> str:
    return "; ".join(
        f"{s['after']} to {', '.join(s['to'])}" if s.get("to") else f"{s['after']} {s['then']}" for s in steps or []
    )


def read_require(text: str) -> dict[str, Any] | None:
    """The wire `require` of the input's text (None when empty); ValueError saying how to write it."""
    if not text:
        return None
    found = _REQUIRE.match(" ".join(text.split()))
    if found is None:
        raise ValueError(f"Not a requirement: {REQUIRE_HELP}")
    require: dict[str, Any] = {"approvals": int(found["n"])}
    if found["groups"]:
        require["fromEach"] = _groups(found["groups"])
    if found["self"]:
        require["selfApproval"] = True
    return require


def read_escalation(text: str) -> list[dict[str, Any]] | None:
    """The wire `escalation` of the input's text (None when empty); ValueError naming the step it cannot read."""
    steps: list[dict[str, Any]] = []
    for said in (part.strip() for part in text.split(";")):
        if not said:
            continue
        found = _STEP.match(" ".join(said.split()))
        if found is None:
            raise ValueError(f"Not a step: “{said}”. {ESCALATION_HELP}")
        step = {"after": found["after"]}
        steps.append(step | ({"to": _groups(found["to"])} if found["to"] else {"then": found["then"]}))
    return steps or None


def with_approvers(item: dict[str, Any], row: Row) -> dict[str, Any]:
    """A tool's or server's wire item with the row's approver group, when one is chosen, and its requirement and
    escalation."""
    return with_requirements(item | {"approvers": row.values["approvers"]} if row.values["approvers"] else item, row)


def with_requirements(item: dict[str, Any], row: Row) -> dict[str, Any]:
    """`item` with the row's `require` and `escalation` as its two inputs say them (SPEC section 14)."""
    return said_requirements(item, row.values, row.errors, "")


def said_requirements(
    item: dict[str, Any], values: dict[str, str], errors: dict[str, str], prefix: str
) -> dict[str, Any]:
    """`item` with `require` and `escalation` as the inputs `<prefix>require` and `<prefix>escalation` of `values`
    say them; an input that does not read is an error beside it (in `errors`)."""
    for name, read in (("require", read_require), ("escalation", read_escalation)):
        try:
            said = read(values[prefix + name])
        except ValueError as error:
            errors[prefix + name] = str(error)
            continue
        if said is not None:
            item[name] = said
    return item
