"""The wire of external agents' requests (SPEC section 12): what an agent that runs elsewhere sends to open one
(`OpenRequest`; a gateway's call names its tool, `AskedTool`), how opening one is refused (`RequestRefused`: the
kinds refuse their fields in `Kind.external_fields`), and the decision it waits for (`decision`), which any request
has once it is decided, hosted or external, in the request's JSON (`request_wire`, which a woken long poll is
answered with). The actions are `approvals.actions.external`; the routes `approvals.api.request_routes`.

It sits below the kinds (`approvals.push` reaches `request_wire` through `approvals.waiting`), so `decision` and
`approvals.receipts.result_kind` still say what each kind's answer means here, not in the kind."""

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from django.db.models import OuterRef, QuerySet, Subquery
from pydantic import Field, StrictBool, StrictInt

from agents.definitions import ExternalTool, WireModel
from agents.request_kinds import RequestKind
from agents.server_tools import CHOICE_MAX
from approvals.models import PendingRequest, Receipt, RequestStatus
from approvals.receipts import result_kind
from approvals.tallies import standing
from console.problems import Refused

# How long a request of an external agent may wait at most (SPEC section 12).
MAX_EXPIRES_IN = 30 * 24 * 3600

OpenKind = Literal["approval", "question", "input", "plan"]


@dataclass(frozen=True)
class JsonLimit:
    """How large a JSON value an agent sends may be: its compact UTF-8 `size` in bytes (over it: 413), and its
    shape (400): `nodes` (keys and items, all levels together), `depth` (levels of nesting), and the items of any
    `enum` list in it."""

    size: int
    nodes: int
    depth: int
    enum_items: int | None = None


# Each card is pushed to every open inbox and stored in several rows (the request, its events, its receipt): an
# agent may not make one of megabytes (issue 48), as a model may not (agents.server_tools.QUESTION_MAX and the rest).
ARGUMENTS_LIMIT = JsonLimit(size=256 * 1024, nodes=10_000, depth=32)
SCHEMA_LIMIT = JsonLimit(size=64 * 1024, nodes=2_000, depth=32, enum_items=500)
# What the agent reports its tool did (`POST /api/requests/{id}/outcome`): the run history shows it.
RESULT_LIMIT = ARGUMENTS_LIMIT


