"""Receipts (SPEC section 13): one per closed request however it closed, bound to the arguments the tool ran
with, chained per tenant; `verify_receipts` catches every kind of tampering."""

import io
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.actions import do_delete_agent
from agents.definitions import DefinitionContent
from agents.models import Agent
from agents.starter_policy import starter_hooks
from approvals import receipts
from approvals.actions import expire_due
from approvals.decisions import Actor, Decision, Via, decide
from approvals.models import PendingRequest, Rule
from approvals.receipts import ChainSignature, Receipt, ReceiptHead, digest, genesis
from approvals.signing import export_lines, sign_heads
from console.models import ApiToken
from tests.approvals.test_respond_api import EMAIL, approve, ask, request_id
from tests.conftest import Persona
from tests.helpers import drain_queued, make_agent, run_ok

pytestmark = pytest.mark.django_db

DEPLOY = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]},
}
STATUS = {"name": "status", "description": "Read a service's status", "approval": "never"}
SEND_TOOL = {
    "name": "send_email",
    "description": "Send a mail",
    "parameters": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
}


@pytest.fixture(autouse=True)
def receipt_key(settings, tmp_path):
    """The installation's key and heads file of this test, not the checkout's data folder."""
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "receipt-signing.key")
    settings.RECEIPT_HEADS_FILE = str(tmp_path / "receipt-heads.jsonl")
    return tmp_path


@pytest.fixture
def assistant(admin) -> Agent:
    return make_agent(admin)


@pytest.fixture
def deployer(admin: Persona) -> Agent:
    content = DefinitionContent.model_validate({"name": "deployer", "runtime": "external", "tools": [DEPLOY, STATUS]})
    return Agent.create(admin.tenant, content, admin.user)


def receipt_of(request_id: str) -> dict[str, Any]:
    receipts = Receipt.objects.filter(request_id=request_id)
    assert receipts.count() == 1, f"{receipts.count()} receipts for {request_id}"
    return receipts.get().wire()


