"""Receipts (SPEC section 13): one per closed request, however it closed, chained per tenant.

A receipt says what was decided about exactly which arguments (`argumentsDigest`: the SHA-256 of their RFC 8785
canonical JSON), by whom and how they were signed in, and by which rule or policy at which version. Each one's
`hash` is the SHA-256 of its canonical JSON with the previous receipt's hash in it (`prevHash`; the first of a
tenant's chain names the tenant's `genesis`), so editing, deleting, inserting or reordering a row breaks the
chain (`verify`). An installation key signs each tenant's head (`approvals.signing`), so a chain rewritten whole
by someone holding the database but not the key fails too.

They are written by the one door of decisions (`approvals.decisions`): `record_closing` with the decision's own
write on its request, `record` for the calls of a hosted turn a rule approved or a policy denied without a request.
`record` takes the tenant's head under a row lock: the chain's
order is the order the decisions were committed in. This module sits below the models it describes: it reads them
duck-typed.
"""

import functools
import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import rfc8785
from django.db import connection, models, transaction

from console.json_bodies import LARGEST_NUMBER
from console.models import Tenant
from console.sql import Bound

# What the receipt's `decisionSource` says decided.
HUMAN, RULE, POLICY, APPROVAL_MODE, EXPIRY, CANCEL, ABANDON = (
    "human",
    "rule",
    "policy",
    "approval_mode",
    "expiry",
    "cancel",
    "abandon",
)
SYSTEM = "system"
ESCALATION = "escalation"  # a step of the request's escalation ended it (SPEC section 14)

# Integers JSON readers keep exactly (I-JSON, RFC 7493): RFC 8785 canonicalizes numbers as IEEE doubles.
_SAFE_INTEGER = 2**53 - 1


def _as_ijson(value: Any) -> Any:
    """`value` as RFC 8785 reads it: an integer past 2^53 is the double every JSON reader of ECMAScript makes of
    it (RFC 8785 section 3.2.2.3), which the library refuses to guess. One past the largest double, which no such
    reader holds (the API refuses them: `console.json_bodies.unstorable`; a row stored before it did keeps one),
    is its decimal text."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > LARGEST_NUMBER:
            return str(value)
        return float(value) if abs(value) > _SAFE_INTEGER else value
    if isinstance(value, dict):
        return {str(key): _as_ijson(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_ijson(item) for item in value]
    return value


def canonical(value: Any) -> bytes:
    """The RFC 8785 (JCS) canonical JSON of `value`."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        return rfc8785.dumps(_as_ijson(value))


def digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of `value`: a call's arguments, a receipt."""
    return hashlib.sha256(canonical(value)).hexdigest()


def genesis(tenant_id: Any) -> str:
    """The `prevHash` of a tenant's first receipt: binds the chain to its tenant (a chain copied into another
    tenant does not verify)."""
    return hashlib.sha256(f"airlock-receipts:{tenant_id}".encode()).hexdigest()


class Receipt(models.Model):
    """One decision, as hashed into its tenant's chain. `body` is the receipt without its `hash`; the columns
    beside it are copies for filtering (verification checks they agree with the body)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="receipts")
    sequence = models.PositiveBigIntegerField()
    # Not a foreign key: the receipt outlives its request, and the calls a rule approved in a hosted turn have
    # a request id of their own (their events') without a request.
    request_id = models.UUIDField(unique=True)
    agent = models.CharField(max_length=63)
    tool_name = models.CharField(max_length=200, blank=True)
    result = models.CharField(max_length=64)
    at = models.DateTimeField()
    body = models.JSONField()
    hash = models.CharField(max_length=64)

    class Meta:
        app_label = "approvals"
        constraints = [models.UniqueConstraint(fields=["tenant", "sequence"], name="receipt_chain_position")]
        indexes = [
            models.Index(fields=["tenant", "agent", "sequence"], name="receipt_agent"),
            models.Index(fields=["tenant", "at"], name="receipt_at"),
        ]

    def __str__(self) -> str:
        return f"receipt {self.sequence} of {self.tenant_id}"

    def wire(self) -> dict[str, Any]:
        return {**self.body, "hash": self.hash}


class ReceiptHead(models.Model):
    """The end of a tenant's chain: the position and hash the next receipt follows (locked while writing)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True, related_name="+")
    sequence = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64)

    class Meta:
        app_label = "approvals"

    def __str__(self) -> str:
        return f"receipt head {self.sequence} of {self.tenant_id}"


