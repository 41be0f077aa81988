"""The installation's receipt key, the signed chain heads, and verifying a chain (SPEC section 13).

The key is an Ed25519 private key in `RECEIPT_SIGNING_KEY_FILE` (PEM), made on first use; the heads it signed are
appended to `RECEIPT_HEADS_FILE`. Both are this user's alone (files 0600 in a folder made 0700), outside the data
folder by default, so a copy of the database or of the data folder is not the key. Every serving process signs each
tenant's chain head that moved since its last signature (`sign_heads`, every `RECEIPT_SIGN_SECONDS`);
`verify_tenant` and `verify_file` recompute a chain from the database or from an export and check every signature
with the public key; a chain whose end no signed head covers fails unless the caller accepts it unsigned.
docs/security.md says what that proves and what it cannot.
"""

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from approvals.receipts import ChainSignature, Receipt, ReceiptHead, digest, genesis, signed_head
from console.models import Tenant

# --- verification -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Broken:
    """The first receipt of a chain that does not verify, and why. `unsigned`: it verifies but no signed chain
    head covers it (`verify_receipts --allow-unsigned` accepts that)."""

    sequence: int
    receipt_id: str
    why: str
    unsigned: bool = False

    def __str__(self) -> str:
        return f"receipt {self.receipt_id} (#{self.sequence}): {self.why}"


# The columns copied out of a receipt's body for filtering, paging and finding a request's receipt, and the
# body's names for them: a column edited alone would hide a receipt from a filter or show it under another.
COLUMNS = {
    "sequence": "sequence",
    "request_id": "requestId",
    "agent": "agent",
    "tool_name": "toolName",
    "result": "result",
    "at": "at",
}


def _column_problem(body: Mapping[str, Any], columns: Mapping[str, Any]) -> str | None:
    for column, name in COLUMNS.items():
        said, stored = body.get(name), columns[column]
        if column == "at":
            agrees = isinstance(said, str) and isinstance(stored, datetime) and _moment(said) == stored
        else:
            agrees = str(stored or "") == str(said or "")
        if not agrees:
            return f"its {column} column says {_shown(stored)} where the receipt says {_shown(said)}"
    return None


