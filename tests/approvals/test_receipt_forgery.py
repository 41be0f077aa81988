"""Forged receipts (SPEC section 13, issue 48 item 7): a chain or an export whose end no signed head covers fails
`verify_receipts` unless it is told `--allow-unsigned`, whatever its receipts' `at` say; the heads file trimmed on
the host and a filter column edited alone are caught; the key and the heads live outside the data folder, this
user's alone, as do the database and the mail the app writes."""

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from approvals.receipts import ChainSignature, Receipt, ReceiptHead, digest, genesis
from approvals.signing import public_pem, sign_heads, signing_key
from console.env import EnvError, env_file
from tests.approvals.test_receipts import verify
from tests.approvals.test_respond_api import approve, ask
from tests.conftest import Persona
from tests.console.test_settings import run_python
from tests.helpers import make_agent

pytestmark = pytest.mark.django_db

DENIED = "denied-interactively-by-user"


@pytest.fixture(autouse=True)
def keys(settings, tmp_path) -> Path:
    """This installation's key folder, beside its data folder as the default puts it."""
    folder = tmp_path / "data-keys"
    settings.RECEIPT_SIGNING_KEY_FILE = str(folder / "receipt-signing.key")
    settings.RECEIPT_HEADS_FILE = str(folder / "receipt-heads.jsonl")
    return folder


def decide(persona: Persona, count: int, prefix: str = "d") -> None:
    for index in range(count):
        approve(persona, ask(persona, session=f"{prefix}{index}"))


@pytest.fixture
def fresh(operator, admin) -> list[Receipt]:
    """Five approvals decided a moment ago, the head signed."""
    make_agent(admin)
    decide(operator, 5)
    assert len(sign_heads()) == 1
    return list(Receipt.objects.order_by("sequence"))


@pytest.fixture
def history(operator, admin) -> list[Receipt]:
    """Five approvals decided over an hour, the head signed."""
    make_agent(admin)
    decide(operator, 5)
    _rechain(operator.tenant.pk, lambda body, n: {**body, "at": _at(n * 15)})
    assert len(sign_heads()) == 1
    return list(Receipt.objects.order_by("sequence"))


def _at(minutes: int) -> str:
    return (datetime(2026, 12, 1, 9, tzinfo=UTC) + timedelta(minutes=minutes)).isoformat()


def _rechain(tenant_id: Any, change: Any) -> None:
    """Rewrite every receipt of the tenant in the database with `change(body, index)` and rehash the chain, its
    head and its filter columns: what whoever holds the database, but not the key, can do."""
    previous = genesis(tenant_id)
    for index, receipt in enumerate(Receipt.objects.filter(tenant_id=tenant_id).order_by("sequence")):
        body = {**change(receipt.body, index), "prevHash": previous}
        receipt.body, receipt.hash = body, digest(body)
        receipt.result, receipt.at = body["result"], datetime.fromisoformat(body["at"])
        receipt.save(update_fields=["body", "hash", "result", "at"])
        previous = receipt.hash
    ReceiptHead.objects.filter(tenant_id=tenant_id).update(hash=previous)


def _forged_export(lines: list[str], change: Any) -> list[str]:
    """An export's receipts rewritten with `change(receipt, index)` and rehashed, its header kept, its signed
    heads dropped (the forger cannot make them)."""
    header, receipts = lines[0], [json.loads(line) for line in lines if '"chainHead"' not in line][1:]
    previous, forged = genesis(json.loads(header)["receiptsOf"]["tenant"]), [header]
    for index, receipt in enumerate(receipts):
        body = {key: value for key, value in change(receipt, index).items() if key != "hash"}
        body["prevHash"] = previous
        previous = digest(body)
        forged.append(json.dumps({**body, "hash": previous}))
    return forged


def export_of(persona: Persona) -> list[str]:
    exported = persona.api("GET", "/api/receipts/export")
    assert exported.status_code == 200, exported.content
    return b"".join(exported.streaming_content).decode().splitlines()