class TooLarge(Exception):
    """A JSON value over its limit: `status` 413 (bytes) or 400 (shape), `field` the wire name, `message` the
    limit."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.status, self.field, self.message = status, field, message


def check_size(value: Any, field: str, limit: JsonLimit) -> None:
    """Raise TooLarge when `value` is over `limit`. The shape is walked first, without recursion, and stops at the
    first container over a limit: a body of 400,000 keys costs little more to refuse than a small one."""
    nodes = 0
    stack: list[tuple[Any, int, str]] = [(value, 1, field)]
    while stack:
        item, depth, where = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if depth > limit.depth:
            raise TooLarge(400, field, f"is nested deeper than the limit of {limit.depth} levels (at {_cut(where)})")
        nodes += len(item)
        if nodes > limit.nodes:
            raise TooLarge(400, field, f"has more than the limit of {limit.nodes} keys and items")
        if isinstance(item, list):
            stack.extend((child, depth + 1, f"{where}[{i}]") for i, child in enumerate(item))
            continue
        enum = item.get("enum")
        if limit.enum_items is not None and isinstance(enum, list) and len(enum) > limit.enum_items:
            raise TooLarge(400, f"{_cut(where)}.enum", f"has {len(enum)} items, over the limit of {limit.enum_items}")
        stack.extend((child, depth + 1, f"{where}.{key}") for key, child in item.items())
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > limit.size:
        raise TooLarge(413, field, f"is {size} bytes as JSON, over the limit of {limit.size} bytes")


def _cut(path: str) -> str:
    return path if len(path) <= 200 else f"{path[:199]}…"


class RequestRefused(Refused):
    """A request of an external agent refused; nothing was changed. `status`, `code` and `detail` are the HTTP
    answer (`errors`: field -> message, for a 400)."""

    def __init__(self, status: int, code: str, detail: str, errors: dict[str, str] | None = None) -> None:
        super().__init__(code, detail, status)
        self.errors = errors


def invalid(field: str, message: str) -> RequestRefused:
    return RequestRefused(400, "invalid_request", "The request has invalid fields.", {field: message})


def too_large(over: TooLarge) -> RequestRefused:
    code = "content_too_large" if over.status == 413 else "content_too_complex"
    return RequestRefused(over.status, code, f"{over.field} {over.message}.", {over.field: over.message})


# A request's id in Airlock is its client's `requestId` seen from its tenant: the same id in two tenants is two
# requests, and no tenant can take (or learn of) an id another tenant's agent will use (issue 48). Never change
# it: the stored requests' ids were derived with it.
TENANT_IDS = uuid.UUID("5d0f1f9e-6a43-4c8e-9b39-2a8c3d7e41b6")


def stored_request_id(tenant_id: int, request_id: uuid.UUID) -> uuid.UUID:
    """The id under which the tenant's request of the client's `request_id` is stored, and the wire names it."""
    return uuid.uuid5(TENANT_IDS, f"{tenant_id}:{request_id}")


def request_ids(tenant_id: int, request_id: uuid.UUID) -> tuple[uuid.UUID, uuid.UUID]:
    """The ids a path's `request_id` may name in the tenant: a request's own id (as Airlock answers it, and every
    request opened before ids were derived), or the `requestId` its external agent sent."""
    return request_id, stored_request_id(tenant_id, request_id)


@dataclass(frozen=True)
class AskedTool:
    """The tool an approval asks to call, as the agent's definition and its server say: an external agent's
    declared tool (`ExternalTool`), or a gateway's MCP tool (`gateway.tools`): its name as the agent calls it, its
    description and parameters, its approval mode, the SDK's `permissionRequest` without arguments, and what
    the request keeps of it besides (`state`)."""

    name: str
    description: str
    parameters: dict[str, Any]
    approval: str
    permission: dict[str, Any]
    state: dict[str, Any]

    @classmethod
    def declared(cls, tool: ExternalTool, described: str | None) -> "AskedTool":
        permission = {"kind": "custom-tool", "toolName": tool.name, "toolDescription": described or tool.description}
        return cls(tool.name, tool.description, tool.parameters, tool.approval, permission, {})


class OpenRequest(WireModel):
    """`POST /api/agents/{name}/requests`: the fields of each kind as in SPEC sections 9 and 10."""

    request_id: uuid.UUID | None = Field(default=None, description="the idempotency key: the same id opens once")
    session_id: str | None = Field(default=None, min_length=1, max_length=200)
    kind: OpenKind = "approval"
    tool_name: str | None = Field(default=None, min_length=1, max_length=200)
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=200)
    arguments: dict[str, Any] | None = None
    description: str | None = Field(default=None, max_length=2000)
    question: str | None = Field(default=None, min_length=1, max_length=10_000)
    choices: list[Annotated[str, Field(max_length=CHOICE_MAX)]] | None = Field(default=None, max_length=50)
    allow_freeform: StrictBool | None = None
    message: str | None = Field(default=None, min_length=1, max_length=10_000)
    requested_schema: dict[str, Any] | None = None
    summary: str | None = Field(default=None, max_length=2000)
    plan_content: str | None = Field(default=None, max_length=100_000)
    expires_in: StrictInt | None = Field(default=None, ge=1, le=MAX_EXPIRES_IN)

    def digest(self) -> str:
        """The body as a retry must repeat it: the same id with another body is a conflict."""
        body = self.model_dump(mode="json", by_alias=True, exclude={"request_id"}, exclude_none=True)
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def decision(pending: PendingRequest) -> dict[str, Any] | None:
    """What became of `pending` once decided, as its agent reads it (SPEC section 12); None while it waits. An
    answer counts once stored, whether or not a run has carried it yet."""
    answer = pending.answer
    if answer is None and pending.status == RequestStatus.PENDING:
        return None
    who = pending.answered_by or pending.closed_by
    common = {
        "answeredBy": who.username if who is not None else None,
        "answeredAt": (pending.answered_at or pending.closed_at or pending.opened_at).isoformat(),
        "via": pending.answered_via or pending.status,
        "receiptId": _receipt_id(pending),
        "text": None,
        "json": None,
        "action": None,
        "arguments": None,
        # An away member's delegate answered (SPEC section 14).
        **({"onBehalfOf": pending.answered_for.username} if pending.answered_for is not None else {}),
    }
    if answer is None:  # closed unanswered: expired, cancelled, abandoned
        return {**common, "result": {"kind": "cancelled", "reason": pending.status}, "approved": False}
    if pending.kind == RequestKind.QUESTION:
        return {**common, "result": {"kind": "answered"}, "approved": True, "text": answer.get("text")}
    if pending.kind == RequestKind.INPUT:
        action = answer.get("action")
        accepted = action == "accept"
        return {
            **common,
            "result": {"kind": action},
            "approved": accepted,
            "action": action,
            "json": answer.get("content"),
        }
    approved = bool(answer.get("approved"))
    text = answer.get("reason") if pending.kind == RequestKind.APPROVAL else answer.get("text")
    # The kind as the request's receipt says it (`approved-for-session` for an answer remembered in the session).
    result: dict[str, Any] = {"kind": result_kind(pending.kind, pending.status, answer)}
    if result["kind"] == "denied-by-permission-request-hook":
        result["message"] = text
    elif result["kind"] == "denied-interactively-by-user":
        result["feedback"] = text
    override = answer.get("overrideArguments")
    arguments = override if override is not None else pending.arguments
    return {**common, "result": result, "approved": approved, "text": text, "arguments": arguments}


def with_receipt_ids(requests: QuerySet[PendingRequest]) -> QuerySet[PendingRequest]:
    """`requests` with their receipts' ids, read in the same query (a list's or a wake's)."""
    receipt = Receipt.objects.filter(request_id=OuterRef("pk")).values("id")[:1]
    return requests.annotate(receipt_id=Subquery(receipt))


