"""Delivering a batch of receipts to one log sink connection, and what counts as the sink's acknowledgement:
an OTLP/HTTP endpoint's 2xx answer to the POST of `<url>/v1/logs`; for syslog, the frames written whole to the TCP
(or TLS) connection, a connection per batch. Anything else raises `SinkFailed`, whose text names what went wrong
without the sink's headers or a receipt's content."""

import os
import socket
import ssl
import urllib.parse
from collections.abc import Sequence
from datetime import datetime

import httpx2

from approvals.receipts import Receipt
from console.connections import ConnectionSpec, split_address
from decisionlog.records import otlp_request, syslog_frames

TIMEOUT_SECONDS = 10.0
# The status codes OTLP/HTTP says to retry after (the rest are retried too, here, since skipping a receipt is never
# an option: they back off the same way and leave the sink's error in the cursor for its operator).
RETRYABLE = frozenset({429, 502, 503, 504})


class SinkFailed(Exception):
    """The sink did not acknowledge the batch. `retry_after`: seconds the sink asked for; `sink_down`: the sink
    itself is down or refusing everything (its other tenants wait too), not this batch."""

    def __init__(self, why: str, *, retry_after: float | None = None, sink_down: bool = False) -> None:
        super().__init__(why)
        self.why = why[:500]
        self.retry_after = retry_after
        self.sink_down = sink_down


def otlp_headers(variable: str) -> dict[str, str]:
    """The headers kept in the environment variable `variable` as OTEL_EXPORTER_OTLP_HEADERS keeps them
    (`k=v,k2=v2`, values URL-encoded), read at each delivery so a rotated token applies at once."""
    text = os.environ.get(variable, "") if variable else ""
    headers: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = pair.partition("=")
        key, value = key.strip(), urllib.parse.unquote(value.strip())
        bad_key = not key or not key.isascii() or any(char in key for char in ' :\t"')
        if not equals or bad_key or any(ord(char) < 32 or ord(char) == 127 for char in key + value):
            raise SinkFailed(f"the variable {variable} does not hold headers as k=v,k2=v2")
        headers[key] = value
    return headers


_CLIENT = httpx2.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False)


def _retry_after(response: httpx2.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isascii() and value.isdigit() else None


def deliver_otlp(spec: ConnectionSpec, tenant_slug: str, receipts: Sequence[Receipt], now: datetime) -> None:
    headers = {**otlp_headers(spec.secret_env), "Content-Type": "application/x-protobuf"}
    try:
        response = _CLIENT.post(
            spec.url.rstrip("/") + "/v1/logs", content=otlp_request(tenant_slug, receipts, now), headers=headers
        )
    except httpx2.HTTPError as error:
        raise SinkFailed(f"the endpoint did not answer: {type(error).__name__}", sink_down=True) from None
    if not response.is_success:
        raise SinkFailed(
            f"the endpoint answered HTTP {response.status_code}",
            retry_after=_retry_after(response),
            sink_down=response.status_code in RETRYABLE,
        )


def deliver_syslog(spec: ConnectionSpec, tenant_slug: str, receipts: Sequence[Receipt], now: datetime) -> None:
    host, port = split_address(spec.address)
    frames = syslog_frames(tenant_slug, receipts)
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_SECONDS) as plain:
            if spec.tls:
                with ssl.create_default_context().wrap_socket(plain, server_hostname=host) as secure:
                    secure.sendall(frames)
            else:
                plain.sendall(frames)
    except ssl.SSLCertVerificationError:
        raise SinkFailed("the server's TLS certificate was not trusted", sink_down=True) from None
    except OSError as error:
        raise SinkFailed(f"the server did not take the frames: {type(error).__name__}", sink_down=True) from None


DELIVER = {"otlp": deliver_otlp, "syslog": deliver_syslog}


def send_receipts(spec: ConnectionSpec, tenant_slug: str, receipts: Sequence[Receipt], now: datetime) -> None:
    """Send `receipts` (one tenant's, in chain order) to the sink `spec`; returns once it acknowledged them."""
    DELIVER[spec.kind](spec, tenant_slug, receipts, now)