@pytest.fixture
def auditor(settings, tmp_path) -> tuple[Path, Path]:
    """Another machine: the installation's public key copied to it, no heads file; returns the public key's file
    and a folder for exports."""
    folder = tmp_path / "auditor"
    folder.mkdir()
    public = folder / "airlock.pub"
    public.write_text(public_pem(signing_key().public_key()))
    settings.RECEIPT_HEADS_FILE = str(folder / "no-heads-here.jsonl")
    return public, folder


def audit(folder: Path, name: str, lines: list[str], public: Path, *flags: str) -> tuple[int, str]:
    export = folder / name
    export.write_text("\n".join(lines) + "\n")
    return verify("--file", str(export), "--public-key", str(public), *flags)


def test_it_fails_an_export_whose_signed_heads_were_dropped_unless_told_to_allow_unsigned(fresh, reader, auditor):
    lines = export_of(reader)
    public, folder = auditor
    code, said = audit(folder, "whole.jsonl", lines, public)
    assert code == 0 and "5 receipts verified, 1 signed heads" in said and "UNSIGNED" not in said

    dropped = [line for line in lines if '"chainHead"' not in line]
    code, said = audit(folder, "dropped.jsonl", dropped, public)
    assert code == 1 and f"receipt {fresh[0].id} (#1)" in said
    assert "no signed chain head covers it or what follows, up to #5 (the chain has no signed head)" in said
    assert "--allow-unsigned" in said
    code, said = audit(folder, "dropped.jsonl", dropped, public, "--allow-unsigned")
    assert code == 0 and "5 receipts verified, 0 signed heads; UNSIGNED: the last 5 (#1 to #5)" in said


def test_it_fails_an_export_rewritten_with_new_at_values_and_rehashed_without_the_key(history, reader, auditor):
    """The rewrite puts every `at` within a minute, so no receipt looks older than the signer's period: the
    end is still unsigned. With the signed head kept, the head names another hash: it covers each `at`."""
    lines = export_of(reader)
    public, folder = auditor

    def denied_within_a_minute(receipt: dict[str, Any], index: int) -> dict[str, Any]:
        return {**receipt, "result": DENIED, "at": _at(60 + index)}

    code, said = audit(folder, "forged.jsonl", _forged_export(lines, denied_within_a_minute), public)
    assert code == 1 and "no signed chain head covers it" in said

    only_at = _forged_export(lines, lambda receipt, index: {**receipt, "at": _at(60 + index)})
    kept_head = [only_at[0], lines[1], *only_at[1:]]
    code, said = audit(folder, "at-only.jsonl", kept_head, public)
    assert code == 1 and f"receipt {history[-1].id} (#5)" in said and "signed chain head at this position" in said


def test_it_fails_a_chain_rewritten_on_the_host_with_its_tenants_lines_cut_from_the_heads_file(
    history, operator, outsider, keys
):
    make_agent(outsider)
    decide(outsider, 2, "other")
    sign_heads()
    heads = keys / "receipt-heads.jsonl"
    tenant = str(operator.tenant.pk)
    assert {json.loads(line)["tenant"] for line in heads.read_text().splitlines()} == {tenant, str(outsider.tenant.pk)}

    _rechain(operator.tenant.pk, lambda body, n: {**body, "result": DENIED, "at": _at(60 + n)})
    ChainSignature.objects.filter(tenant=operator.tenant).delete()
    kept = [line for line in heads.read_text().splitlines(keepends=True) if json.loads(line)["tenant"] != tenant]
    heads.write_text("".join(kept))

    code, said = verify()
    assert code == 1 and f"{operator.tenant.slug}: FAILED at receipt {history[0].id} (#1)" in said
    assert "no signed chain head covers it" in said
    assert f"{outsider.tenant.slug}: 2 receipts verified, 1 signed heads" in said


