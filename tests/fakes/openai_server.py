"""A loopback OpenAI-compatible `/v1/chat/completions` server for provider tests.

Each test plans the replies, in order, and reads back what the client sent:

    with FakeOpenAI() as fake:
        fake.reply_tool_call("get_time", {})
        fake.reply_text("It is noon.")
        fake.fail(429)
        model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(base_url=fake.base_url, api_key="sk-test"))
        ...
        assert fake.requests[1].roles == ["system", "user", "assistant", "tool"]

Streaming requests get SSE chunks (text in word chunks, tool-call arguments in two deltas, and a final
usage chunk when `stream_options.include_usage` is set); other requests get one JSON body. Like the
real API, a conversation whose tool messages do not answer the assistant's tool calls in order gets a
400 without using up a planned reply. A request with no reply left gets a 400 as well (not a 5xx, which
the OpenAI SDK would retry), so a test that under-plans fails loudly.
"""

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

COMPLETIONS_PATH = "/v1/chat/completions"

_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Request not allowed."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str
    id: str


@dataclass(frozen=True)
class PlannedReply:
    """One planned answer: text, tool calls, an HTTP error, or a malformed body."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 200
    error: dict[str, Any] | None = None
    raw_body: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    input_tokens: int = 10
    output_tokens: int = 5
    delay: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    """What the client sent, with the parts tests usually assert on pulled out."""

    method: str
    path: str
    authorization: str | None
    body: dict[str, Any] = field(repr=False)
    problems: tuple[str, ...] = ()

    @property
    def model(self) -> str | None:
        return self.body.get("model")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages") or []

    @property
    def roles(self) -> list[str]:
        return [message.get("role", "?") for message in self.messages]

    @property
    def tools(self) -> list[str]:
        """The names of the tools offered to the model."""
        return [tool.get("function", {}).get("name", "?") for tool in self.body.get("tools") or []]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


class FakeOpenAI:
    """The fake server; use it as a context manager (it listens on 127.0.0.1, a free port)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._planned: deque[PlannedReply] = deque()
        self._lock = threading.Lock()
        self._call_count = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client as `base_url` (it ends in `/v1`)."""
        assert self._server is not None, "use FakeOpenAI as a context manager"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    # --- planning --------------------------------------------------------------------------------

    def reply_text(self, text: str, *, input_tokens: int = 10, output_tokens: int = 5, delay: float = 0) -> None:
        self._plan(PlannedReply(text=text, input_tokens=input_tokens, output_tokens=output_tokens, delay=delay))

    def reply_tool_call(
        self, name: str, arguments: dict[str, Any] | str, *, call_id: str | None = None, text: str | None = None
    ) -> None:
        """Plan one tool call (optionally with some text before it)."""
        self.reply_tool_calls([(name, arguments, call_id)], text=text)

    def reply_tool_calls(
        self,
        calls: list[tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str | None]],
        *,
        text: str | None = None,
    ) -> None:
        """Plan parallel tool calls in one reply: `[(name, arguments), (name, arguments, call_id), ...]`."""
        planned = []
        for call in calls:
            name, arguments = call[0], call[1]
            call_id = call[2] if len(call) > 2 else None
            planned.append(
                ToolCall(
                    name=name,
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
                    id=call_id or self._next_call_id(),
                )
            )
        self._plan(PlannedReply(text=text, tool_calls=tuple(planned)))

    def fail(
        self,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Plan an HTTP error with an OpenAI-style `{"error": {...}}` body."""
        default_type, default_code, default_message = _ERRORS.get(status, ("api_error", None, "Request failed."))
        error = {
            "message": message or default_message,
            "type": error_type or default_type,
            "param": None,
            "code": code or default_code,
        }
        self._plan(PlannedReply(status=status, error=error, headers=tuple((headers or {}).items())))

    def reply_malformed(self, body: str = '{"choices": [{"index": 0,', *, status: int = 200) -> None:
        """Plan a body that is not a valid completion (sent as the only SSE event when streaming)."""
        self._plan(PlannedReply(status=status, raw_body=body))

    @property
    def pending(self) -> int:
        """How many planned replies have not been used yet."""
        with self._lock:
            return len(self._planned)

    def _plan(self, reply: PlannedReply) -> None:
        with self._lock:
            self._planned.append(reply)

    def _next_call_id(self) -> str:
        with self._lock:
            self._call_count += 1
            return f"call_fake_{self._call_count}"

    # --- serving ---------------------------------------------------------------------------------

    def _take(self, request: RecordedRequest) -> PlannedReply:
        with self._lock:
            self.requests.append(request)
            if request.problems:
                message = "; ".join(request.problems)
                return PlannedReply(status=400, error=_invalid_request(message))
            if not self._planned:
                return PlannedReply(status=400, error=_invalid_request("FakeOpenAI: no reply planned"))
            return self._planned.popleft()