def _receipt_id(pending: PendingRequest) -> str | None:
    """The decided request's receipt (SPEC section 13): as read with it (`with_receipt_ids`), else looked up."""
    found = getattr(pending, "receipt_id", None)
    if found is None and not hasattr(pending, "receipt_id"):
        found = Receipt.objects.filter(request_id=pending.pk).values_list("id", flat=True).first()
    return str(found) if found is not None else None


# What a request's JSON reads besides the request.
SHOWN = ("agent", "session", "answered_by", "answered_for", "claimed_by", "closed_by")


def request_wire(pending: PendingRequest) -> dict[str, Any]:
    gateway = (pending.engine_state or {}).get("gateway")
    return {
        **pending.wire(),
        "status": pending.status,
        "answered": pending.answer is not None,
        "agent": pending.agent.name,
        "runId": str(pending.run_id),
        "sessionId": pending.session.key,
        "openedAt": pending.opened_at.isoformat(),
        "closedAt": pending.closed_at.isoformat() if pending.closed_at else None,
        "answer": pending.answer,
        "answeredBy": pending.answered_by.username if pending.answered_by else None,
        # The away member a delegate answered for (SPEC section 14), as `decision` says it too.
        "onBehalfOf": pending.answered_for.username if pending.answered_for else None,
        "answeredAt": pending.answered_at.isoformat() if pending.answered_at else None,
        "claimedBy": pending.claimed_by.username if pending.claimed_by else None,
        "claimedAt": pending.claimed_at.isoformat() if pending.claimed_at else None,
        "approvers": pending.approvers_wire,
        "decision": decision(pending),
        # Where its quorum stands, who is still needed (SPEC section 14); beside `require` and `approvals`.
        **({"quorum": _quorum(pending)} if pending.require is not None else {}),
        # A gateway's call (SPEC section 15): the MCP server and its tool's own name, apart.
        **({"gateway": {"server": gateway["server"], "tool": gateway["tool"]}} if gateway else {}),
    }


def _quorum(pending: PendingRequest) -> dict[str, Any] | None:
    """`quorum` of a request with a requirement: where its count stands; None when one answer decides it."""
    tally = standing(pending)
    return tally.summary() if tally is not None else None