def test_it_fails_a_chain_whose_newest_receipts_are_not_signed_yet_unless_told(history, operator):
    decide(operator, 2, "late")
    code, said = verify()
    assert code == 1 and "up to #7 (the newest signed head is #5)" in said
    code, said = verify("--allow-unsigned")
    assert code == 0 and "7 receipts verified, 1 signed heads; UNSIGNED: the last 2 (#6 to #7)" in said
    sign_heads()
    code, said = verify()
    assert code == 0 and "7 receipts verified, 2 signed heads" in said and "UNSIGNED" not in said


@pytest.mark.parametrize(
    ("column", "value"),
    [("at", datetime(2000, 1, 1, tzinfo=UTC)), ("sequence", 99), ("result", DENIED), ("tool_name", "other")],
)
def test_it_names_a_filter_column_edited_alone_as_tampering(history, column, value):
    """`at` picks a receipt for `from`/`to`, `sequence` for the cursor: each is checked against the signed body."""
    last = history[-1]
    Receipt.objects.filter(pk=last.pk).update(**{column: value})
    code, said = verify()
    assert code == 1 and f"receipt {last.id} (#5): its {column} column says" in said
    assert "the column was edited" in said


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_it_writes_the_key_and_the_heads_for_this_user_only(history, keys):
    assert _mode(keys) == 0o700
    assert _mode(keys / "receipt-signing.key") == 0o600 and _mode(keys / "receipt-heads.jsonl") == 0o600


def test_it_narrows_a_heads_file_an_older_version_left_readable(operator, admin, keys):
    make_agent(admin)
    keys.mkdir(mode=0o755)
    heads = keys / "receipt-heads.jsonl"
    heads.write_text("")
    heads.chmod(0o644)
    decide(operator, 1)
    sign_heads()
    assert _mode(heads) == 0o600 and len(heads.read_text().splitlines()) == 1


def test_it_keeps_the_key_beside_the_data_folder_and_moves_an_older_installations_key_there(tmp_path):
    """A fresh start on a data folder from before: its key is moved out (the same key), and what the app writes
    there (the SQLite database, mail) is this user's alone."""
    data = tmp_path / "data"
    data.mkdir()
    old_key = data / "receipt-signing.key"
    old_key.write_bytes(b"an older installation's key\n")
    old_key.chmod(0o600)
    script = (
        "from django.conf import settings; from django.db import connection; from django.core.mail import send_mail;"
        "connection.ensure_connection();"
        "send_mail('s', 'b', 'a@example.com', ['b@example.com']);"
        "print(settings.RECEIPT_SIGNING_KEY_FILE); print(settings.RECEIPT_HEADS_FILE)"
    )
    ran = run_python(["manage.py", "shell", "-v", "0", "-c", script], tmp_path)
    assert ran.returncode == 0, ran.stderr
    key, heads = (Path(line) for line in ran.stdout.split())
    moved = tmp_path / "data-keys"
    assert (key, heads) == (moved / "receipt-signing.key", moved / "receipt-heads.jsonl")
    assert key.read_bytes() == b"an older installation's key\n" and not old_key.exists()
    assert f"Moved {old_key} to {key}" in ran.stderr
    assert _mode(moved) == 0o700 and _mode(key) == 0o600
    mail = data / "mail"
    assert _mode(data / "airlock.sqlite3") == 0o600 and _mode(mail) == 0o700
    assert [_mode(each) for each in mail.iterdir()] == [0o600]


def test_it_reads_a_key_file_setting_and_refuses_an_empty_one(tmp_path):
    legacy = tmp_path / "old.key"
    legacy.write_text("k")
    chosen = env_file("KEY", tmp_path / "new.key", {"KEY": "/etc/airlock/key"}, moved_from=legacy)
    assert chosen == Path("/etc/airlock/key") and legacy.exists()
    with pytest.raises(EnvError, match="KEY must be a file's path; got an empty value"):
        env_file("KEY", tmp_path / "new.key", {"KEY": " "}, moved_from=legacy)
    assert os.listdir(tmp_path) == ["old.key"]