def verify(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("verify_receipts", *args, stdout=out, stderr=err)
    except SystemExit as exited:
        return int(exited.code or 0), out.getvalue() + err.getvalue()
    return 0, out.getvalue() + err.getvalue()


def token_id(persona: Persona) -> int:
    return ApiToken.objects.get(membership=persona.membership).pk


# --- one receipt per closing ------------------------------------------------------------------------


def test_a_persons_answer_names_them_how_they_signed_in_and_the_arguments_the_tool_ran_with(operator, assistant):
    asked = ask(operator, f"call send_email {json.dumps(EMAIL)}\ncall send_email {json.dumps(EMAIL)}")
    edited = {**EMAIL, "to": "boss@b.co"}
    approve(operator, asked, 0, overrideArguments=edited)
    # The second through the browser session (the console's own API use).
    answered = operator.client.post(
        f"/api/runs/{asked['runId']}/responses",
        data={"requestId": request_id(asked, 1), "approved": False, "reason": "no"},
        content_type="application/json",
    )
    assert answered.status_code == 200, answered.content

    first = receipt_of(request_id(asked, 0))
    assert first["argumentsDigest"] == digest(edited) and first["originalArgumentsDigest"] == digest(EMAIL)
    assert first["result"] == "approved" and first["decisionSource"] == "human"
    assert first["answeredBy"] == operator.user.username and first["authMethod"] == f"token:{token_id(operator)}"
    assert first["agent"] == "assistant" and first["toolName"] == "send_email" and first["definitionVersion"] == 1
    assert first["runId"] == asked["runId"] and first["sessionId"] == "s1"
    second = receipt_of(request_id(asked, 1))
    assert second["argumentsDigest"] == digest(EMAIL) and second["originalArgumentsDigest"] is None
    assert second["result"] == "denied-interactively-by-user" and second["authMethod"] == "session"
    # Chained in the order decided, from the tenant's genesis.
    assert (first["sequence"], second["sequence"]) == (1, 2)
    assert first["prevHash"] == genesis(operator.tenant.pk) and second["prevHash"] == first["hash"]
    assert ReceiptHead.objects.get(tenant=operator.tenant).hash == second["hash"]


def test_a_rule_decides_a_hosted_call_without_a_request_and_its_receipt_names_the_rule(operator, assistant):
    asked = ask(operator, session="a")
    approve(operator, asked, remember=True)
    rule = Rule.objects.get()
    again = run_ok(operator, {"message": f"call send_email {json.dumps(EMAIL)}", "sessionId": "b"})
    assert again["status"] == "completed" and not again["pendingRequests"]

    decided = Receipt.objects.exclude(request_id=request_id(asked)).get().wire()
    assert decided["answeredBy"] == f"rule:{rule.id}@1" and decided["decisionSource"] == "rule"
    assert decided["result"] == "approved" and decided["authMethod"] is None
    assert decided["argumentsDigest"] == digest(EMAIL) and decided["runId"] == again["runId"]
    assert not PendingRequest.objects.filter(id=decided["requestId"]).exists()


def test_expiry_cancel_abandon_and_a_deleted_agent_each_close_with_one_receipt(operator, admin, assistant):
    expiring = ask(operator, session="expiring")
    PendingRequest.objects.filter(id=request_id(expiring)).update(expires_at=timezone.now() - timedelta(seconds=1))
    expire_due()
    cancelled = ask(operator, session="cancelled")
    assert operator.api("POST", f"/api/runs/{cancelled['runId']}/cancel").status_code == 200
    abandoned = ask(operator, session="abandoned")
    run_ok(operator, {"message": "never mind", "sessionId": "abandoned", "abandonPending": True})
    # Answered, then its session cancelled: the answer was the decision; the closing adds no receipt.
    answered_first = ask(operator, f"call send_email {json.dumps(EMAIL)}\ncall send_email {json.dumps(EMAIL)}", "both")
    approve(operator, answered_first, 0)
    orphan = ask(operator, session="orphan")
    do_delete_agent(assistant)

    facts = {
        "expired": (receipt_of(request_id(expiring)), "expiry", "system"),
        "cancelled": (receipt_of(request_id(cancelled)), "cancel", operator.user.username),
        "abandoned": (receipt_of(request_id(abandoned)), "abandon", "system"),
        "orphan": (receipt_of(request_id(orphan)), "abandon", "system"),
    }
    for name, (receipt, source, by) in facts.items():
        assert receipt["result"] == "cancelled", name
        assert (receipt["decisionSource"], receipt["answeredBy"]) == (source, by), name
    assert facts["expired"][0]["reason"] == "expired" and facts["orphan"][0]["reason"] == "abandoned"
    assert receipt_of(request_id(answered_first, 0))["result"] == "approved"
    assert receipt_of(request_id(answered_first, 1))["reason"] == "abandoned"
    # Every closed request has exactly one receipt, and there are no others.
    closed = PendingRequest.objects.exclude(status="pending")
    assert set(map(str, Receipt.objects.values_list("request_id", flat=True))) == {str(p.id) for p in closed}
    sign_heads()
    assert verify()[0] == 0


def test_an_external_agents_requests_decided_at_once_answered_and_cancelled_have_receipts(deployer, operator, admin):
    quick = operator.api("post", "/api/agents/deployer/requests", {"toolName": "status", "arguments": {}}).json()
    assert receipt_of(quick["requestId"])["decisionSource"] == "approval_mode"
    dropped = operator.api(
        "post", "/api/agents/deployer/requests", {"toolName": "deploy", "arguments": {"service": "y"}}
    )
    assert operator.api("delete", f"/api/requests/{dropped.json()['requestId']}").status_code == 200
    receipt = receipt_of(dropped.json()["requestId"])
    assert (receipt["decisionSource"], receipt["answeredBy"], receipt["reason"]) == (
        "cancel",
        operator.user.username,
        "cancelled",
    )
    asked = operator.api("post", "/api/agents/deployer/requests", {"toolName": "deploy", "arguments": {"service": "x"}})
    rid = asked.json()["requestId"]
    admin.api("post", f"/api/requests/{rid}/responses", {"approved": True, "remember": True})
    assert receipt_of(rid)["answeredBy"] == admin.user.username
    ruled = operator.api("post", "/api/agents/deployer/requests", {"toolName": "deploy", "arguments": {"service": "x"}})
    rule = Rule.objects.get()
    assert receipt_of(ruled.json()["requestId"])["answeredBy"] == f"rule:{rule.id}@1"
    assert Receipt.objects.count() == 4


def test_a_fork_at_an_earlier_checkpoint_gives_the_answered_copy_its_receipt(operator, assistant):
    asked = ask(operator, session="f")
    checkpoint = operator.api("GET", "/api/sessions/f/checkpoints").json()["items"][-1]
    approve(operator, asked)
    drain_queued()
    again = ask(operator, session="f")
    approve(operator, again)
    drain_queued()
    forked = approve(
        operator, asked, checkpointId=checkpoint["checkpointId"], overrideArguments={**EMAIL, "to": "x@y.z"}
    )
    assert forked["status"] == "accepted" and forked["requestId"] != request_id(asked)
    copy = receipt_of(forked["requestId"])
    assert copy["argumentsDigest"] == digest({**EMAIL, "to": "x@y.z"})
    assert Receipt.objects.count() == 3


# --- verification -----------------------------------------------------------------------------------


@pytest.fixture
def chain(operator, assistant) -> list[Receipt]:
    """Five receipts, the head signed."""
    for index in range(5):
        approve(operator, ask(operator, session=f"v{index}"))
    assert len(sign_heads()) == 1
    return list(Receipt.objects.order_by("sequence"))


def test_an_untouched_chain_and_its_export_verify(chain, operator, receipt_key):
    code, said = verify()
    assert code == 0 and f"{operator.tenant.slug}: 5 receipts verified, 1 signed heads" in said
    export = receipt_key / "export.jsonl"
    export.write_text("".join(export_lines(operator.tenant, Receipt.objects.order_by("sequence"))))
    assert verify("--file", str(export))[0] == 0
    lines = export.read_text().splitlines()
    changed = json.loads(lines[4])
    changed["result"] = "denied-interactively-by-user"
    lines[4] = json.dumps(changed)
    export.write_text("\n".join(lines) + "\n")
    code, said = verify("--file", str(export))
    assert code == 1 and changed["receiptId"] in said and "edited" in said


def test_an_edited_row_is_named(chain):
    third = chain[2]
    third.body = {**third.body, "answeredBy": "someone else"}
    third.save(update_fields=["body"])
    code, said = verify()
    assert code == 1 and str(third.id) in said and "edited" in said


def test_an_edited_and_rehashed_row_breaks_the_link_to_the_next(chain):
    third = chain[2]
    third.body = {**third.body, "answeredBy": "someone else"}
    third.hash = digest(third.body)
    third.save(update_fields=["body", "hash"])
    code, said = verify()
    assert code == 1 and str(chain[3].id) in said and str(third.id) in said


def test_a_deleted_row_is_named(chain):
    chain[1].delete()
    code, said = verify()
    assert code == 1 and str(chain[2].id) in said and "deleted" in said


def test_the_newest_rows_deleted_are_caught_by_the_head(chain):
    chain[-1].delete()
    code, said = verify()
    assert code == 1 and "the newest receipts were deleted" in said


def test_an_inserted_row_is_named(chain):
    for receipt in reversed(chain[2:]):
        receipt.sequence += 1
        receipt.save(update_fields=["sequence"])
    forged = {**chain[1].body, "receiptId": "00000000-0000-0000-0000-000000000001", "sequence": 3}
    forged["prevHash"] = chain[1].hash
    forged["requestId"] = "00000000-0000-0000-0000-000000000002"
    Receipt.objects.create(
        id=forged["receiptId"],
        tenant=chain[0].tenant,
        sequence=3,
        request_id=forged["requestId"],
        agent=forged["agent"],
        tool_name=forged["toolName"],
        result=forged["result"],
        at=chain[1].at,
        body=forged,
        hash=digest(forged),
    )
    code, said = verify()
    assert code == 1 and str(chain[2].id) in said


def test_reordered_rows_are_named(chain):
    second, third = chain[1], chain[2]
    Receipt.objects.filter(pk=second.pk).update(sequence=1000)
    Receipt.objects.filter(pk=third.pk).update(sequence=2)
    Receipt.objects.filter(pk=second.pk).update(sequence=3)
    code, said = verify()
    assert code == 1 and str(third.id) in said


def test_a_filter_column_that_disagrees_with_its_receipt_is_named(chain):
    Receipt.objects.filter(pk=chain[0].pk).update(agent="someone-else")
    code, said = verify()
    assert code == 1 and str(chain[0].id) in said and "agent column" in said


def _rewrite_whole_chain(tenant_id: Any) -> None:
    """What someone holding the database but not the key can do: turn every approval into a denial and rehash
    the whole chain, its head and its filter columns included."""
    previous = genesis(tenant_id)
    for receipt in Receipt.objects.filter(tenant_id=tenant_id).order_by("sequence"):
        body = {**receipt.body, "prevHash": previous, "result": "denied-interactively-by-user"}
        receipt.body, receipt.hash, receipt.result = body, digest(body), body["result"]
        receipt.save(update_fields=["body", "hash", "result"])
        previous = receipt.hash
    ReceiptHead.objects.filter(tenant_id=tenant_id).update(hash=previous)


def test_the_whole_chain_rewritten_without_the_key_fails_on_its_signed_head(chain, operator):
    _rewrite_whole_chain(operator.tenant.pk)
    code, said = verify()
    assert code == 1 and str(chain[-1].id) in said and "signed chain head" in said
    # Nor does the signer sign the rewritten history.
    assert sign_heads() == []


def test_a_rewritten_chain_whose_signatures_were_deleted_fails_on_the_heads_kept_outside_the_database(chain, operator):
    _rewrite_whole_chain(operator.tenant.pk)
    ChainSignature.objects.all().delete()
    code, said = verify()
    assert code == 1 and "signed chain head" in said


def test_a_forged_signature_is_refused(chain, operator):
    ChainSignature.objects.update(signature="00" * 64)
    code, said = verify()
    assert code == 1 and "does not verify" in said


def test_without_a_key_or_with_another_tenant_named_it_says_so(chain, receipt_key):
    with pytest.raises(CommandError, match="no tenant 'nobody'"):
        call_command("verify_receipts", "--tenant", "nobody")
    (receipt_key / "receipt-signing.key").unlink()
    with pytest.raises(CommandError, match="cannot read the public key"):
        call_command("verify_receipts")


def test_a_policys_deny_names_its_binding_and_version_hosted_and_external(operator, admin):
    guarded = make_agent(admin, hooks=starter_hooks())
    evil = {**EMAIL, "to": "eve@evil.test"}
    denied = run_ok(operator, {"message": f"call send_email {json.dumps(evil)}", "sessionId": "p"})
    assert not denied["pendingRequests"]
    hosted = Receipt.objects.get().wire()
    assert hosted["answeredBy"] == f"policy:mail-guard@{guarded.current.number}"
    assert hosted["result"] == "denied-by-permission-request-hook" and hosted["decisionSource"] == "policy"
    assert hosted["argumentsDigest"] == digest(evil)

    content = {"name": "mailer", "runtime": "external", "tools": [SEND_TOOL], "hooks": starter_hooks()}
    Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)
    body = {"kind": "approval", "toolName": "send_email", "arguments": evil}
    opened = operator.api("post", "/api/agents/mailer/requests", body).json()
    external = receipt_of(opened["requestId"])
    assert external["answeredBy"] == "policy:mail-guard@1" and external["result"] == hosted["result"]
    assert external["prevHash"] == hosted["hash"]


