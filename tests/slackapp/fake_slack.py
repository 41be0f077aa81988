"""A loopback stand-in of Slack's Web API: a real HTTP server on 127.0.0.1 in the test process that records each call
and holds every Block Kit payload to slack_sdk's models (a block or view they refuse is recorded in `invalid`). It can
be `down` (503 to everything, counted in `refused`), rate-limited (`limited`: 429 with that Retry-After, "" for none)
or refuse posts to some channels (`failing`: channel → Slack's error)."""

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View


@dataclass
class Call:
    method: str
    body: dict[str, Any]
    token: str


@dataclass
class FakeSlack:
    calls: list[Call] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    down: bool = False
    refused: int = 0
    # What each message shows now, by its ts: the blocks of its post, then of its last update.
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    limited: str | None = None
    failing: dict[str, str] = field(default_factory=dict)
    _ts: int = 0
    server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def of(self, method: str) -> list[dict[str, Any]]:
        return [call.body for call in self.calls if call.method == method]

    def check_blocks(self, blocks: Any) -> None:
        if not isinstance(blocks, list) or not 0 < len(blocks) <= 50:
            self.invalid.append(f"blocks: {blocks!r}")
            return
        for raw in blocks:
            try:
                block = Block.parse(raw)
                assert block is not None, f"unknown block {raw!r}"
                block.validate_json()
                assert block.to_dict() == raw, f"{block.to_dict()} != {raw}"
            except (AssertionError, SlackObjectFormationError) as error:
                self.invalid.append(f"{raw!r}: {error}")

    def answer(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        if method in ("chat.postMessage", "chat.update"):
            self.check_blocks(body.get("blocks"))
            if not isinstance(body.get("text"), str) or not body["text"]:
                self.invalid.append(f"{method} without fallback text")
        if method == "chat.postMessage" and body.get("channel") in self.failing:
            return {"ok": False, "error": self.failing[body["channel"]]}
        if method == "chat.postMessage":
            self._ts += 1
            ts = f"1700000000.{self._ts:06d}"
            self.messages[ts] = body.get("blocks") or []
            return {"ok": True, "channel": "C0CHANNEL", "ts": ts}
        if method == "chat.update":
            if body.get("ts") not in self.messages:
                return {"ok": False, "error": "message_not_found"}
            self.messages[body["ts"]] = body.get("blocks") or []
            return {"ok": True, "channel": body["channel"], "ts": body["ts"]}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": "1700000001.000001"}
        if method == "views.open":
            try:
                view = View(**body["view"])
                view.validate_json()
                self.check_blocks(body["view"]["blocks"])
            except (SlackObjectFormationError, KeyError, TypeError) as error:
                self.invalid.append(f"view: {error}")
            return {"ok": True, "view": {"id": "V0VIEW", **body["view"]}}
        return {"ok": False, "error": "unknown_method"}


def start() -> FakeSlack:
    slack = FakeSlack()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if slack.down or slack.limited is not None:
                slack.refused += 1
                self.send_response(503 if slack.down else 429)
                if slack.limited:
                    self.send_header("Retry-After", slack.limited)
                self.end_headers()
                self.wfile.write(b"Slack is down" if slack.down else b"ratelimited")
                return
            if self.headers.get("Content-Type", "").startswith("application/json"):
                body = json.loads(raw or b"{}")
            else:
                body = {name: values[-1] for name, values in parse_qs(raw.decode()).items()}
            method = self.path.rsplit("/", 1)[-1]
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            slack.calls.append(Call(method, body, token))
            payload = json.dumps(slack.answer(method, body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    slack.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=slack.server.serve_forever, daemon=True).start()
    return slack
