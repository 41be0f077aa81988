"""A small typed client for Airlock's session stream (SPEC section 10): follow a whole conversation, across the
runs that answers continue it in, as the Copilot SDK's own session events (`copilot.session_events`, from
`github-copilot-sdk`). Copy it into your own code; it needs `httpx2` (the HTTP client pydantic-ai installs) and
`github-copilot-sdk`.

    from copilot.session_events import SessionEventType

    from airlock_events import SessionStream

    stream = SessionStream("http://127.0.0.1:8000", token="al_…", session_id="s1")
    for event in stream.events():
        if event.type == SessionEventType.ASSISTANT_MESSAGE_DELTA:
            print(event.data.delta_content, end="")
        elif event.type == SessionEventType.SESSION_IDLE:
            break  # the turn ended; `stream.last_event_id` resumes after it

Airlock's own types (docs/events.md: `run.*`, `request.answered`, `request.terminated`, …) read as the SDK reads
any type it does not know: `SessionEventType.UNKNOWN`, their name in `event.raw_type`, their data in
`event.data.raw`. The stream resumes by itself after a dropped connection (`Last-Event-ID`): no event is lost or
repeated.
"""

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
from copilot.session_events import SessionEvent


class StreamError(Exception):
    """The server refused the stream (a 4xx problem: `status`, `code`, `detail`)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('code')}: {problem.get('detail')}")
        self.status, self.code, self.detail = status, problem.get("code"), problem.get("detail")


class SessionStream:
    """The events of session `session_id`, from its first (or after `last_event_id`) on, live."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str,
        session_id: str,
        last_event_id: str | None = None,
        retries: int = 5,
        timeout: float = 30.0,
    ) -> None:
        self.url = f"{base_url.rstrip('/')}/api/sessions/{session_id}/events"
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        self.last_event_id = last_event_id
        self.retries, self.timeout = retries, timeout
        self.reconnects = 0

    def events(self) -> Iterator[SessionEvent]:
        """Every event, in order, resuming after a dropped connection (up to `retries` times in a row); ends
        when the server ends the stream (the session was deleted and its last turn ended)."""
        failures = 0
        while True:
            try:
                for event in self._connect():
                    failures = 0
                    yield event
                return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                failures += 1
                if failures > self.retries:
                    raise
                self.reconnects += 1
                time.sleep(min(0.1 * 2**failures, 2.0))

    def _connect(self) -> Iterator[SessionEvent]:
        headers = dict(self.headers)
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        with (
            httpx.Client(timeout=httpx.Timeout(self.timeout, read=None)) as client,
            client.stream("GET", self.url, headers=headers) as response,
        ):
            if response.status_code != 200:
                response.read()
                raise StreamError(response.status_code, _problem(response))
            for frame_id, data in _frames(response.iter_lines()):
                event = SessionEvent.from_dict(json.loads(data))
                if frame_id is not None:  # a stored event's: the cursor to resume after it
                    self.last_event_id = frame_id
                yield event


def _frames(lines: Iterator[str]) -> Iterator[tuple[str | None, str]]:
    """Server-sent events as (id, data); comments and frames without data are skipped."""
    frame_id: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield frame_id, "\n".join(data)
            frame_id, data = None, []
        elif line.startswith("id:"):
            frame_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


def _problem(response: Any) -> dict[str, Any]:
    try:
        problem = response.json()
    except ValueError:
        return {"code": "http_error", "detail": response.text[:200]}
    return problem if isinstance(problem, dict) else {"code": "http_error", "detail": str(problem)}
