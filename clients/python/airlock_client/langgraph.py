"""The LangGraph adapter: a graph's `interrupt()` answered in Airlock's inbox (SPEC section 12).

A node calls `interrupt(value)`; the graph (compiled with a checkpointer) stops and `invoke` returns its
interrupts (`result["__interrupt__"]`). `invoke_with_airlock` opens an Airlock request for each interrupt,
waits for the decisions and resumes the graph with `Command(resume={interrupt id: answer})`, until it ends
without interrupts. The node reads the answer as `interrupt(...)`'s return value.

The interrupt's value says what to ask (keys in camelCase or snake_case):
- `{"kind": "approval", "toolName": "deploy", "arguments": {...}, "toolCallId"?, "description"?}`
- `{"kind": "question", "question": "Which region?", "choices"?: [...], "allowFreeform"?: bool}`
- `{"kind": "input", "message": "...", "requestedSchema": {...}}`
- `{"kind": "plan", "summary": "...", "planContent": "..."}`
- without `kind`, it is read from the keys: `toolName` an approval, `planContent` a plan, `requestedSchema` an
  input, else a question; a plain string is a question. `expiresIn` (seconds) applies to any kind.

The answer is the decision as a dict, so the node knows who decided:
`{"requestId", "approved", "arguments" (edited ones where edited), "text", "json", "action", "answeredBy",
"answeredAt", "via", "result": {"kind": ...}, "receiptId"}`. A request that closed unanswered (expired,
cancelled) answers `approved: False` with `result: {"kind": "cancelled", "reason": ...}`.

Request ids are derived from the thread id and the interrupt id (uuid5), so invoking the same paused thread
again finds the same requests; the Airlock session is the thread id unless `session_id` is given.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langgraph.types import Command, Interrupt

from airlock_client.client import Airlock, AsyncAirlock, Decision, Kind, Opened, RequestClosed

NAMESPACE = uuid.UUID("0b7d2a4c-93e1-4f65-8c2d-5e9a1f3b7c48")

FIELDS = (
    "session_id",
    "tool_name",
    "tool_call_id",
    "arguments",
    "description",
    "question",
    "choices",
    "allow_freeform",
    "message",
    "requested_schema",
    "summary",
    "plan_content",
    "expires_in",
)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def request_fields(value: Any) -> tuple[Kind, dict[str, Any]]:
    """The Airlock request an interrupt's value asks for: its kind and the client's keyword arguments."""
    if isinstance(value, str):
        return "question", {"question": value}
    if not isinstance(value, dict):
        raise ValueError(f"an interrupt for Airlock is a dict or a string, not {type(value).__name__}")
    fields = {_snake(key): item for key, item in value.items()}
    kind = fields.pop("kind", None)
    if kind is None:
        if "tool_name" in fields:
            kind = "approval"
        elif "plan_content" in fields:
            kind = "plan"
        elif "requested_schema" in fields:
            kind = "input"
        else:
            kind = "question"
    if kind not in ("approval", "question", "input", "plan"):
        raise ValueError(f"an interrupt's kind is approval, question, input or plan, not {kind!r}")
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValueError(f"an interrupt for Airlock has no field {', '.join(unknown)}")
    return kind, fields


def request_id_for(airlock_agent: str, thread_id: str, interrupt_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"langgraph/{airlock_agent}/{thread_id}/{interrupt_id}"))


def resume_value(request_id: str, decision: Decision) -> dict[str, Any]:
    """What `interrupt()` returns in the node: the decision, with who gave it."""
    return {"requestId": request_id, **decision.wire()}


def interrupts_of(result: Any) -> Sequence[Interrupt]:
    """The interrupts `invoke` returned: `result["__interrupt__"]`, or a `GraphOutput`'s (`version="v2"`)."""
    if isinstance(result, dict):
        return list(result.get("__interrupt__") or [])
    return list(getattr(result, "interrupts", None) or [])


def _thread(config: dict[str, Any]) -> str:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    if thread_id is None:
        raise ValueError("the graph's config needs configurable.thread_id (interrupts need a checkpointer)")
    return str(thread_id)


def _opening(
    interrupt: Interrupt, airlock_agent: str, thread_id: str, session_id: str | None
) -> tuple[str, Kind, dict[str, Any]]:
    kind, fields = request_fields(interrupt.value)
    fields.setdefault("session_id", session_id or thread_id)
    return request_id_for(airlock_agent, thread_id, interrupt.id), kind, fields


def invoke_with_airlock(
    graph: Any,
    input: Any,
    config: dict[str, Any],
    *,
    airlock: Airlock,
    airlock_agent: str,
    session_id: str | None = None,
    wait_timeout: float | None = None,
    on_request: Callable[[Opened], None] | None = None,
    **invoke_kwargs: Any,
) -> Any:
    """`graph.invoke(input, config)`, each interrupt answered through the Airlock agent `airlock_agent`, the
    graph resumed with the answers until it ends; its last result. `on_request` is called with each request
    opened; `wait_timeout` bounds each wait (WaitTimeout)."""
    thread_id = _thread(config)
    result = graph.invoke(input, config, **invoke_kwargs)
    while interrupts := interrupts_of(result):
        answers = {}
        for interrupt in interrupts:
            rid, kind, fields = _opening(interrupt, airlock_agent, thread_id, session_id)
            opened = airlock.request(airlock_agent, kind, request_id=rid, **fields)
            if on_request is not None:
                on_request(opened)
            answers[interrupt.id] = resume_value(opened.request_id, _sync_decision(airlock, opened, wait_timeout))
        result = graph.invoke(Command(resume=answers), config, **invoke_kwargs)
    return result


def _sync_decision(airlock: Airlock, opened: Opened, wait_timeout: float | None) -> Decision:
    if opened.decision is not None:
        return opened.decision
    try:
        return airlock.wait(opened.request_id, wait_timeout)
    except RequestClosed as closed:
        return closed.decision


async def ainvoke_with_airlock(
    graph: Any,
    input: Any,
    config: dict[str, Any],
    *,
    airlock: AsyncAirlock | Airlock,
    airlock_agent: str,
    session_id: str | None = None,
    wait_timeout: float | None = None,
    on_request: Callable[[Opened], None] | None = None,
    **invoke_kwargs: Any,
) -> Any:
    """As `invoke_with_airlock`, with `graph.ainvoke`; the interrupts of one step are asked all at once."""
    thread_id = _thread(config)

    async def answer(interrupt: Interrupt) -> tuple[str, dict[str, Any]]:
        rid, kind, fields = _opening(interrupt, airlock_agent, thread_id, session_id)
        if isinstance(airlock, AsyncAirlock):
            opened = await airlock.request(airlock_agent, kind, request_id=rid, **fields)
            if on_request is not None:
                on_request(opened)
            if opened.decision is not None:
                return interrupt.id, resume_value(opened.request_id, opened.decision)
            try:
                decision = await airlock.wait(opened.request_id, wait_timeout)
            except RequestClosed as closed:
                decision = closed.decision
        else:
            opened = await asyncio.to_thread(airlock.request, airlock_agent, kind, request_id=rid, **fields)
            if on_request is not None:
                on_request(opened)
            decision = await asyncio.to_thread(_sync_decision, airlock, opened, wait_timeout)
        return interrupt.id, resume_value(opened.request_id, decision)

    result = await graph.ainvoke(input, config, **invoke_kwargs)
    while interrupts := interrupts_of(result):
        answers = dict(await asyncio.gather(*(answer(interrupt) for interrupt in interrupts)))
        result = await graph.ainvoke(Command(resume=answers), config, **invoke_kwargs)
    return result