class ChainSignature(models.Model):
    """The installation key's Ed25519 signature of a tenant's chain head (`approvals.signing`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    sequence = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    # The public key's fingerprint (SHA-256 of its raw bytes, hex), so a rotated key's signatures are told apart.
    key_id = models.CharField(max_length=64)
    signature = models.CharField(max_length=128)
    signed_at = models.DateTimeField()

    class Meta:
        app_label = "approvals"
        indexes = [models.Index(fields=["tenant", "sequence"], name="chain_signature_position")]

    def __str__(self) -> str:
        return f"signature of receipt {self.sequence} of {self.tenant_id}"

    def wire(self) -> dict[str, Any]:
        return {
            "tenant": str(self.tenant_id),
            "sequence": self.sequence,
            "hash": self.hash,
            "keyId": self.key_id,
            "signature": self.signature,
            "signedAt": self.signed_at.isoformat(),
        }


def signed_head(tenant_id: Any, sequence: int, hash_: str) -> bytes:
    """What a chain signature signs: the tenant, the position and the hash of its receipt there."""
    return canonical({"tenant": str(tenant_id), "sequence": sequence, "hash": hash_})


# --- what a receipt says --------------------------------------------------------------------------------


def result_kind(kind: str, status: str, answer: Mapping[str, Any] | None) -> str:
    """What became of a request, in the words of SPEC section 10: an approval's (and a plan's) permission result
    kind; an input's action; `answered` for a question, a client tool's result and a continuation; `cancelled` for
    a request closed unanswered (its status says why)."""
    if answer is None:
        return "cancelled"
    if kind == "input":
        return str(answer.get("action") or "cancel")
    if kind in ("question", "client_tool"):
        return "answered"
    if answer.get("approved"):
        return "approved-for-session" if answer.get("remember") == "session" else "approved"
    if answer.get("deniedBy") == "policy":
        return "denied-by-permission-request-hook"
    return "denied-interactively-by-user"


@dataclass(frozen=True)
class Decider:
    """Who decided, as a receipt says it: `source` (`decisionSource`), `by` (`answeredBy`) and `auth` (`authMethod`);
    made by `approvals.decisions.Actor`."""

    source: str
    by: str
    auth: str | None = None
    # The away member the person answered for, as their delegate (SPEC section 14; `onBehalfOf`).
    on_behalf_of: str | None = None


def _digests(arguments: Any, override: Any) -> tuple[str, str | None]:
    ran = override if isinstance(override, dict) else arguments
    ran_digest = digest(ran if ran is not None else {})
    original = digest(arguments if arguments is not None else {})
    return ran_digest, (original if original != ran_digest else None)


def _facts(
    request_id: str,
    run: Any,
    session: Any,
    agent: str,
    kind: str,
    tool_name: str,
    digests: tuple[str, str | None],
    **said: Any,
) -> dict[str, Any]:
    """A receipt without its place in the chain: `said` carries result, reason, the decider and at."""
    decider: Decider = said.pop("decider")
    return {
        "requestId": request_id,
        "runId": str(run.id),
        "sessionId": session.key if session is not None else None,
        "agent": agent,
        "definitionVersion": run.version.number,
        "kind": kind,
        "toolName": tool_name or None,
        "argumentsDigest": digests[0],
        "originalArgumentsDigest": digests[1],
        "result": said["result"],
        "reason": said["reason"],
        "decisionSource": decider.source,
        "answeredBy": decider.by,
        "authMethod": decider.auth,
        **({"onBehalfOf": decider.on_behalf_of} if decider.on_behalf_of else {}),
        "at": said["at"].isoformat(),
    }


def request_facts(pending: Any, at: datetime, decider: Decider) -> dict[str, Any]:
    """The receipt of a request just closed (`pending`, with its run's version and session, and its agent) by
    `decider`, without its place in the chain."""
    answer = pending.answer
    facts = _facts(
        str(pending.id),
        pending.run,
        pending.session,
        pending.agent.name,
        pending.kind,
        pending.tool_name,
        _digests(pending.arguments, (answer or {}).get("overrideArguments")),
        result=result_kind(pending.kind, pending.status, answer),
        reason=pending.status if answer is None else _said(answer.get("reason")),
        decider=decider,
        at=at,
    )
    if answer is not None and answer.get("approvals"):
        facts["approvals"] = answer["approvals"]  # every approval that counted toward its quorum (SPEC section 14)
    return facts


def _said(reason: Any) -> str | None:
    """The reason an answer gave (a person's words on a denial, a policy's on its verdict), as its receipt keeps it."""
    return reason if isinstance(reason, str) and reason else None


def call_facts(
    run: Any, agent: str, request_id: str, tool_name: str, arguments: Any, decider: Decider, result: str, at: datetime
) -> dict[str, Any]:
    """The receipt of a call a hosted turn decided without a request: a rule approved it, a policy denied it."""
    session = run.session if run.session_id is not None else None
    digests = _digests(arguments, None)
    return _facts(
        request_id,
        run,
        session,
        agent,
        "approval",
        tool_name,
        digests,
        result=result,
        reason=None,
        decider=decider,
        at=at,
    )


# --- the chain ----------------------------------------------------------------------------------------


def record(tenant_id: Any, facts: list[dict[str, Any]]) -> list[Receipt]:
    """Append receipts for `facts` (in order) to the tenant's chain, in the caller's transaction (one is opened
    when there is none). The head's row lock is held until it commits: take it after the requests' own locks
    (the closings do), so two closings never wait on each other in opposite orders."""
    if not facts:
        return []
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql" and len(facts) == 1:
            _, one = _append_in_one_statement(tenant_id, facts[0])
            if one is not None:
                return [one]
        head = ReceiptHead.objects.select_for_update().filter(tenant_id=tenant_id).first()
        if head is None:  # made with its tenant (`approvals.models`); a tenant from before receipts gets it now
            head, _ = ReceiptHead.objects.select_for_update().get_or_create(
                tenant_id=tenant_id, defaults={"hash": genesis(tenant_id)}
            )
        written = []
        for fact in facts:
            body = {**fact, "receiptId": str(uuid.uuid4()), "sequence": head.sequence + 1, "prevHash": head.hash}
            receipt = _receipt(tenant_id, body, digest(body))
            head.sequence, head.hash = receipt.sequence, receipt.hash
            written.append(receipt)
        Receipt.objects.bulk_create(written)
        head.save(update_fields=["sequence", "hash"])
    return written


def _receipt(tenant_id: Any, body: dict[str, Any], hash_: str) -> Receipt:
    return Receipt(
        id=body["receiptId"],
        tenant_id=tenant_id,
        sequence=body["sequence"],
        request_id=body["requestId"],
        agent=body["agent"],
        tool_name=body["toolName"] or "",
        result=body["result"],
        at=datetime.fromisoformat(body["at"]),
        body=body,
        hash=hash_,
    )


@functools.cache
def _receipt_statement() -> tuple[list[Any], str, str, str, str]:
    """What `_append_in_one_statement` names of the tables (PostgreSQL's): the receipt's fields given as values, its
    columns (those, then the sequence, body and hash the statement computes), the values' casts and both tables."""
    fields = [field for field in Receipt._meta.concrete_fields if field.name not in ("sequence", "body", "hash")]
    last = [
        field for name in ("sequence", "body", "hash") for field in Receipt._meta.concrete_fields if field.name == name
    ]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in [*fields, *last])
    typed = ", ".join(f"%s::{field.cast_db_type(connection)}" for field in fields)
    heads, receipts = (quote(model._meta.db_table) for model in (ReceiptHead, Receipt))
    return fields, columns, typed, heads, receipts


def _append_in_one_statement(
    tenant_id: Any, fact: dict[str, Any], guard: tuple[str, Any] | None = None
) -> tuple[bool, Receipt | None]:
    """One receipt appended in one round trip, on the hot path of every answer (bench/receipts_answer.py): the
    head's locked read, the receipt's hash, its row and the head's move, in one PostgreSQL statement. The hash is
    SHA-256 over the receipt's canonical JSON as `digest` makes it, computed in the database: the canonical text
    is made here with stand-ins for the two values only the locked head knows (`sequence`, `prevHash`) and
    spliced around them. With a `guard` (an UPDATE's SQL and parameters: the closing the receipt is of), the
    receipt is written only when the guard wrote a row, the guard's row locked before the head's (in the order
    every closing takes them). Whether the guard wrote (True without one), and the receipt: None when the guard
    wrote nothing or the tenant has no head yet (no receipt written)."""
    mark = uuid.uuid4().hex
    stand_ins = {"sequence": f"seq{mark}", "prevHash": f"prev{mark}"}
    text = canonical({**fact, "receiptId": str(uuid.uuid4()), **stand_ins}).decode()
    # Canonical JSON puts each stand-in once, as a string; the sequence goes back in as a number (no quotes).
    cuts = sorted((text.index(f'"{value}"'), key, value) for key, value in stand_ins.items())
    pieces, spliced, at = [], [], 0
    for index, key, value in cuts:
        pieces.append(text[at:index] + ("" if key == "sequence" else '"'))
        spliced.append("(old.sequence + 1)::text" if key == "sequence" else "old.hash")
        at = index + len(value) + 2 - (0 if key == "sequence" else 1)
    pieces.append(text[at:])
    body = {key: value for key, value in json.loads(text).items() if key not in stand_ins}
    hashed = " || ".join(f"%s || {part}" for part in spliced) + " || %s"
    fields, columns, typed, heads, receipts = _receipt_statement()
    receipt = _receipt(tenant_id, {**body, "sequence": 0}, "")
    values = [field.get_db_prep_save(getattr(receipt, field.attname), connection) for field in fields]
    guarded, guard_params = (f"guard AS ({guard[0]} RETURNING 1), ", list(guard[1])) if guard else ("", [])
    written = (
        f"INSERT INTO {receipts} ({columns}) SELECT {typed}, new.sequence,"
        f" %s::jsonb || jsonb_build_object('sequence', new.sequence, 'prevHash', new.prev), new.hash FROM new"
        f" RETURNING sequence, hash, body->>'prevHash' AS prev"
    )
    sql = (
        f"WITH {guarded}old AS (SELECT sequence, hash FROM {heads} WHERE tenant_id = %s"
        f"{' AND EXISTS (SELECT 1 FROM guard)' if guard else ''} FOR UPDATE),"
        f" new AS (SELECT old.sequence + 1 AS sequence, old.hash AS prev,"
        f" encode(sha256(convert_to({hashed}, 'UTF8')), 'hex') AS hash FROM old),"
        f" moved AS (UPDATE {heads} SET sequence = new.sequence, hash = new.hash FROM new WHERE tenant_id = %s)"
    )
    if guard:  # one row whatever was written: whether the guard wrote, and the receipt when it was
        sql += (
            f", written AS ({written}) SELECT written.sequence, written.hash, written.prev,"
            f" EXISTS (SELECT 1 FROM guard) FROM (SELECT 1) AS one LEFT JOIN written ON true"
        )
    else:
        sql += f" {written}, true"
    params = [*guard_params, tenant_id, *pieces, tenant_id, *values, json.dumps(body)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:  # no head (without a guard)
        return True, None
    sequence, hash_, prev, wrote = row
    if sequence is None:  # the guard wrote nothing, or no head
        return wrote, None
    return True, _receipt(tenant_id, {**body, "sequence": sequence, "prevHash": prev}, hash_)


def record_closing(closing: Bound, closed: Any, at: datetime, decider: Decider) -> bool:
    """`closing`, the conditional write that answers or closes one request, and when it wrote a row the receipt of
    the request as that write leaves it (`closed`), in the caller's transaction (one is opened when there is none);
    on PostgreSQL in one statement. False, and nothing written, when `closing` found nothing (another answer or
    closing came first)."""
    fact = request_facts(closed, at, decider)
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql":
            wrote, receipt = _append_in_one_statement(closed.tenant_id, fact, (closing.sql, closing.params))
            if wrote and receipt is None:  # no head yet
                record(closed.tenant_id, [fact])
            return wrote
        if not closing.run():
            return False
        record(closed.tenant_id, [fact])
    return True
