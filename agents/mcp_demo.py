"""The bundled demo MCP server (stdio): run it as `python -m agents.mcp_demo`.

Tools:
- `book_meeting(topic)` asks the user "Which day should I book?" (a form with one required string
  field, `day`) and answers `Booked "<topic>" on <day>`, or `Meeting "<topic>" not booked: user
  chose decline` (or `cancel`).
- `ping()` answers `pong`; it asks nothing and has no side effects.

`AIRLOCK_MCP_STYLE` picks how `book_meeting` asks, so the console can be tried against both kinds of
server found in the wild:

- `classic` (default): the tool body calls `ctx.elicit(...)`, which sends a mid-call
  `elicitation/create` request to the client. Only the handshake-era protocol (2025-11-25) has that
  back-channel. mcp 2.x clients negotiate 2026-07-28 by default, where the call then fails with
  "no back-channel for server-initiated requests", so the engine MUST connect to such servers in
  legacy mode (`fastmcp.Client(..., mode="legacy")` / `mcp.Client(..., mode="legacy")`) and answer
  from its elicitation callback.
- `input_required`: the day is a `Resolve(Elicit)` parameter. On a 2026-07-28 session the first
  `tools/call` returns an `InputRequiredResult` (question + sealed `request_state`) without running
  the tool body; the client calls again with `input_responses` and the `request_state` to finish.
  On a legacy session the same declaration falls back to a mid-call `elicitation/create`, so the
  legacy-mode client above works with both styles.

A stdio server is a new process for every connection, so a `request_state` sealed by one process is
only accepted by the next when both seal with the same key: set `AIRLOCK_MCP_STATE_KEY` for that
(otherwise each process has its own ephemeral key and the client must start the call afresh).

Every run of a tool body is written to stderr (`book_meeting body run #1 ...`) so tests can count
re-runs; stdout carries nothing but the protocol.
"""

import os
import sys
from typing import Annotated

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, Elicit, MCPServer, RequestStateSecurity, Resolve
from pydantic import BaseModel, Field

QUESTION = "Which day should I book?"
STYLES = ("classic", "input_required")


class MeetingDay(BaseModel):
    day: str = Field(description="The day to book the meeting on, e.g. Friday or 2026-03-14.")


def _style() -> str:
    style = os.environ.get("AIRLOCK_MCP_STYLE", "classic")
    if style not in STYLES:
        raise SystemExit(f"AIRLOCK_MCP_STYLE must be one of {', '.join(STYLES)}; got {style!r}")
    return style


def _request_state_security() -> RequestStateSecurity | None:
    key = os.environ.get("AIRLOCK_MCP_STATE_KEY")
    return RequestStateSecurity(keys=[key]) if key else None


_runs = 0


def _log(line: str) -> None:
    print(f"{line} pid={os.getpid()}", file=sys.stderr, flush=True)


def _log_run(tool: str, *details: str) -> None:
    global _runs
    _runs += 1
    _log(" ".join((f"{tool} body run #{_runs}", *details)))


def _booking_reply(topic: str, outcome: ElicitationResult[MeetingDay]) -> str:
    if outcome.action == "accept":
        return f'Booked "{topic}" on {outcome.data.day}'
    return f'Meeting "{topic}" not booked: user chose {outcome.action}'


async def book_meeting_classic(topic: str, ctx: Context) -> str:
    """Book a meeting about a topic; asks the user which day."""
    _log_run("book_meeting", "style=classic", f"topic={topic!r}")
    outcome = await ctx.elicit(QUESTION, MeetingDay)
    return _booking_reply(topic, outcome)


def ask_day() -> Elicit[MeetingDay]:
    # Runs on every round of the call, before the body; the body runs once the day is known.
    _log("book_meeting resolver run")
    return Elicit(QUESTION, MeetingDay)


async def book_meeting_input_required(
    topic: str, day: Annotated[ElicitationResult[MeetingDay], Resolve(ask_day)]
) -> str:
    """Book a meeting about a topic; asks the user which day."""
    _log_run("book_meeting", "style=input_required", f"topic={topic!r}", f"answer={day.action}")
    return _booking_reply(topic, day)


def ping() -> str:
    """Check that the demo server answers."""
    _log_run("ping")
    return "pong"


def build_server(style: str) -> MCPServer:
    server = MCPServer("airlock-demo", request_state_security=_request_state_security())
    book_meeting = book_meeting_classic if style == "classic" else book_meeting_input_required
    server.tool(name="book_meeting")(book_meeting)
    server.tool()(ping)
    return server


if __name__ == "__main__":
    build_server(_style()).run()
