"""A receipt as a log sink receives it: one record carrying the receipt's JSON exactly as `GET /api/receipts` and the
export give it, and beside it only what tells records apart (the tenant's slug, the receipt's id and sequence): no
argument value, model text, token or secret, which a receipt never holds either (digests only).

OTLP: an `ExportLogsServiceRequest` (opentelemetry-proto) of one resource (`service.name` airlock) and scope
(`airlock.decisionlog`), a log record per receipt, its body the JSON as a string, its time the decision's.
Syslog: an RFC 5424 message per receipt (facility 13, log audit; severity 6, informational; MSGID `receipt`), the
JSON as its UTF-8 MSG, framed by octet counting (RFC 6587 section 3.4.1, as RFC 5425 frames TLS)."""

import json
import socket
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs, SeverityNumber
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from approvals.receipts import Receipt

SCOPE = "airlock.decisionlog"
EVENT_NAME = "airlock.receipt"
# RFC 5424: facility 13 (log audit) * 8 + severity 6 (informational).
PRIORITY = 13 * 8 + 6
APP_NAME = "airlock"
MSGID = "receipt"
# The structured data's id: an enterprise number is RFC 5424's way to name one's own; 32473 is the one RFC 5612
# sets aside for examples and documentation (Airlock has none registered).
SD_ID = "airlock@32473"
BOM = b"\xef\xbb\xbf"


def receipt_json(receipt: Receipt) -> str:
    """The receipt's JSON, as the API and the export give it (one line)."""
    return json.dumps(receipt.wire(), ensure_ascii=False, separators=(",", ":"))


def _nanos(at: datetime) -> int:
    return int(at.timestamp()) * 1_000_000_000 + at.microsecond * 1000


def _attribute(key: str, value: str | int) -> KeyValue:
    any_value = AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
    return KeyValue(key=key, value=any_value)


def otlp_request(tenant_slug: str, receipts: Iterable[Receipt], now: datetime) -> bytes:
    """The body of one OTLP/HTTP logs export (protobuf) of `receipts`, in the order given."""
    observed = _nanos(now)
    records = [
        LogRecord(
            time_unix_nano=_nanos(receipt.at),
            observed_time_unix_nano=observed,
            severity_number=SeverityNumber.SEVERITY_NUMBER_INFO,
            severity_text="INFO",
            event_name=EVENT_NAME,
            body=AnyValue(string_value=receipt_json(receipt)),
            attributes=[
                _attribute("airlock.tenant", tenant_slug),
                _attribute("airlock.receipt.id", str(receipt.id)),
                _attribute("airlock.receipt.sequence", receipt.sequence),
            ],
        )
        for receipt in receipts
    ]
    request = ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=[_attribute("service.name", APP_NAME)]),
                scope_logs=[ScopeLogs(scope=InstrumentationScope(name=SCOPE), log_records=records)],
            )
        ]
    )
    return request.SerializeToString()


def _hostname() -> str:
    """This machine's name as RFC 5424's HOSTNAME allows it (printable US-ASCII, at most 255), or the nil value."""
    name = "".join(char for char in socket.gethostname() if 33 <= ord(char) <= 126)[:255]
    return name or "-"


def _param(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def syslog_message(tenant_slug: str, receipt: Receipt, hostname: str) -> bytes:
    """One RFC 5424 message: the header, the structured data naming the tenant and the receipt, the JSON."""
    at = receipt.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    data = f'[{SD_ID} tenant="{_param(tenant_slug)}" receiptId="{receipt.id}" sequence="{receipt.sequence}"]'
    header = f"<{PRIORITY}>1 {at} {hostname} {APP_NAME} - {MSGID} {data} "
    return header.encode() + BOM + receipt_json(receipt).encode()


def syslog_frames(tenant_slug: str, receipts: Iterable[Receipt]) -> bytes:
    """The octet-counted frames of `receipts` (`MSG-LEN SP SYSLOG-MSG` each), in the order given."""
    hostname = _hostname()
    frames = []
    for receipt in receipts:
        message = syslog_message(tenant_slug, receipt, hostname)
        frames.append(f"{len(message)} ".encode() + message)
    return b"".join(frames)
