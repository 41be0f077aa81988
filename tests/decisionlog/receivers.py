"""Loopback log sinks for the decision log's tests: an OTLP/HTTP logs receiver that decodes each export with
opentelemetry-proto, and a TCP (or TLS) syslog receiver that parses octet-counted RFC 5424 frames. Each keeps what
it received, in order, and can be down (the OTLP one answers an error status; the syslog one stops listening)."""

import itertools
import json
import socket
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@dataclass
class Record:
    """One log record (or syslog message) as a sink got it."""

    receipt: dict[str, Any]
    attributes: dict[str, Any]
    raw: Any = None

    @property
    def sequence(self) -> int:
        return int(self.receipt["sequence"])


@dataclass
class Export:
    """One request (or connection) the sink got: its headers and records."""

    headers: dict[str, str]
    records: list[Record]
    acknowledged: bool = False


@dataclass
class OtlpReceiver:
    """`POST /v1/logs` on 127.0.0.1: decodes ExportLogsServiceRequest; answers 200 with an ExportLogsServiceResponse,
    or `status` while that is set. `hold_at`: the n-th export (1-based) is recorded, then answered only once
    `release` is set (a shipper killed meanwhile never hears back)."""

    status: int = 200
    hold_at: int = 0
    exports: list[Export] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    refused: int = 0

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/v1/logs":
                    self.send_error(404)
                    return
                if receiver.status != 200:
                    receiver.refused += 1
                    self.send_response(receiver.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                export = Export(dict(self.headers), receiver.decode(body))
                receiver.exports.append(export)
                if len(receiver.exports) == receiver.hold_at:
                    receiver.held.set()
                    receiver.release.wait(30)
                answer = ExportLogsServiceResponse().SerializeToString()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    export.acknowledged = True
                except OSError:
                    pass  # the shipper is gone

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @staticmethod
    def decode(body: bytes) -> list[Record]:
        request = ExportLogsServiceRequest.FromString(body)
        records = []
        for resource_logs in request.resource_logs:
            resource = {item.key: _value(item.value) for item in resource_logs.resource.attributes}
            for scope_logs in resource_logs.scope_logs:
                for log in scope_logs.log_records:
                    attributes = {item.key: _value(item.value) for item in log.attributes}
                    attributes |= {"resource": resource, "scope": scope_logs.scope.name}
                    records.append(Record(json.loads(log.body.string_value), attributes, log))
        return records

    @property
    def records(self) -> list[Record]:
        return [record for export in self.exports for record in export.records]

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def parse_syslog(message: bytes) -> Record:
    """An RFC 5424 message: the header's fields, the structured data's parameters, the MSG (its BOM dropped) read
    as the receipt's JSON. Raises on anything malformed."""
    text = message.decode("utf-8")
    head, _, rest = text.partition(" ")
    assert head.startswith("<") and head.endswith(">1"), head
    priority = int(head[1:-2])
    timestamp, hostname, app, procid, msgid, rest = rest.split(" ", 5)
    data: dict[str, dict[str, str]] = {}
    if rest.startswith("-"):
        rest = rest[1:]
    while rest.startswith("["):
        end, escaped = 1, False
        while escaped or rest[end] != "]":
            escaped = not escaped and rest[end] == "\\"
            end += 1
        element, rest = rest[1:end], rest[end + 1 :]
        sd_id, _, params = element.partition(" ")
        data[sd_id] = {}
        while params:
            name, _, params = params.partition('="')
            value, index, escaped = "", 0, False
            while escaped or params[index] != '"':
                escaped = not escaped and params[index] == "\\"
                if not escaped:
                    value += params[index]
                index += 1
            data[sd_id][name] = value
            params = params[index + 1 :].lstrip(" ")
    assert rest.startswith(" \ufeff"), "the MSG is UTF-8 with its BOM"
    header = {"priority": priority, "timestamp": timestamp, "hostname": hostname, "app": app, "procid": procid}
    return Record(json.loads(rest[2:]), {**header, "msgid": msgid, "data": data}, message)


def read_frames(stream: bytes) -> list[bytes]:
    """Octet-counted frames (`MSG-LEN SP SYSLOG-MSG`); a frame cut short at the end is dropped."""
    frames, at = [], 0
    while at < len(stream):
        space = stream.index(b" ", at)
        length = int(stream[at:space])
        assert stream[at:space].isdigit() and not stream[at:space].startswith(b"0"), stream[at:space]
        if space + 1 + length > len(stream):
            break
        frames.append(stream[space + 1 : space + 1 + length])
        at = space + 1 + length
    return frames


class SyslogReceiver:
    """A syslog server on 127.0.0.1 (`port`: a restart's), TCP or TLS (`context`), one Export per connection, kept
    once the shipper closed it (`received` waits for them)."""

    def __init__(self, port: int = 0, context: ssl.SSLContext | None = None) -> None:
        # Each connection's export at the place of its connection: the handlers' threads may finish in another order
        # than the shipper's connections came (one closed, the next opened at once).
        self.done: dict[int, Export] = {}
        self.accepted: dict[socket.socket, int] = {}
        places = itertools.count()
        self.refused = 0
        receiver = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                place = receiver.accepted.pop(self.request)
                conn: socket.socket = self.request
                if context is not None:
                    try:
                        conn = context.wrap_socket(conn, server_side=True)
                    except OSError:  # a client that did not trust this server's certificate
                        receiver.refused += 1
                        return
                chunks = []
                with conn:
                    while chunk := conn.recv(65536):
                        chunks.append(chunk)
                frames = read_frames(b"".join(chunks))
                receiver.done[place] = Export({}, [parse_syslog(frame) for frame in frames], True)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

            def process_request(self, request: Any, client_address: Any) -> None:
                receiver.accepted[request] = next(places)
                super().process_request(request, client_address)

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.address = f"127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def exports(self) -> list[Export]:
        return [self.done[place] for place in sorted(self.done)]

    @property
    def records(self) -> list[Record]:
        return [record for export in self.exports for record in export.records]

    def received(self, count: int, timeout: float = 10) -> list[Record]:
        """The records once there are `count` (the shipper's close reaches this thread a moment after)."""
        deadline = time.monotonic() + timeout
        while len(self.records) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.records

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