def test_a_receipt_whose_text_needs_escaping_hashes_as_digest_says(operator, assistant):
    """On PostgreSQL one receipt's hash is computed in the database (`approvals.receipts`, one statement): it is
    the digest of the body it stores, whatever the text holds (non-ASCII, quotes, escapes, a look-alike of the
    stand-ins it splices around)."""
    approve(operator, ask(operator))
    fact = {**Receipt.objects.get().body, "toolName": 'ré "sé" \\ \u2028 😀 seq', "answeredBy": "prev\n\t\x01"}
    fact = {key: value for key, value in fact.items() if key not in ("receiptId", "sequence", "prevHash")}
    (written,) = receipts.record(operator.tenant.pk, [{**fact, "requestId": str(uuid.uuid4())}])
    stored = Receipt.objects.get(pk=written.pk)
    assert (stored.sequence, stored.body["prevHash"]) == (2, Receipt.objects.get(sequence=1).hash)
    assert stored.hash == written.hash == digest(stored.body) and stored.body == written.body
    assert ReceiptHead.objects.get(tenant=operator.tenant).hash == stored.hash
    sign_heads()
    assert verify()[0] == 0


def test_an_answer_in_a_tenant_without_a_head_yet_makes_it_and_a_lost_one_writes_nothing(operator, assistant):
    """A tenant from before receipts gets its head with its first receipt; an answer that loses to another (its
    conditional write finds the request answered) writes no receipt, on PostgreSQL where both are one statement
    (`approvals.receipts.record_closing`) as on SQLite."""
    ReceiptHead.objects.filter(tenant=operator.tenant).delete()
    asked = ask(operator)
    approve(operator, asked)
    first = receipt_of(request_id(asked))
    assert (first["sequence"], first["prevHash"]) == (1, genesis(operator.tenant.pk))
    assert ReceiptHead.objects.get(tenant=operator.tenant).hash == first["hash"]

    pending = PendingRequest.objects.get(id=request_id(asked))
    denied = {"requestId": str(pending.id), "approved": False}
    late = decide(pending, Decision(Actor.person(operator.user, Via.API), denied), timezone.now())
    assert late is False and pending.answer["approved"] is True
    assert Receipt.objects.count() == 1 and PendingRequest.objects.get(pk=pending.pk).answer["approved"] is True
    sign_heads()
    assert verify()[0] == 0
