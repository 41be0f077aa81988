"""A typed client of Airlock's external-agent API (SPEC section 12): open a request, wait for its decision,
cancel it, report what the tool did, and answer one. `Airlock` is synchronous, `AsyncAirlock` its twin.

Every call is retried on a dropped connection, a 5xx and a 429, with backoff. A request keeps the `requestId`
it was given (or one drawn once, before the first try), so a retry that reaches the console twice still opens
one request: the console answers the same request for the same id and body.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

Kind = Literal["approval", "question", "input", "plan"]

# The longest the console holds a long poll, in seconds (`GET /api/requests/{id}?wait=N`).
MAX_WAIT = 60
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class AirlockError(Exception):
    """A 4xx from the console (its problem+json): `status`, `code` (e.g. `request_conflict`), `detail`, and
    `errors` (`[{field, message}]`, for a 400)."""

    def __init__(self, status: int, code: str, detail: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail, self.errors = status, code, detail, errors or []


class RequestClosed(Exception):
    """The request closed without an answer: `reason` is `cancelled`, `expired` or `abandoned`."""

    def __init__(self, request_id: str, reason: str, decision: Decision) -> None:
        super().__init__(f"request {request_id} closed without an answer: {reason}")
        self.request_id, self.reason, self.decision = request_id, reason, decision


class WaitTimeout(TimeoutError):
    """`wait(..., timeout=...)` passed before the request was decided (it is still open)."""


@dataclass(frozen=True)
class Decision:
    """What became of a request (SPEC section 12): `result` is the SDK's result kind (`{"kind": "approved"}`,
    `{"kind": "denied-interactively-by-user", "feedback": ...}`, `{"kind": "cancelled", "reason": ...}`...);
    `arguments` the ones the tool may run with (edited ones where the approver edited them)."""

    result: dict[str, Any]
    approved: bool
    arguments: dict[str, Any] | None = None
    text: str | None = None
    json: Any = None
    action: str | None = None
    answered_by: str | None = None
    answered_at: str | None = None
    via: str | None = None
    receipt_id: str | None = None

    @property
    def kind(self) -> str:
        return str(self.result.get("kind", ""))

    @property
    def closed_unanswered(self) -> bool:
        return self.kind == "cancelled"

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Decision:
        return cls(
            result=dict(wire.get("result") or {}),
            approved=bool(wire.get("approved")),
            arguments=wire.get("arguments"),
            text=wire.get("text"),
            json=wire.get("json"),
            action=wire.get("action"),
            answered_by=wire.get("answeredBy"),
            answered_at=wire.get("answeredAt"),
            via=wire.get("via"),
            receipt_id=wire.get("receiptId"),
        )

    def wire(self) -> dict[str, Any]:
        """The decision as the console sends it (camelCase keys)."""
        return {
            "result": self.result,
            "approved": self.approved,
            "arguments": self.arguments,
            "text": self.text,
            "json": self.json,
            "action": self.action,
            "answeredBy": self.answered_by,
            "answeredAt": self.answered_at,
            "via": self.via,
            "receiptId": self.receipt_id,
        }


@dataclass(frozen=True)
class Opened:
    """The answer to opening a request: `decision` is set when a rule, a policy or a tool that needs no approval
    decided at once (`status == "decided"`); `created` is False when a retry named a request already open."""

    request_id: str
    session_id: str
    run_id: str
    status: Literal["pending", "decided"]
    decision: Decision | None
    created: bool

    @classmethod
    def from_wire(cls, wire: dict[str, Any], created: bool) -> Opened:
        decided = wire.get("decision")
        return cls(
            request_id=wire["requestId"],
            session_id=wire["sessionId"],
            run_id=wire["runId"],
            status=wire["status"],
            decision=Decision.from_wire(decided) if decided else None,
            created=created,
        )


@dataclass(frozen=True)
class Request:
    """A request as the console shows it: `status` is `pending`, `answered`, `expired`, `cancelled` or
    `abandoned`; `wire` is the whole JSON."""

    request_id: str
    status: str
    kind: str
    agent: str
    session_id: str
    run_id: str
    decision: Decision | None
    wire: dict[str, Any] = field(repr=False)

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Request:
        decided = wire.get("decision")
        return cls(
            request_id=wire["requestId"],
            status=wire["status"],
            kind=wire.get("kind", ""),
            agent=wire.get("agent", ""),
            session_id=wire.get("sessionId", ""),
            run_id=wire.get("runId", ""),
            decision=Decision.from_wire(decided) if decided else None,
            wire=wire,
        )


@dataclass(frozen=True)
class Answered:
    """What became of an answer (`POST /api/requests/{id}/responses`): `status` is `accepted`,
    `already_resolved`, `cancelled`, `not_an_approver`..."""

    status: str
    request_id: str
    message: str
    wire: dict[str, Any] = field(repr=False)


def open_body(
    kind: Kind,
    request_id: str,
    fields: dict[str, Any],
) -> dict[str, Any]:
    """The JSON body of `POST /api/agents/{name}/requests`: the given fields in camelCase, None left out (so a
    retry sends exactly the same body)."""
    body = {"requestId": request_id, "kind": kind}
    body.update({camel(name): value for name, value in fields.items() if value is not None})
    return body


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def answer_body(answer: dict[str, Any]) -> dict[str, Any]:
    return {camel(name): value for name, value in answer.items() if value is not None}


def _problem(response: httpx.Response) -> AirlockError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = str(body.get("code") or f"http_{response.status_code}")
    detail = str(body.get("detail") or body.get("title") or response.text[:500])
    return AirlockError(response.status_code, code, detail, body.get("errors"))


def _hold(deadline: float | None) -> int:
    """How long the next long poll holds: up to 60 s, no longer than what is left before `deadline`."""
    if deadline is None:
        return MAX_WAIT
    return max(0, min(MAX_WAIT, math.ceil(deadline - time.monotonic())))


def _closed(request_id: str, decision: Decision) -> RequestClosed:
    return RequestClosed(request_id, str(decision.result.get("reason") or "cancelled"), decision)


@dataclass
class _Retry:
    """Backoff between tries: `retries` more tries after the first, waits doubling from `backoff` seconds up to
    `max_backoff` (a 429's or 503's Retry-After when longer)."""

    retries: int = 4
    backoff: float = 0.25
    max_backoff: float = 8.0

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        delay = min(self.max_backoff, self.backoff * 2**attempt)
        after = response.headers.get("retry-after") if response is not None else None
        if after is not None and after.isdigit():
            delay = max(delay, min(float(after), self.max_backoff))
        return delay


class _Base:
    def __init__(
        self, base_url: str, token: str, *, timeout: float = 30.0, retries: int = 4, backoff: float = 0.25
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._retry = _Retry(retries=retries, backoff=backoff)

    def _done(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise _problem(response)
        return response.json() if response.content else None


class Airlock(_Base):
    """The synchronous client: `Airlock("http://127.0.0.1:8000", token)`; a context manager, or `close()`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout=timeout, retries=retries, backoff=backoff)
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=timeout, transport=transport)

    def __enter__(self) -> Airlock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self._http.request(
                    method, path, json=body, params=params, timeout=timeout if timeout is not None else self.timeout
                )
            except httpx.TransportError:
                if attempt >= self._retry.retries:
                    raise
            else:
                if response.status_code not in RETRIED_STATUSES or attempt >= self._retry.retries:
                    return response
            time.sleep(self._retry.delay(attempt, response))
            attempt += 1

    def request(
        self,
        agent: str,
        kind: Kind = "approval",
        *,
        request_id: str | uuid.UUID | None = None,
        session_id: str | None = None,
        tool_name: str | None = None,
        tool_call_id: str | None = None,
        arguments: dict[str, Any] | None = None,
        description: str | None = None,
        question: str | None = None,
        choices: list[str] | None = None,
        allow_freeform: bool | None = None,
        message: str | None = None,
        requested_schema: dict[str, Any] | None = None,
        summary: str | None = None,
        plan_content: str | None = None,
        expires_in: int | None = None,
    ) -> Opened:
        """Open a request of the external agent `agent` (`POST /api/agents/{agent}/requests`). Without
        `request_id` one is drawn here, once: every retry sends it. Raises AirlockError (e.g. 400
        `unknown_tool`, `invalid_arguments`; 409 `request_conflict` for a known id with another body)."""
        rid = str(request_id or uuid.uuid4())
        fields = {
            "session_id": session_id,
            "tool_name": tool_name,
            "tool_call_id": tool_call_id,
            "arguments": arguments,
            "description": description,
            "question": question,
            "choices": choices,
            "allow_freeform": allow_freeform,
            "message": message,
            "requested_schema": requested_schema,
            "summary": summary,
            "plan_content": plan_content,
            "expires_in": expires_in,
        }
        response = self._call("POST", f"/api/agents/{agent}/requests", body=open_body(kind, rid, fields))
        return Opened.from_wire(self._done(response), created=response.status_code == 201)

    def get(self, request_id: str | uuid.UUID, *, wait: int = 0) -> Request:
        """The request now, or once decided within `wait` seconds (at most 60)."""
        wait = max(0, min(int(wait), MAX_WAIT))
        params = {"wait": wait} if wait else None
        response = self._call("GET", f"/api/requests/{request_id}", params=params, timeout=self.timeout + wait)
        return Request.from_wire(self._done(response))

    def wait(self, request_id: str | uuid.UUID, timeout: float | None = None) -> Decision:
        """Hold until the request is decided (long polls of up to 60 s each); its decision. Raises RequestClosed
        when it closed unanswered (cancelled, expired, abandoned), WaitTimeout after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            got = self.get(request_id, wait=_hold(deadline))
            if got.decision is not None:
                if got.decision.closed_unanswered:
                    raise _closed(str(request_id), got.decision)
                return got.decision
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"request {request_id} was not decided within {timeout} s")

    def cancel(self, request_id: str | uuid.UUID) -> Request:
        """Give up on the request: it closes `cancelled` and leaves every inbox (409 `request_closed` once
        decided)."""
        return Request.from_wire(self._done(self._call("DELETE", f"/api/requests/{request_id}")))

    def report(
        self, request_id: str | uuid.UUID, success: bool, result: Any = None, error: str | None = None
    ) -> Request:
        """Record what the approved tool did (`tool.execution_complete` in the session and the audit)."""
        body = {"success": success, "result": result, "error": error}
        return Request.from_wire(self._done(self._call("POST", f"/api/requests/{request_id}/outcome", body=body)))

    def decide(self, request_id: str | uuid.UUID, **answer: Any) -> Answered:
        """Answer one request as a member of the inbox would: `approved`, `reason`, `remember`,
        `remember_arguments_only`, `override_arguments`, `text`, `json`, `action`, `content`."""
        response = self._call("POST", f"/api/requests/{request_id}/responses", body=answer_body(answer))
        wire = self._done(response)
        return Answered(wire["status"], wire["requestId"], wire.get("message", ""), wire)


class AsyncAirlock(_Base):
    """The asynchronous client, with the same calls as `Airlock` (awaited); `async with`, or `await aclose()`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout=timeout, retries=retries, backoff=backoff)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self.headers, timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncAirlock:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = await self._http.request(
                    method, path, json=body, params=params, timeout=timeout if timeout is not None else self.timeout
                )
            except httpx.TransportError:
                if attempt >= self._retry.retries:
                    raise
            else:
                if response.status_code not in RETRIED_STATUSES or attempt >= self._retry.retries:
                    return response
            await asyncio.sleep(self._retry.delay(attempt, response))
            attempt += 1

    async def request(
        self,
        agent: str,
        kind: Kind = "approval",
        *,
        request_id: str | uuid.UUID | None = None,
        session_id: str | None = None,
        tool_name: str | None = None,
        tool_call_id: str | None = None,
        arguments: dict[str, Any] | None = None,
        description: str | None = None,
        question: str | None = None,
        choices: list[str] | None = None,
        allow_freeform: bool | None = None,
        message: str | None = None,
        requested_schema: dict[str, Any] | None = None,
        summary: str | None = None,
        plan_content: str | None = None,
        expires_in: int | None = None,
    ) -> Opened:
        """As `Airlock.request`."""
        rid = str(request_id or uuid.uuid4())
        fields = {
            "session_id": session_id,
            "tool_name": tool_name,
            "tool_call_id": tool_call_id,
            "arguments": arguments,
            "description": description,
            "question": question,
            "choices": choices,
            "allow_freeform": allow_freeform,
            "message": message,
            "requested_schema": requested_schema,
            "summary": summary,
            "plan_content": plan_content,
            "expires_in": expires_in,
        }
        response = await self._call("POST", f"/api/agents/{agent}/requests", body=open_body(kind, rid, fields))
        return Opened.from_wire(self._done(response), created=response.status_code == 201)

    async def get(self, request_id: str | uuid.UUID, *, wait: int = 0) -> Request:
        """As `Airlock.get`."""
        wait = max(0, min(int(wait), MAX_WAIT))
        params = {"wait": wait} if wait else None
        response = await self._call("GET", f"/api/requests/{request_id}", params=params, timeout=self.timeout + wait)
        return Request.from_wire(self._done(response))

    async def wait(self, request_id: str | uuid.UUID, timeout: float | None = None) -> Decision:
        """As `Airlock.wait`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            got = await self.get(request_id, wait=_hold(deadline))
            if got.decision is not None:
                if got.decision.closed_unanswered:
                    raise _closed(str(request_id), got.decision)
                return got.decision
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"request {request_id} was not decided within {timeout} s")

    async def cancel(self, request_id: str | uuid.UUID) -> Request:
        """As `Airlock.cancel`."""
        return Request.from_wire(self._done(await self._call("DELETE", f"/api/requests/{request_id}")))

    async def report(
        self, request_id: str | uuid.UUID, success: bool, result: Any = None, error: str | None = None
    ) -> Request:
        """As `Airlock.report`."""
        body = {"success": success, "result": result, "error": error}
        response = await self._call("POST", f"/api/requests/{request_id}/outcome", body=body)
        return Request.from_wire(self._done(response))

    async def decide(self, request_id: str | uuid.UUID, **answer: Any) -> Answered:
        """As `Airlock.decide`."""
        response = await self._call("POST", f"/api/requests/{request_id}/responses", body=answer_body(answer))
        wire = self._done(response)
        return Answered(wire["status"], wire["requestId"], wire.get("message", ""), wire)
