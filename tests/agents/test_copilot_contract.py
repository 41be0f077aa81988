"""The Copilot SDK contract (SPEC section 10): a client written against the SDK reads every event Airlock sends
with no special case. Each kind of pause is driven through the API (the scripted model, the bundled MCP demo
server, a real sub-agent), and every event it produced is read where a client reads it — the per-run SSE of the
runs the API starts, `GET /api/runs/{id}/events` (JSON and SSE), the session's JSON and its SSE — and checked
with the SDK's own parser (`copilot.session_events.SessionEvent.from_dict`):

- it parses into its own type: never `UNKNOWN` for a type the SDK defines (Airlock's own types are
  `agents.payloads.EXTENSION_TYPES`);
- its `data` is exactly what the SDK reads of it (`to_dict()` of the parsed data): no field the SDK does not
  define, none it requires missing, enum values the SDK's;
- its `ephemeral` is what the SDK's guide says for its type (`SDK_EPHEMERAL`, copied from the guide, not from
  Airlock);
- the session keeps the guide's order and chain: turns end after their tools (a call that waits on a request
  completes in the continuation's turn), every tool call the model makes has exactly one
  `tool.execution_start` and one `tool.execution_complete` (`success: false` with an `error` when it did not
  run or failed), every request's `*.requested` one completion, and `parentId` is the previous event of the
  session, across runs (null once, at its first event).

Then each kind's own facts, in the SDK's fields (a denial's words in `feedback`, a question's choices, ...).
"""

import dataclasses
import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from copilot.session_events import SessionEvent, SessionEventType
from django.test import AsyncClient

from agents.payloads import EXTENSION_TYPES
from tests.agents.test_events import frames, read_stream, sse_headers, thread_connections  # noqa: F401
from tests.agents.test_session_stream import open_stream
from tests.conftest import Persona, grant
from tests.helpers import EMAIL, call_line, drain_queued, make_agent
from tests.policies.test_policies_api import guarded, hold_hooks, mail

# The guide's "All event types at a glance", column Ephemeral (../shared/reference/copilot-streaming-events.md).
SDK_EPHEMERAL = frozenset(
    {
        "assistant.intent",
        "assistant.reasoning_delta",
        "assistant.streaming_delta",
        "assistant.message_delta",
        "assistant.usage",
        "tool.execution_partial_result",
        "tool.execution_progress",
        "session.idle",
        "session.title_changed",
        "session.usage_info",
        "user_input.requested",
        "user_input.completed",
        "elicitation.requested",
        "elicitation.completed",
        "command.queued",
        "command.completed",
        "session_limits_exhausted.requested",
        "session_limits_exhausted.completed",
        "exit_plan_mode.requested",
        "exit_plan_mode.completed",
    }
)
REQUESTS = ("permission", "user_input", "elicitation", "exit_plan_mode", "session_limits_exhausted", "external_tool")


# --- one event ------------------------------------------------------------------------------------------


def differences(sent: Any, read: Any, path: str = "data") -> list[str]:
    """Where what Airlock sent differs from what the SDK read of it (`read`: its `to_dict()`)."""
    if isinstance(sent, dict) and isinstance(read, dict):
        problems = [f"{path}.{key}: not an SDK field" for key in sent.keys() - read.keys()]
        problems += [f"{path}.{key}: added by the SDK (missing)" for key in read.keys() - sent.keys()]
        for key in sent.keys() & read.keys():
            problems += differences(sent[key], read[key], f"{path}.{key}")
        return problems
    if isinstance(sent, list) and isinstance(read, list) and len(sent) == len(read):
        return [p for n, (a, b) in enumerate(zip(sent, read, strict=True)) for p in differences(a, b, f"{path}[{n}]")]
    numbers = (int, float)
    if isinstance(sent, numbers) and isinstance(read, numbers) and not isinstance(sent, bool):
        return [] if math.isclose(sent, read, rel_tol=1e-9, abs_tol=1e-6) else [f"{path}: {sent!r} read as {read!r}"]
    return [] if sent == read else [f"{path}: {sent!r} read as {read!r}"]


