"""The decision log streamed (SPEC section 18): receipts reach the log sinks granted to their tenant, each as one
record carrying its JSON, in chain order, once when all goes well, resumed from the sink's cursor after an outage,
and never another tenant's."""

import ssl
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from console.models import Connection
from decisionlog.models import SinkCursor
from decisionlog.records import PRIORITY, SD_ID
from decisionlog.shipping import ship
from tests.approvals.test_respond_api import approve, ask
from tests.decisionlog.chain import chain_of, sink, write_receipts
from tests.decisionlog.receivers import OtlpReceiver, SyslogReceiver
from tests.helpers import make_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def otlp() -> Any:
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture
def syslog() -> Any:
    receiver = SyslogReceiver()
    yield receiver
    receiver.stop()


def sequences(receiver: Any) -> list[int]:
    return [record.sequence for record in receiver.records]


def cursor(connection: Any, tenant: Any) -> SinkCursor:
    return SinkCursor.objects.get(connection=connection, tenant=tenant)


def test_receipts_reach_an_otlp_sink_in_chain_order_once_each_as_the_api_gives_them(acme, otlp, monkeypatch):
    monkeypatch.setenv("SIEM_HEADERS", "Authorization=Bearer%20s3cret, X-Scope = audit")
    connection = sink("siem", "otlp", [acme], url=otlp.url + "/", secret_env="SIEM_HEADERS")
    write_receipts(acme, 7)

    assert ship(batch=3).shipped == 7
    write_receipts(acme, 2)
    assert ship(batch=3).shipped == 2
    assert ship().shipped == 0  # nothing again

    assert [record.receipt for record in otlp.records] == chain_of(acme)
    assert sequences(otlp) == list(range(1, 10))
    assert [len(export.records) for export in otlp.exports] == [3, 3, 1, 2]
    headers = otlp.exports[0].headers
    assert headers["Authorization"] == "Bearer s3cret" and headers["X-Scope"] == "audit"
    assert headers["Content-Type"] == "application/x-protobuf"
    first = otlp.records[0]
    # Beside the JSON only what tells records apart: no argument value, no secret.
    assert first.attributes == {
        "airlock.tenant": "acme",
        "airlock.receipt.id": first.receipt["receiptId"],
        "airlock.receipt.sequence": 1,
        "resource": {"service.name": "airlock"},
        "scope": "airlock.decisionlog",
    }
    assert first.raw.event_name == "airlock.receipt" and first.raw.severity_text == "INFO"
    assert first.raw.time_unix_nano // 1000 == int(datetime.fromisoformat(first.receipt["at"]).timestamp() * 1e6)
    assert cursor(connection, acme).sequence == 9


def test_receipts_reach_a_syslog_sink_as_octet_counted_rfc_5424_messages(acme, syslog):
    sink("syslog", "syslog", [acme], address=syslog.address)
    write_receipts(acme, 5)

    assert ship(batch=2).shipped == 5

    assert [record.receipt for record in syslog.received(5)] == chain_of(acme)
    assert [len(export.records) for export in syslog.exports] == [2, 2, 1]
    message = syslog.records[0].attributes
    assert message["priority"] == PRIORITY and message["app"] == "airlock" and message["msgid"] == "receipt"
    assert message["data"] == {
        SD_ID: {"tenant": "acme", "receiptId": syslog.records[0].receipt["receiptId"], "sequence": "1"}
    }
    assert message["timestamp"].endswith("Z")


def test_answered_requests_are_shipped_as_their_receipts_are_written(operator, otlp):
    make_agent(operator)
    sink("siem", "otlp", url=otlp.url)  # granted to every tenant
    for index in range(2):
        approve(operator, ask(operator, session=f"s{index}"))
    assert ship().shipped == 2
    assert [record.receipt["result"] for record in otlp.records] == ["approved", "approved"]
    assert [record.receipt for record in otlp.records] == chain_of(operator.tenant)


def test_a_sink_down_then_up_gets_everything_in_order_nothing_skipped(acme, otlp):
    connection = sink("siem", "otlp", [acme], url=otlp.url)
    write_receipts(acme, 4)
    otlp.status = 503
    assert ship(batch=2).failed == 1
    write_receipts(acme, 3)
    stood = cursor(connection, acme)
    assert stood.sequence == 0 and stood.attempts == 1 and stood.last_error == "the endpoint answered HTTP 503"
    assert ship(batch=2).failed == 0 and otlp.refused == 1  # backing off: not tried again yet

    later = timezone.now() + timedelta(seconds=2)
    assert ship(now=later, batch=2).failed == 1 and otlp.refused == 2
    assert cursor(connection, acme).attempts == 2

    otlp.status = 200
    assert ship(now=later + timedelta(seconds=3), batch=2).shipped == 7
    assert sequences(otlp) == list(range(1, 8))
    healed = cursor(connection, acme)
    assert (healed.sequence, healed.attempts, healed.last_error, healed.retry_at) == (7, 0, "", None)


