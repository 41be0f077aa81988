"""The receipts pages (SPEC section 13): an auditor filters, pages, opens one, exports; cards and runs link them."""

import io
import re

import pytest

from approvals.receipts import Receipt
from approvals.signing import sign_heads, signing_key, verify_file
from approvals.views import receipt_pages
from tests.approvals.test_respond_api import approve, ask, request_id
from tests.helpers import make_agent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def receipt_key(settings, tmp_path):
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "receipt-signing.key")
    settings.RECEIPT_HEADS_FILE = str(tmp_path / "receipt-heads.jsonl")


def test_a_reader_filters_opens_and_exports_receipts(operator, admin, reader, outsider):
    make_agent(admin)
    approved = ask(operator, session="a")
    approve(operator, approved)
    denied = ask(operator, session="b")
    approve(operator, denied, approved=False, reason="<b>no</b>")

    page = reader.client.get("/receipts/").content.decode()
    assert page.count('href="/receipts/') >= 3 and "denied-interactively-by-user" in page and "approved" in page
    only = reader.client.get("/receipts/?result=approved").content.decode()
    assert "denied-interactively-by-user</span>" not in only
    receipt = Receipt.objects.get(request_id=request_id(denied))
    detail = reader.client.get(f"/receipts/{receipt.id}/").content.decode()
    assert receipt.hash in detail and receipt.body["prevHash"] in detail and "<b>no</b>" not in detail
    # Each field in words beside its name in the JSON (the newcomer's walk read "ORIGINALARGUMENTSDIGEST").
    assert 'Original arguments digest <code class="field-name">originalArgumentsDigest</code>' in detail
    assert reader.client.get(f"/receipts/request/{request_id(denied)}/").url == f"/receipts/{receipt.id}/"
    assert outsider.client.get(f"/receipts/{receipt.id}/").status_code == 404
    assert outsider.client.get(f"/receipts/request/{request_id(denied)}/").status_code == 404
    sign_heads()
    exported = reader.client.get("/receipts/?format=jsonl")
    text = b"".join(exported.streaming_content).decode()
    assert verify_file(io.StringIO(text), signing_key().public_key()).broken is None

    run_page = reader.client.get(f"/runs/{approved['runId']}/").content.decode()
    assert f"/receipts/request/{request_id(approved)}/" in run_page


def test_it_pages_with_the_cursor_and_ignores_a_bad_one(operator, admin, reader, monkeypatch):
    make_agent(admin)
    for n in range(3):
        approve(operator, ask(operator, session=f"p{n}"))
    monkeypatch.setattr(receipt_pages, "RECEIPTS_PER_PAGE", 2)
    first = reader.client.get("/receipts/").content.decode()
    older = re.search(r'href="\?cursor=([^"]+)" rel="next"', first)
    assert older is not None and ">3</a>" in first and ">1</a>" not in first
    second = reader.client.get(f"/receipts/?cursor={older.group(1)}").content.decode()
    assert ">1</a>" in second and ">3</a>" not in second and 'rel="next"' not in second
    assert ">3</a>" in reader.client.get("/receipts/?cursor=%25%25").content.decode()
