"""Receipts written at the same moment by answers and closings of one tenant, each on its own connection: the
tenant's chain takes them one after another (its head's row lock), with no gap, no fork and no deadlock. Needs
PostgreSQL: SQLite serializes every write, so nothing would race."""

import pytest

from agents.models import Agent
from approvals.receipts import Receipt
from approvals.signing import sign_heads, signing_key, verify_tenant
from tests.approvals.test_respond_race import SEND, answer, ask, together
from tests.helpers import make_agent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]


@pytest.fixture
def assistant(admin) -> Agent:
    return make_agent(admin)


def test_twenty_answers_at_once_chain_twenty_receipts_in_one_line(operator, assistant, settings, tmp_path):
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "key")
    settings.RECEIPT_HEADS_FILE = str(tmp_path / "heads.jsonl")
    asked = [ask(operator, SEND, f"s{n}") for n in range(20)]
    calls = [
        answer(operator, a["runId"], {"requestId": a["pendingRequests"][0]["requestId"], "approved": n % 2 == 0})
        for n, a in enumerate(asked)
    ]
    outcomes = together(calls)

    assert [o["status"] for o in outcomes] == ["accepted"] * 20
    assert sorted(Receipt.objects.values_list("sequence", flat=True)) == list(range(1, 21))
    sign_heads()
    verified = verify_tenant(operator.tenant, signing_key().public_key())
    assert verified.broken is None and verified.receipts == 20, str(verified)
    results = {r.body["requestId"]: r.body["result"] for r in Receipt.objects.all()}
    assert results == {
        a["pendingRequests"][0]["requestId"]: "approved" if n % 2 == 0 else "denied-interactively-by-user"
        for n, a in enumerate(asked)
    }