def event_problems(envelope: dict[str, Any]) -> list[str]:
    """What an SDK client would refuse or lose in one envelope."""
    kind = envelope.get("type")
    try:
        parsed = SessionEvent.from_dict(envelope)
    except Exception as error:
        return [f"{kind}: refused by the SDK ({type(error).__name__}: {error})"]
    if parsed.type == SessionEventType.UNKNOWN:
        return [] if kind in EXTENSION_TYPES else [f"{kind}: neither an SDK type nor a listed extension"]
    problems = [f"{kind}: {d}" for d in differences(envelope["data"], parsed.data.to_dict())]
    if envelope.get("ephemeral") is not (kind in SDK_EPHEMERAL):
        problems.append(f"{kind}: ephemeral {envelope.get('ephemeral')!r}, the SDK says {kind in SDK_EPHEMERAL}")
    return problems


# --- the session ----------------------------------------------------------------------------------------


def order_problems(events: list[dict[str, Any]]) -> list[str]:
    """The guide's turn flow over a session's stored events (in session order), per agent (`agentId`)."""
    problems: list[str] = []
    open_turns: dict[str, tuple[str, int, str]] = {}  # agent -> (turnId, index, runId)
    turn_of: dict[int, tuple[str, str]] = {}  # index of a tool event -> (agent, turnId)
    turn_end: dict[tuple[str, str], int] = {}
    starts: dict[tuple[str, str], list[int]] = {}
    completes: dict[tuple[str, str], list[int]] = {}
    requested: dict[str, list[int]] = {}
    completed: dict[str, list[int]] = {}
    tool_requests: list[tuple[tuple[str, str], int]] = []
    for index, event in enumerate(events):
        kind, data, agent = event["type"], event["data"], event.get("agentId", "")
        if kind == "assistant.turn_start":
            if agent in open_turns:
                problems.append(f"turn {data['turnId']} starts inside turn {open_turns[agent][0]} ({agent or 'main'})")
            open_turns[agent] = (data["turnId"], index, event["runId"])
        elif kind == "assistant.turn_end":
            if open_turns.get(agent, ("",))[0] != data["turnId"]:
                problems.append(f"turn_end {data['turnId']} ends no open turn ({agent or 'main'})")
            open_turns.pop(agent, None)
            turn_end[(agent, data["turnId"])] = index
        elif kind in ("tool.execution_start", "tool.execution_complete"):
            if agent not in open_turns:
                problems.append(f"{kind} of {data.get('toolName') or data['toolCallId']} outside any turn")
            else:
                turn_of[index] = (agent, open_turns[agent][0])
            # A call is its id in its agent's turns (the scripted model numbers a sub-agent's calls from 1 again).
            call = (agent, data["toolCallId"])
            (starts if kind == "tool.execution_start" else completes).setdefault(call, []).append(index)
            if kind == "tool.execution_complete" and data.get("success") is False and not data.get("error"):
                problems.append(f"tool.execution_complete of {data['toolCallId']}: no error on a failure")
        elif kind == "assistant.message":
            tool_requests += [((agent, r["toolCallId"]), index) for r in data.get("toolRequests") or []]
        elif kind == "run.started" or (kind.startswith("run.") and kind != "run.retrying"):
            for turn_agent, (turn_id, _, run_id) in list(open_turns.items()):
                if run_id != event["runId"] or kind != "run.started":
                    problems.append(f"turn {turn_id} ({turn_agent or 'main'}) still open at {kind}")
                    open_turns.pop(turn_agent)
        family, _, moment = kind.partition(".")
        if family in REQUESTS and moment in ("requested", "completed"):
            (requested if moment == "requested" else completed).setdefault(data["requestId"], []).append(index)
    problems += [f"turn {turn} ({agent or 'main'}) never ends" for agent, (turn, _, _) in open_turns.items()]
    for call_id, at in tool_requests:
        if len([i for i in starts.get(call_id, []) if i > at]) != 1:
            problems.append(f"tool call {call_id}: {len(starts.get(call_id, []))} tool.execution_start, not 1")
    for call_id, started in starts.items():
        ended = completes.get(call_id, [])
        if len(started) != 1 or len(ended) != 1 or ended[0] < started[0]:
            problems.append(f"tool call {call_id}: {len(started)} start(s), {len(ended)} complete(s)")
            continue
        start, end = started[0], ended[0]
        turn = turn_of.get(start)
        same_run = events[start]["runId"] == events[end]["runId"]
        if turn is not None and same_run and turn_end.get(turn, len(events)) < end:
            problems.append(f"tool call {call_id}: its turn ended before it completed")
    problems += [f"tool call {c}: completes without starting" for c in completes.keys() - starts.keys()]
    for request_id, asked in requested.items():
        answered = completed.get(request_id, [])
        if len(answered) != 1 or answered[0] < asked[0]:
            problems.append(f"request {request_id}: {len(answered)} completion(s) after its request, not 1")
    problems += [f"request {r}: completed, never requested" for r in completed.keys() - requested.keys()]
    return problems