def message_order_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What the real API rejects: tool calls not answered right after the assistant message, and tool
    messages that do not answer a call of the assistant message just before them."""
    problems = []
    open_calls: set[str] | None = None  # ids still unanswered in the current tool block
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if open_calls is None or call_id not in open_calls:
                problems.append(
                    f"messages[{index}]: a 'tool' message must answer a tool call of the preceding "
                    f"assistant message (tool_call_id {call_id!r})"
                )
            else:
                open_calls.discard(call_id)
            continue
        if open_calls:
            problems.append(
                f"messages[{index}]: tool calls {sorted(open_calls)} not answered before a {role!r} message"
            )
        open_calls = None
        if role == "assistant" and message.get("tool_calls"):
            open_calls = {call.get("id") for call in message["tool_calls"]}
    if open_calls:
        problems.append(f"tool calls {sorted(open_calls)} not answered at the end of the messages")
    return problems


def _invalid_request(message: str) -> dict[str, Any]:
    return {"message": message, "type": "invalid_request_error", "param": "messages", "code": None}


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._record_and_answer({})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw) if raw else {}
            except json.JSONDecodeError:
                body = {"_unparsed": raw.decode(errors="replace")}
            self._record_and_answer(body if isinstance(body, dict) else {"_unparsed": body})

        def _record_and_answer(self, body: dict[str, Any]) -> None:
            problems = []
            if self.command != "POST" or self.path != COMPLETIONS_PATH:
                problems.append(f"FakeOpenAI serves POST {COMPLETIONS_PATH} only, not {self.command} {self.path}")
            else:
                problems = message_order_problems(body.get("messages") or [])
            recorded = RecordedRequest(
                method=self.command,
                path=self.path,
                authorization=self.headers.get("Authorization"),
                body=body,
                problems=tuple(problems),
            )
            reply = fake._take(recorded)
            if reply.delay:
                time.sleep(reply.delay)
            if reply.error is not None:
                self._send_json(reply.status, {"error": reply.error}, reply.headers)
            elif recorded.stream:
                self._send_stream(body, reply)
            elif reply.raw_body is not None:
                self._send(reply.status, "application/json", reply.raw_body.encode(), reply.headers)
            else:
                self._send_json(reply.status, _completion(body, reply), reply.headers)

        def _send_json(self, status: int, payload: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
            self._send(status, "application/json", json.dumps(payload).encode(), headers)

        def _send(self, status: int, content_type: str, data: bytes, headers: tuple[tuple[str, str], ...]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _send_stream(self, body: dict[str, Any], reply: PlannedReply) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            if reply.raw_body is not None:
                self._event(reply.raw_body)
            else:
                for chunk in _chunks(body, reply):
                    self._event(json.dumps(chunk))
            self._event("[DONE]")

        def _event(self, data: str) -> None:
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

    return Handler


def _envelope(body: dict[str, Any], obj: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": obj,
        "created": int(time.time()),
        "model": body.get("model") or "fake",
        "system_fingerprint": "fp_fake",
    }


def _usage(reply: PlannedReply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }


def _finish_reason(reply: PlannedReply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def _completion(body: dict[str, Any], reply: PlannedReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in reply.tool_calls
        ]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(reply)}
    return {**_envelope(body, "chat.completion"), "choices": [choice], "usage": _usage(reply)}


def _chunks(body: dict[str, Any], reply: PlannedReply) -> list[dict[str, Any]]:
    envelope = _envelope(body, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**envelope, "choices": [choice]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if reply.text:
        words = reply.text.split(" ")
        chunks += [chunk({"content": word if n == 0 else f" {word}"}) for n, word in enumerate(words)]
    for index, call in enumerate(reply.tool_calls):
        start = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [start]}))
        middle = len(call.arguments) // 2
        for piece in (call.arguments[:middle], call.arguments[middle:]):
            if piece:
                chunks.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, _finish_reason(reply)))
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**envelope, "choices": [], "usage": _usage(reply)})
    return chunks