def test_a_syslog_server_down_then_up_gets_everything_in_order(acme, syslog):
    connection = sink("syslog", "syslog", [acme], address=syslog.address)
    write_receipts(acme, 2)
    assert ship().shipped == 2
    assert len(syslog.received(2)) == 2
    syslog.stop()
    write_receipts(acme, 3)
    assert ship().failed == 1
    assert cursor(connection, acme).sequence == 2 and "did not take the frames" in cursor(connection, acme).last_error

    back = SyslogReceiver(port=syslog.port)
    try:
        assert ship(now=timezone.now() + timedelta(seconds=2)).shipped == 3
        assert [record.sequence for record in syslog.records + back.received(3)] == [1, 2, 3, 4, 5]
    finally:
        back.stop()


def test_each_tenant_reaches_only_its_own_sinks(acme, globex, otlp, syslog):
    sink("acme-siem", "otlp", [acme], url=otlp.url)
    sink("globex-syslog", "syslog", [globex], address=syslog.address)
    write_receipts(acme, 3)
    write_receipts(globex, 2)
    write_receipts(acme, 1)

    assert ship().shipped == 6

    assert [record.receipt for record in otlp.records] == chain_of(acme)
    assert {record.attributes["airlock.tenant"] for record in otlp.records} == {"acme"}
    assert [record.receipt for record in syslog.received(2)] == chain_of(globex)
    assert {record.attributes["data"][SD_ID]["tenant"] for record in syslog.records} == {"globex"}


def test_a_sink_granted_to_all_tenants_gets_each_chain_in_its_own_order(acme, globex, otlp):
    sink("siem", "otlp", url=otlp.url)
    write_receipts(acme, 2)
    write_receipts(globex, 2)
    assert ship().shipped == 4
    by_tenant: dict[str, list[int]] = {}
    for record in otlp.records:
        by_tenant.setdefault(record.attributes["airlock.tenant"], []).append(record.sequence)
    assert by_tenant == {"acme": [1, 2], "globex": [1, 2]}
    # Each export carries one tenant's receipts.
    assert all(len({record.attributes["airlock.tenant"] for record in export.records}) == 1 for export in otlp.exports)


def test_a_sink_whose_headers_variable_is_malformed_delivers_nothing_and_says_why_without_the_value(
    acme, otlp, monkeypatch, caplog
):
    monkeypatch.setenv("SIEM_HEADERS", "Bearer hunter2")
    connection = sink("siem", "otlp", [acme], url=otlp.url, secret_env="SIEM_HEADERS")
    write_receipts(acme, 1)
    assert ship().failed == 1 and otlp.exports == []
    error = cursor(connection, acme).last_error
    assert error == "the variable SIEM_HEADERS does not hold headers as k=v,k2=v2"
    assert "hunter2" not in caplog.text and "SIEM_HEADERS" in caplog.text


def test_a_syslog_sink_over_tls_checks_the_servers_certificate(acme, tmp_path, monkeypatch):
    certificate, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    receiver = SyslogReceiver(context=context)
    try:
        connection = sink("syslog", "syslog", [acme], address=f"localhost:{receiver.port}", tls=True)
        write_receipts(acme, 2)
        assert ship().failed == 1  # not trusted by default
        assert cursor(connection, acme).last_error == "the server's TLS certificate was not trusted"
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
        assert ship(now=timezone.now() + timedelta(seconds=2)).shipped == 2
        assert [record.sequence for record in receiver.received(2)] == [1, 2]
    finally:
        receiver.stop()


def self_signed(folder: Any) -> tuple[Any, Any]:
    """A certificate for localhost and its key, as files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = timezone.now()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certificate_file, key_file = folder / "sink.pem", folder / "sink.key"
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return certificate_file, key_file


def test_a_header_value_with_a_line_break_fails_the_batch_without_logging_its_value(acme, otlp, monkeypatch, caplog):
    monkeypatch.setenv("SIEM_HEADERS", "X-Token=hunter2%0D%0AX-Evil: 1")
    connection = sink("siem", "otlp", [acme], url=otlp.url, secret_env="SIEM_HEADERS")
    write_receipts(acme, 1)
    assert ship().failed == 1 and otlp.exports == []
    assert cursor(connection, acme).last_error == "the variable SIEM_HEADERS does not hold headers as k=v,k2=v2"
    assert "hunter2" not in caplog.text
    monkeypatch.setenv("SIEM_HEADERS", "X-Token=hunter2")
    assert ship(now=timezone.now() + timedelta(seconds=2)).shipped == 1


def test_a_fault_of_ours_backs_the_pair_off_and_the_pass_goes_on(acme, globex, syslog, otlp):
    broken = sink("broken", "syslog", [acme], address=syslog.address)
    Connection.objects.filter(pk=broken.pk).update(address="no port here")  # past clean(), as a hand edit would
    sink("siem", "otlp", [acme, globex], url=otlp.url)
    write_receipts(acme, 1)
    write_receipts(globex, 1)
    done = ship()
    assert (done.shipped, done.failed) == (2, 1)
    assert cursor(broken, acme).last_error.startswith("could not be sent: ValueError at connections.py:")
    assert cursor(broken, acme).leased_until is None