def chain_problems(stored: list[dict[str, Any]], stream: list[dict[str, Any]]) -> list[str]:
    """`parentId`: null at the session's first event only; a stored event's parent is the stored event before it
    in the session, across runs; an ephemeral one's is the stored event it follows (`stream`: in the order a
    stream sent them, stored ones with an SSE id)."""
    problems = [
        f"{event['type']} (run {event['runId'][:8]}, #{event['sequence']}): parentId {event['parentId']}, not {before}"
        for event, before in zip(stored, [None] + [e["id"] for e in stored[:-1]], strict=True)
        if event["parentId"] != before
    ]
    predecessor = {e["id"]: before for e, before in zip(stored, [None] + [e["id"] for e in stored[:-1]], strict=True)}
    last: str | None = None
    for frame in stream:
        envelope = frame["data"]
        if "id" in frame:
            last = envelope["id"]
        elif last is None and envelope["parentId"] not in predecessor.values():
            problems.append(f"ephemeral {envelope['type']} chained to {envelope['parentId']}, no event of the session")
        elif last is not None and envelope["parentId"] != last:
            problems.append(f"ephemeral {envelope['type']}: parentId {envelope['parentId']}, not the event before")
    return problems


# --- driving a session through the API ------------------------------------------------------------------


class Session:
    """One session driven through the API, and every envelope a client read of it, by where it was read."""

    def __init__(self, persona: Persona, agent: str, key: str) -> None:
        self.persona, self.agent, self.key = persona, agent, key
        self.run_streams: list[list[dict[str, Any]]] = []  # per-run SSE frames (of the runs the API started)
        self.results: list[dict[str, Any]] = []

    async def post(self, **body: Any) -> dict[str, Any]:
        """A run through `POST /api/agents/{name}/runs` with `Accept: text/event-stream`; its result."""
        response = await AsyncClient().post(
            f"/api/agents/{self.agent}/runs",
            json.dumps({"sessionId": self.key, **body}),
            content_type="application/json",
            headers=sse_headers(self.persona),
        )
        streamed = frames(await read_stream(response))
        assert streamed[-1]["event"] == "done", streamed[-1]
        self.run_streams.append(streamed[:-1])
        self.results.append(streamed[-1]["data"])
        return streamed[-1]["data"]

    async def respond(self, asked: dict[str, Any], index: int = 0, **answer: Any) -> dict[str, Any]:
        """Answer a pending request as the inbox does; the continuation it starts runs (a worker's turn)."""
        body = {"requestId": asked["pendingRequests"][index]["requestId"], **answer}
        response = await sync_to_async(self.persona.api)("POST", f"/api/runs/{asked['runId']}/responses", body)
        outcome = response.json()
        assert outcome["status"] == "accepted", outcome
        if outcome["continuationRunId"] is None:
            return outcome
        await sync_to_async(drain_queued)(1)
        got = await sync_to_async(self.persona.api)("GET", f"/api/runs/{outcome['continuationRunId']}")
        self.results.append(got.json())
        return got.json()

    async def api(self, method: str, path: str, body: Any = None) -> Any:
        response = await sync_to_async(self.persona.api)(method, path, body)
        assert response.status_code == 200, response.content
        return response.json()

    async def read(self) -> dict[str, list[dict[str, Any]]]:
        """Every envelope of the session, from each place a client reads it (SSE frames keep their SSE id)."""
        runs = await self.api("GET", f"/api/runs?sessionId={self.key}&limit=100")
        run_ids = [r["runId"] for r in reversed(runs["items"])]  # newest first
        stored = (await self.api("GET", f"/api/sessions/{self.key}/events"))["items"]
        per_run_json = [e for run_id in run_ids for e in (await self.api("GET", f"/api/runs/{run_id}/events"))["items"]]
        per_run_sse = []
        for run_id in run_ids:
            response = await AsyncClient().get(f"/api/runs/{run_id}/events", headers=sse_headers(self.persona))
            per_run_sse += [f for f in frames(await read_stream(response)) if f["event"] != "done"]
        stream = await open_stream(self.persona, self.key)
        session_sse = []
        for _ in range(sum(1 for e in stored if e["type"] in TURN_END_TYPES)):
            session_sse += await stream.turn()
        await stream.close()
        assert [e["id"] for e in per_run_json] == [e["id"] for e in stored]
        return {
            "stored": stored,
            "per-run SSE (live)": [f for run in self.run_streams for f in run],
            "per-run SSE (replayed)": per_run_sse,
            "session SSE": session_sse,
        }