def _moment(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _shown(value: Any) -> str:
    return repr(value.isoformat() if isinstance(value, datetime) else value)


def verify_chain(
    tenant_id: Any,
    rows: Iterable[tuple[Mapping[str, Any], str, Mapping[str, Any] | None]],
    signed: Mapping[int, str],
    *,
    after: tuple[int, str] | None = None,
) -> tuple[int, Broken | None]:
    """Walk a tenant's chain in order and say how many receipts it has and the first that breaks it (None when
    it holds). `rows`: each receipt's body, stored hash and filter columns (None from an export); `signed`: the
    hash each verified signature names by position. The chain's end must be covered by a signed head: a receipt
    after the newest one is only as good as whoever could write the database, whatever its `at` says (the
    signature covers the hashes, each hash covers its `at`); the first such receipt comes back `unsigned`.
    Constant memory: it keeps the last hash. `after`: the position and hash the rows follow (the signer checks
    only what it has not signed yet); the count is of the rows walked."""
    expected_prev, previous, count, offset = genesis(tenant_id), "the start of the chain", 0, 0
    if after is not None:
        offset, expected_prev = after
        previous = f"the signed receipt #{offset}"
    covered = max(signed, default=0)
    first_unsigned = ""
    for body, stored, columns in rows:
        count += 1
        position, sequence, rid = offset + count, body.get("sequence"), str(body.get("receiptId"))
        if sequence != position:
            why = f"it is at position {position} but says #{sequence}: one before it was deleted, or it was inserted"
            return count, Broken(position, rid, why)
        if body.get("prevHash") != expected_prev:
            why = f"it does not follow {previous}: one of the two was rewritten, or a receipt between them deleted"
            return count, Broken(position, rid, why)
        if digest(body) != stored:
            return count, Broken(position, rid, "its content was edited: its hash does not match it")
        problem = _column_problem(body, columns) if columns is not None else None
        if problem is not None:
            return count, Broken(position, rid, f"{problem}: the column was edited")
        if position in signed and signed[position] != stored:
            why = "the signed chain head at this position names another hash: the chain was rewritten from here"
            return count, Broken(position, rid, why)
        expected_prev, previous = stored, f"receipt {rid} (#{position})"
        if position == covered + 1:
            first_unsigned = rid
    end = offset + count
    if end > covered:
        newest = f"the newest signed head is #{covered}" if covered else "the chain has no signed head"
        why = f"no signed chain head covers it or what follows, up to #{end} ({newest})"
        return count, Broken(covered + 1, first_unsigned or f"#{covered + 1}", why, unsigned=True)
    return count, None


logger = logging.getLogger(__name__)

# How many receipts a verification reads from the database at once (it holds no more).
CHUNK = 5_000


def key_path() -> Path:
    return Path(settings.RECEIPT_SIGNING_KEY_FILE)


def signing_key() -> Ed25519PrivateKey:
    """The installation's key, made (and written, readable by this user only) when there is none yet. Two
    processes starting at once make one key: the file is created exclusively, the loser reads the winner's."""
    path = key_path()
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        made = Ed25519PrivateKey.generate()
        pem = made.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(descriptor, "wb") as file:
                file.write(pem)
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return loaded


def public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """A public key from PEM (`--public-key`), or the public half of a private key file."""
    try:
        loaded: Any = serialization.load_pem_public_key(pem)
    except ValueError:
        loaded = serialization.load_pem_private_key(pem, password=None).public_key()
    if not isinstance(loaded, Ed25519PublicKey):
        raise ValueError("not an Ed25519 key")
    return loaded


def key_id(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def heads_path() -> Path:
    return Path(settings.RECEIPT_HEADS_FILE)


def sign_heads() -> list[ChainSignature]:
    """Sign every tenant's chain head that moved since its last signature (the periodic signer's step). A head is
    signed only once the receipts since the last signature verify and follow it: history already signed that was
    rewritten in the database is never signed again (it is logged, and `verify_receipts` names it). Each signature
    is also appended to `RECEIPT_HEADS_FILE`, outside the database, so deleting the signatures' rows hides nothing
    from a verification on this machine."""
    of_tenant = ChainSignature.objects.filter(tenant=OuterRef("tenant")).order_by("-sequence")
    heads = ReceiptHead.objects.annotate(
        signed=Subquery(of_tenant.values("sequence")[:1]), signed_hash=Subquery(of_tenant.values("hash")[:1])
    ).filter(sequence__gt=0)
    moved = [head for head in heads if head.signed is None or head.signed < head.sequence]
    if not moved:
        return []
    key = signing_key()
    kid, now = key_id(key.public_key()), timezone.now()
    signatures = []
    for head in moved:
        broken = _unsigned_part(head)
        if broken is not None:
            logger.error("not signing the receipts of tenant %s: %s", head.tenant_id, broken)
            continue
        signed = key.sign(signed_head(head.tenant_id, head.sequence, head.hash)).hex()
        signatures.append(
            ChainSignature(
                tenant_id=head.tenant_id,
                sequence=head.sequence,
                hash=head.hash,
                key_id=kid,
                signature=signed,
                signed_at=now,
            )
        )
    if signatures:
        _keep_heads([signature.wire() for signature in signatures])
    return ChainSignature.objects.bulk_create(signatures)


def _keep_heads(heads: list[dict[str, Any]]) -> None:
    """Append `heads` to the heads file, made readable by this user only (a file an older version made 0644 is
    narrowed on the next append)."""
    path = heads_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(descriptor, "a", encoding="utf-8") as file:
        if os.fstat(descriptor).st_mode & 0o077:
            os.fchmod(descriptor, 0o600)
        file.writelines(_line(head) for head in heads)


def _unsigned_part(head: Any) -> Broken | None:
    """Whether the receipts after the last signed one verify, follow it and end at the head."""
    start = head.signed or 0
    receipts = Receipt.objects.filter(tenant_id=head.tenant_id, sequence__gt=start, sequence__lte=head.sequence)
    rows = receipts.order_by("sequence").values_list("body", "hash", *COLUMNS)
    chain = ((body, hash_, dict(zip(COLUMNS, columns, strict=True))) for body, hash_, *columns in rows.iterator())
    after = (start, head.signed_hash) if head.signed is not None else None
    count, broken = verify_chain(head.tenant_id, chain, {head.sequence: head.hash}, after=after)
    if broken is None and count != head.sequence - start:
        broken = Broken(start + count + 1, f"#{start + count + 1}", "the head names receipts that are missing")
    return broken


@dataclass
class Verified:
    """What verifying one tenant's chain found. `unsigned`: how many receipts at its end no signed head covers,
    accepted because the caller said so (else `broken` names the first)."""

    tenant: str
    receipts: int
    signatures: int
    broken: Broken | None
    unsigned: int = 0

    def __str__(self) -> str:
        if self.broken is not None and self.broken.unsigned:
            return (
                f"{self.tenant}: FAILED at {self.broken}. A serving process signs the heads every"
                " RECEIPT_SIGN_SECONDS: verify again once it has, or pass --allow-unsigned to accept an unsigned end"
                " (it proves nothing against whoever could write the database)"
            )
        if self.broken is not None:
            return f"{self.tenant}: FAILED at {self.broken}"
        said = f"{self.tenant}: {self.receipts} receipts verified, {self.signatures} signed heads"
        if self.unsigned:
            first = self.receipts - self.unsigned + 1
            said += (
                f"; UNSIGNED: the last {self.unsigned} (#{first} to #{self.receipts}) are covered by no signed head"
                " (accepted: --allow-unsigned)"
            )
        return said


def _verified(
    slug: str, count: int, signed: Mapping[int, str], broken: Broken | None, *, allow_unsigned: bool
) -> Verified:
    unsigned = max(0, count - max(signed, default=0))
    if broken is not None and broken.unsigned and allow_unsigned:
        return Verified(slug, count, len(signed), None, unsigned)
    return Verified(slug, count, len(signed), broken)


def _checked_signatures(
    tenant_id: str, signatures: Iterable[Mapping[str, Any]], public_key: Ed25519PublicKey
) -> tuple[dict[int, str], Broken | None]:
    """The hash each signature of the tenant names by position, once each verifies, together with the heads this
    machine's signer kept in `RECEIPT_HEADS_FILE`; else the first that does not verify."""
    signed: dict[int, str] = {}
    for head in [*signatures, *_kept_heads(tenant_id)]:
        sequence, hash_ = int(head["sequence"]), str(head["hash"])
        try:
            public_key.verify(bytes.fromhex(str(head["signature"])), signed_head(tenant_id, sequence, hash_))
        except (InvalidSignature, ValueError):
            why = "the signature of the chain head at this position does not verify with the installation's key"
            return signed, Broken(sequence, f"head #{sequence}", why)
        if signed.setdefault(sequence, hash_) != hash_:
            return signed, Broken(sequence, f"head #{sequence}", "two signed heads name different hashes here")
    return signed, None


def _kept_heads(tenant_id: str) -> Iterator[Mapping[str, Any]]:
    """The tenant's heads in this machine's heads file, one line at a time (none when there is no file)."""
    try:
        file = heads_path().open(encoding="utf-8")
    except FileNotFoundError:
        return
    with file:
        for line in file:
            try:
                head = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash while appending
            if isinstance(head, dict) and head.get("tenant") == tenant_id:
                yield head


def verify_tenant(tenant: Tenant, public_key: Ed25519PublicKey, *, allow_unsigned: bool = False) -> Verified:
    """Recompute `tenant`'s chain from the database, reading it in chunks (constant memory). Its end must be
    covered by a signed head unless `allow_unsigned`."""
    tenant_id = str(tenant.pk)
    rows = ChainSignature.objects.filter(tenant=tenant).order_by("sequence").values("sequence", "hash", "signature")
    signed, bad = _checked_signatures(tenant_id, rows, public_key)
    if bad is not None:
        return Verified(tenant.slug, 0, len(signed), bad)
    fields = ("body", "hash", *COLUMNS)
    receipts = Receipt.objects.filter(tenant=tenant).order_by("sequence").values_list(*fields)

    def chain() -> Iterator[tuple[Mapping[str, Any], str, Mapping[str, Any]]]:
        for body, hash_, *columns in receipts.iterator(chunk_size=CHUNK):
            yield body, hash_, dict(zip(COLUMNS, columns, strict=True))

    count, broken = verify_chain(tenant_id, chain(), signed)
    if broken is None or broken.unsigned:  # an end deleted says more than an end unsigned
        head = ReceiptHead.objects.filter(tenant=tenant).values_list("sequence", flat=True).first() or 0
        top = max(signed, default=0)
        if head > count or top > count:
            said = max(head, top)
            why = f"the chain ends at #{count} but its head says #{said}: the newest receipts were deleted"
            broken = Broken(count + 1, f"#{count + 1}", why)
    return _verified(tenant.slug, count, signed, broken, allow_unsigned=allow_unsigned)


# --- exports ---------------------------------------------------------------------------------------------


def export_lines(tenant: Tenant, receipts: Iterable[Receipt]) -> Iterator[str]:
    """A chain as JSON Lines: a header naming the tenant, its signed heads, then one receipt a line. Only an
    export of the whole chain verifies (`verify_file`); a filtered one has gaps."""
    yield _line(
        {"receiptsOf": {"tenant": str(tenant.pk), "slug": tenant.slug, "exportedAt": timezone.now().isoformat()}}
    )
    for signature in ChainSignature.objects.filter(tenant=tenant).order_by("sequence").iterator(chunk_size=CHUNK):
        yield _line({"chainHead": signature.wire()})
    for receipt in receipts:
        yield _line(receipt.wire())


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


class UnreadableExport(Exception):
    pass


def verify_file(file: IO[str], public_key: Ed25519PublicKey, *, allow_unsigned: bool = False) -> Verified:
    """Recompute the chain of an export (`export_lines`), one line at a time, with its `chainHead` lines and the
    heads this machine's signer kept. Its end must be covered by a signed head unless `allow_unsigned`: an export
    whose heads were left out is a chain anyone could have written."""
    header = _read(next(file, ""), 1)
    if "receiptsOf" not in header:
        raise UnreadableExport("line 1 is not the header of a receipts export (`receiptsOf`)")
    tenant_id, slug = str(header["receiptsOf"]["tenant"]), str(header["receiptsOf"].get("slug") or "?")
    heads: list[dict[str, Any]] = []
    number, line = 1, next(file, "")
    while line:
        number += 1
        value = _read(line, number)
        if "chainHead" not in value:
            break
        heads.append(value["chainHead"])
        line = next(file, "")
    signed, bad = _checked_signatures(tenant_id, heads, public_key)
    if bad is not None:
        return Verified(slug, 0, len(signed), bad)

    def chain() -> Iterator[tuple[Mapping[str, Any], str, None]]:
        nonlocal number
        current = line
        while current:
            receipt = _read(current, number)
            stored = str(receipt.pop("hash", ""))
            yield receipt, stored, None
            number += 1
            current = next(file, "")

    count, broken = verify_chain(tenant_id, chain(), signed)
    if broken is None and max(signed, default=0) > count:
        why = f"the export ends at #{count} but a signed head names #{max(signed)}: receipts were left out"
        broken = Broken(count + 1, f"#{count + 1}", why)
    return _verified(slug, count, signed, broken, allow_unsigned=allow_unsigned)


def _read(line: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise UnreadableExport(f"line {number} is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise UnreadableExport(f"line {number} is not a JSON object")
    return value