TURN_END_TYPES = {"run.completed", "run.failed", "run.cancelled", "run.blocked", "run.awaiting"}


def contract_problems(read: dict[str, list[dict[str, Any]]], session: Session) -> list[str]:
    """Every problem an SDK client meets in the session, each once (the same event is read in several places)."""
    problems: dict[str, None] = {}
    stored = read["stored"]
    for where, items in read.items():
        for item in items:
            envelope = item if where == "stored" else item["data"]
            for problem in event_problems(envelope):
                problems[problem] = None
    for problem in order_problems(stored):
        problems[problem] = None
    for stream in (read["session SSE"], *session.run_streams):
        for problem in chain_problems(stored, stream):
            problems[problem] = None
    return list(problems)


# --- the kinds of pause ---------------------------------------------------------------------------------


def of_type(read: dict[str, list[dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in read["stored"] if e["type"] == kind]


def streamed(read: dict[str, list[dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    return [f["data"]["data"] for f in read["session SSE"] if f["event"] == kind]


async def reply(s: Session) -> None:
    assert (await s.post(message="hello there"))["status"] == "completed"


def check_reply(read: dict[str, Any]) -> None:
    assert [m["content"] for m in of_type(read, "assistant.message")] == ["You said: hello there"]
    assert streamed(read, "session.title_changed") == [{"title": "hello there"}]


async def server_tool(s: Session) -> None:
    assert (await s.post(message=call_line("get_time")))["status"] == "completed"


def check_server_tool(read: dict[str, Any]) -> None:
    [start] = of_type(read, "tool.execution_start")
    [complete] = of_type(read, "tool.execution_complete")
    assert start["toolName"] == "get_time" and complete["success"] is True and complete["result"]["content"]


async def approval_approved(s: Session) -> None:
    asked = await s.post(message=call_line("send_email", EMAIL))
    assert (await s.respond(asked, approved=True))["status"] == "completed"


def check_approval_approved(read: dict[str, Any]) -> None:
    [requested] = of_type(read, "permission.requested")
    asked = requested["permissionRequest"]
    assert (asked["kind"], asked["toolName"], asked["args"]) == ("custom-tool", "send_email", EMAIL)
    assert asked["toolDescription"] and asked["toolCallId"]
    [completed] = of_type(read, "permission.completed")
    assert completed["result"] == {"kind": "approved"} and completed["decisionSource"] == "human_response"
    assert completed["toolCallId"] == asked["toolCallId"]


async def approval_denied(s: Session) -> None:
    asked = await s.post(message=call_line("send_email", EMAIL))
    assert (await s.respond(asked, approved=False, reason="Not to customers."))["status"] == "completed"


def check_approval_denied(read: dict[str, Any]) -> None:
    [completed] = of_type(read, "permission.completed")
    assert completed["result"] == {"kind": "denied-interactively-by-user", "feedback": "Not to customers."}
    [complete] = of_type(read, "tool.execution_complete")
    assert complete["success"] is False and "Not to customers." in complete["error"]["message"]


async def remembered_rule(s: Session) -> None:
    asked = await s.post(message=call_line("send_email", EMAIL))
    await s.respond(asked, approved=True, remember=True)
    assert (await s.post(message=call_line("send_email", EMAIL)))["status"] == "completed"


def check_remembered_rule(read: dict[str, Any]) -> None:
    by_rule = of_type(read, "permission.completed")[-1]
    assert by_rule["result"] == {"kind": "approved"} and by_rule["decisionSource"] == "host_policy"


async def question(s: Session) -> None:
    arguments = {"question": "Which city?", "choices": ["Paris", "Rome"]}
    asked = await s.post(message=call_line("ask_user", arguments))
    assert (await s.respond(asked, text="Paris"))["output"] == "ask_user: Paris"


def check_question(read: dict[str, Any]) -> None:
    # SPEC section 9: the question and its choices are on the pending request itself.
    [pending] = read["results"][0]["pendingRequests"]
    asked = ("Which city?", ["Paris", "Rome"], False)
    assert (pending["question"], pending["choices"], pending["allowFreeform"]) == asked
    [requested] = of_type(read, "user_input.requested")
    assert (requested["question"], requested["choices"], requested["allowFreeform"]) == asked
    [completed] = of_type(read, "user_input.completed")
    assert completed == {"requestId": requested["requestId"], "answer": "Paris", "wasFreeform": False}


async def plan_approved(s: Session) -> None:
    asked = await s.post(message=call_line("propose_plan", {"steps": ["Draft", "Send"]}))
    assert (await s.respond(asked, approved=True))["output"] == "propose_plan: approved"


def check_plan_approved(read: dict[str, Any]) -> None:
    [requested] = of_type(read, "exit_plan_mode.requested")
    assert requested["planContent"] == "1. Draft\n2. Send"
    assert requested["recommendedAction"] in requested["actions"]
    [completed] = of_type(read, "exit_plan_mode.completed")
    assert completed["approved"] is True and completed["selectedAction"] == requested["recommendedAction"]


async def plan_revised(s: Session) -> None:
    asked = await s.post(message=call_line("propose_plan", {"steps": ["Draft", "Send"]}))
    assert (await s.respond(asked, approved=False, text="Ask legal first."))["status"] == "completed"


def check_plan_revised(read: dict[str, Any]) -> None:
    [completed] = of_type(read, "exit_plan_mode.completed")
    assert completed == {"requestId": completed["requestId"], "approved": False, "feedback": "Ask legal first."}


async def model_call_limit(s: Session) -> None:
    asked = await s.post(message=call_line("get_time"))
    assert asked["status"] == "awaiting_approval" and asked["pendingRequests"][0]["kind"] == "continuation"
    assert (await s.respond(asked, approved=True))["status"] == "completed"


def check_model_call_limit(read: dict[str, Any]) -> None:
    [requested] = of_type(read, "session_limits_exhausted.requested")
    assert (requested["maxAiCredits"], requested["usedAiCredits"]) == (1, 1)
    [completed] = of_type(read, "session_limits_exhausted.completed")
    assert completed["response"] == {"action": "add", "additionalAiCredits": 1}


async def client_tool(s: Session) -> None:
    asked = await s.post(message=call_line("get_user_location", {"precision": "city"}))
    [pending] = asked["pendingRequests"]
    result = await s.post(toolResults=[{"callId": pending["callId"], "result": {"city": "Lyon"}}])
    assert result["status"] == "completed"


def check_client_tool(read: dict[str, Any]) -> None:
    [requested] = of_type(read, "external_tool.requested")
    assert (requested["toolName"], requested["arguments"]) == ("get_user_location", {"precision": "city"})
    assert of_type(read, "external_tool.completed") == [{"requestId": requested["requestId"]}]
    [complete] = of_type(read, "tool.execution_complete")
    assert complete["success"] is True and json.loads(complete["result"]["content"]) == {"city": "Lyon"}


async def mcp_form(s: Session) -> None:
    asked = await s.post(message=call_line("book_meeting", {"topic": "roadmap"}))
    assert asked["status"] == "awaiting_approval"
    asked = await s.respond(asked, approved=True)
    assert asked["status"] == "awaiting_input", asked
    content = {"day": "Friday"}
    result = await s.post(
        inputResponses=[{"requestId": asked["pendingRequests"][0]["requestId"], "action": "accept", "content": content}]
    )
    assert result["status"] == "completed", result


def check_mcp_form(read: dict[str, Any]) -> None:
    [requested] = of_type(read, "permission.requested")
    asked = requested["permissionRequest"]
    assert (asked["kind"], asked["serverName"], asked["toolName"]) == ("mcp", "meetings", "book_meeting")
    assert asked["args"] == {"topic": "roadmap"} and asked["readOnly"] is False
    [elicited] = of_type(read, "elicitation.requested")
    assert elicited["message"] == "Which day should I book?" and elicited["requestedSchema"]["type"] == "object"
    [answered] = of_type(read, "elicitation.completed")
    assert answered == {"requestId": elicited["requestId"], "action": "accept", "content": {"day": "Friday"}}
    [start] = of_type(read, "tool.execution_start")
    assert start["mcpServerName"] == "meetings"


async def sub_agent(s: Session) -> None:
    task = call_line("send_email", EMAIL)
    asked = await s.post(message=f"call researcher {json.dumps({'task': task})}")
    assert asked["status"] == "awaiting_approval", asked
    assert (await s.respond(asked, approved=True))["status"] == "completed"


def check_sub_agent(read: dict[str, Any]) -> None:
    [started] = of_type(read, "subagent.started")
    assert (started["agentName"], started["agentDisplayName"]) == ("researcher", "Researcher")
    assert started["agentDescription"] == "Looks things up."
    [completed] = of_type(read, "subagent.completed")
    assert completed["toolCallId"] == started["toolCallId"]
    inner = [e for e in read["stored"] if e.get("agentId")]
    assert inner and {e["type"] for e in inner} >= {"permission.requested", "permission.completed"}


async def cancel(s: Session) -> None:
    asked = await s.post(message=call_line("send_email", EMAIL))
    assert (await s.api("POST", f"/api/runs/{asked['runId']}/cancel"))["status"] == "cancelled"
    # The next message closes the call that never ran.
    assert (await s.post(message="never mind"))["status"] == "completed"


def check_cancel(read: dict[str, Any]) -> None:
    assert of_type(read, "abort") == [{"reason": "user_initiated"}]
    assert {"aborted": True} in streamed(read, "session.idle")
    [completed] = of_type(read, "permission.completed")
    assert completed["result"] == {"kind": "cancelled", "reason": "cancelled"}


async def policy_deny(s: Session) -> None:
    assert (await s.post(message=mail("eve@evil.test")))["status"] == "completed"


def check_policy_deny(read: dict[str, Any]) -> None:
    [completed] = of_type(read, "permission.completed")
    assert completed["result"] == {
        "kind": "denied-by-permission-request-hook",
        "message": "Mail to evil.test is never sent.",
    }
    assert completed["decisionSource"] == "host_policy"
    [complete] = of_type(read, "tool.execution_complete")
    assert (complete["success"], complete["error"]["code"]) == (False, "denied")


async def policy_escalation(s: Session) -> None:
    asked = await s.post(message=mail("bob@partner.test"))
    assert asked["status"] == "awaiting_approval", asked
    assert (await s.respond(asked, approved=True))["status"] == "completed"


def check_policy_escalation(read: dict[str, Any]) -> None:
    [requested] = of_type(read, "permission.requested")
    assert requested["permissionRequest"]["kind"] == "custom-tool"
    [answered] = of_type(read, "request.answered")
    assert answered["policy"]["binding"] == "mail-guard" and answered["answeredBy"] == "otto"


async def held_answer(s: Session) -> None:
    asked = await s.post(message="the salary is 5")
    assert asked["status"] == "awaiting_approval", asked
    assert (await s.respond(asked, approved=True))["output"] == "You said: the salary is 5"


def check_held_answer(read: dict[str, Any]) -> None:
    [requested] = of_type(read, "permission.requested")
    held = {"kind": "hook", "toolName": "output", "hookMessage": "Salaries need review."}
    assert requested["permissionRequest"] == {**held, "toolArgs": {"output": "You said: the salary is 5"}}
    [completed] = of_type(read, "permission.completed")
    assert completed["result"] == {"kind": "approved"} and "toolCallId" not in completed


async def failure(s: Session) -> None:
    assert (await s.post(message="hello"))["status"] == "failed"


def check_failure(read: dict[str, Any]) -> None:
    [error] = of_type(read, "session.error")
    assert error["errorType"] == "mcp_server_failed" and error["message"]


Scenario = tuple[Callable[[Session], Awaitable[None]], Callable[[dict[str, Any]], None], str]
SCENARIOS: dict[str, Scenario] = {
    "reply": (reply, check_reply, "assistant"),
    "server tool": (server_tool, check_server_tool, "assistant"),
    "approval approved": (approval_approved, check_approval_approved, "assistant"),
    "approval denied": (approval_denied, check_approval_denied, "assistant"),
    "remembered rule": (remembered_rule, check_remembered_rule, "assistant"),
    "question": (question, check_question, "assistant"),
    "plan approved": (plan_approved, check_plan_approved, "assistant"),
    "plan revised": (plan_revised, check_plan_revised, "assistant"),
    "model-call limit": (model_call_limit, check_model_call_limit, "limited"),
    "client tool": (client_tool, check_client_tool, "assistant"),
    "mcp form": (mcp_form, check_mcp_form, "planner"),
    "sub-agent": (sub_agent, check_sub_agent, "parent"),
    "cancel": (cancel, check_cancel, "assistant"),
    "policy deny": (policy_deny, check_policy_deny, "guarded"),
    "policy escalation": (policy_escalation, check_policy_escalation, "guarded"),
    "answer held at output": (held_answer, check_held_answer, "holding"),
    "failure": (failure, check_failure, "broken"),
}
# Kinds the events do not read right yet (issue 27); strict: a fixed kind fails here until taken off.
NOT_YET: set[str] = set()


def agents_for(persona: Persona) -> None:
    """The agents the scenarios run: the `assistant` of SPEC section 3 with the tools that ask a person, one
    stopped after one model call, one with the bundled MCP demo (asking approval), a parent of a sub-agent, two
    under the starter policy (one holding answers that mention salaries) and one whose MCP server cannot start."""
    tools = [
        {"name": "send_email", "approval": "always"},
        {"name": "get_time", "approval": "never"},
        {"name": "ask_user"},
        {"name": "propose_plan"},
    ]
    make_agent(persona, tools=tools)
    make_agent(persona, name="limited", tools=tools, maxModelCalls=1)
    make_agent(persona, name="planner", tools=[], mcpServers=[{"connection": "meetings", "approval": "always"}])
    researcher = {"name": "researcher", "displayName": "Researcher", "description": "Looks things up."}
    make_agent(
        persona, **researcher, tools=tools, clientTools=[], parameters=[], instructions="", instructionsByCulture={}
    )
    make_agent(persona, name="parent", subAgents=["researcher"])
    guarded(persona, name="guarded")
    guarded(persona, name="holding", hooks=hold_hooks())
    grant("nowhere", "mcp", persona.tenant, command="/nonexistent/binary")
    make_agent(persona, name="broken", mcpServers=[{"connection": "nowhere", "approval": "never"}])


def marks(name: str) -> list[Any]:
    return [pytest.mark.xfail(strict=True, reason="issue 27")] if name in NOT_YET else []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
@pytest.mark.parametrize("name", [pytest.param(name, marks=marks(name)) for name in SCENARIOS])
async def test_an_sdk_client_reads_every_event_of_the_session(admin, operator, name):
    drive, check, agent = SCENARIOS[name]
    await sync_to_async(agents_for)(admin)
    session = Session(operator, agent, "contract-" + re.sub(r"\W+", "-", name))

    await drive(session)
    read = await session.read()

    problems = contract_problems(read, session)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)
    check({**read, "results": session.results})


# --- the published schema -------------------------------------------------------------------------------


def sdk_fields(kind: str) -> set[str]:
    """The `data` fields the SDK reads for event type `kind` (the keys its `from_dict` takes)."""
    source = inspect.getsource(SessionEvent.from_dict)
    match = re.search(rf"case SessionEventType\.{SessionEventType(kind).name}: data = (\w+)\.from_dict", source)
    assert match is not None, kind
    import copilot.session_events as sdk

    data_class = getattr(sdk, match.group(1))
    assert dataclasses.is_dataclass(data_class)
    return set(re.findall(r'obj\.get\("(\w+)"\)', inspect.getsource(data_class.from_dict)))


def test_the_published_schema_says_what_the_sdk_reads(reader):
    schema = reader.api("GET", "/api/events/schema.json").json()

    for kind, payload in schema["payloads"].items():
        if kind in EXTENSION_TYPES:
            continue
        properties = set(payload.get("properties", {}))
        assert properties <= sdk_fields(kind), (kind, properties - sdk_fields(kind))
        for field, declared in payload.get("properties", {}).items():
            optional = field not in payload.get("required", [])
            null = declared.get("type") == "null" or {"type": "null"} in declared.get("anyOf", [])
            assert not (optional and null), f"{kind}.{field}: optional fields are absent, not null"
    assert set(schema["ephemeral"]) == SDK_EPHEMERAL & set(schema["payloads"])


def test_every_type_is_the_sdks_or_a_listed_extension():
    from agents.payloads import EventType

    for kind in EventType:
        known = SessionEventType(kind.value) != SessionEventType.UNKNOWN
        assert known != (kind in EXTENSION_TYPES), kind


# --- an external agent's session (SPEC section 12) ---------------------------------------------------------

DEPLOY = {
    "name": "deploy",
    "description": "Deploy a service",
    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]},
}
EXTERNAL = {"name": "deployer", "runtime": "external", "tools": [DEPLOY, {"name": "status", "approval": "never"}]}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_connections")
async def test_an_sdk_client_reads_an_external_agents_session(admin, operator):
    """Every kind of request an external agent opens in one session, answered, decided at once, cancelled and
    reported, reads as the SDK's events. An external session has no assistant turns (its model runs
    elsewhere): a reported outcome's tool events stand outside any turn, as the only order rule it cannot keep."""
    assert (await sync_to_async(admin.api)("POST", "/api/agents", EXTERNAL)).status_code == 201
    session = Session(operator, "deployer", "external-contract")

    async def request(**body: Any) -> dict[str, Any]:
        body = {"sessionId": session.key, **body}
        opened = await sync_to_async(operator.api)("POST", "/api/agents/deployer/requests", body)
        assert opened.status_code == 201, opened.content
        return opened.json()

    async def answer(opened: dict[str, Any], **fields: Any) -> None:
        path = f"/api/requests/{opened['requestId']}/responses"
        assert (await sync_to_async(admin.api)("POST", path, fields)).json()["status"] == "accepted"

    approved = await request(kind="approval", toolName="deploy", arguments={"service": "billing"})
    await answer(approved, approved=True)
    await session.api("POST", f"/api/requests/{approved['requestId']}/outcome", {"success": True, "result": "ok"})
    denied = await request(kind="approval", toolName="deploy", arguments={"service": "search"})
    await answer(denied, approved=False, reason="not today")
    assert (await request(kind="approval", toolName="status", arguments={}))["status"] == "decided"
    await answer(await request(kind="question", question="Which region?", choices=["eu", "us"]), text="eu")
    schema = {"type": "object", "properties": {"notes": {"type": "string"}}}
    await answer(await request(kind="input", message="Notes?", requestedSchema=schema), json={"notes": "hi"})
    await answer(await request(kind="plan", summary="Roll out", planContent="1. canary\n2. all"), approved=True)
    cancelled = await request(kind="approval", toolName="deploy", arguments={"service": "mail"})
    await session.api("DELETE", f"/api/requests/{cancelled['requestId']}")
    read = await session.read()

    problems = [p for p in contract_problems(read, session) if "outside any turn" not in p]
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems)
    results = [e["result"]["kind"] for e in of_type(read, "permission.completed")]
    assert results == ["approved", "denied-interactively-by-user", "approved", "cancelled"]
    assert [e["toolName"] for e in of_type(read, "tool.execution_start")] == ["deploy"]
    assert [e["success"] for e in of_type(read, "tool.execution_complete")] == [True]
