"""The bundled demo MCP server, spawned as a real stdio process (`python -m agents.mcp_demo`) and driven
through the MCP client SDK and pydantic-ai's MCPToolset, the way the engine drives it."""

import os
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client import Client
from fastmcp.client.transports import StdioTransport
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, TextContent
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    ConversationTypeAdapter,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
)
from pydantic_ai.mcp import CallToolFunc, MCPToolset

from agents.engine.scripted import scripted_model

PROJECT_DIR = Path(__file__).resolve().parents[2]
QUESTION = "Which day should I book?"


class DemoServer:
    """Spawns `python -m agents.mcp_demo`, one process per connection, its stderr kept in a file."""

    def __init__(self, log: Path, style: str, state_key: str | None = None) -> None:
        self.log = log
        self.env = {**os.environ, "AIRLOCK_MCP_STYLE": style}
        if state_key:
            self.env["AIRLOCK_MCP_STATE_KEY"] = state_key
        else:
            self.env.pop("AIRLOCK_MCP_STATE_KEY", None)

    def client(self, *, mode: str = "auto", elicitation_handler: Any = None) -> Client:
        transport = StdioTransport(
            sys.executable,
            ["-m", "agents.mcp_demo"],
            env=self.env,
            cwd=str(PROJECT_DIR),
            keep_alive=False,
            log_file=self.log,
        )
        return Client(transport, elicitation_handler=elicitation_handler, mode=mode, init_timeout=60)

    def stderr_lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def body_runs(self) -> list[str]:
        return [line for line in self.stderr_lines() if "book_meeting body run" in line]

    def pids(self) -> set[str]:
        return {word for line in self.stderr_lines() for word in line.split() if word.startswith("pid=")}


@pytest.fixture
def classic(tmp_path) -> DemoServer:
    return DemoServer(tmp_path / "classic.log", "classic")


@pytest.fixture
def input_required(tmp_path) -> DemoServer:
    return DemoServer(tmp_path / "input_required.log", "input_required", secrets.token_hex(32))


class Answer:
    """An elicitation handler that records each question and answers with a fixed action."""

    def __init__(self, action: str = "accept", content: dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = content
        self.questions: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, message, response_type, params, context) -> ElicitResult:
        self.questions.append((message, params.requested_schema))
        return ElicitResult(action=self.action, content=self.content if self.action == "accept" else None)


def scripted_agent(toolset: MCPToolset) -> Agent[None, str | DeferredToolRequests]:
    return Agent(scripted_model(), toolsets=[toolset], output_type=[str, DeferredToolRequests])


async def test_it_books_the_day_the_user_gives_in_classic_style(classic):
    answer = Answer(content={"day": "Friday"})
    toolset = MCPToolset(classic.client(mode="legacy", elicitation_handler=answer))

    result = await scripted_agent(toolset).run('call book_meeting {"topic": "Q3 planning"}')

    assert result.output == 'book_meeting: Booked "Q3 planning" on Friday'
    [(message, schema)] = answer.questions
    assert message == QUESTION
    assert schema["required"] == ["day"]
    assert schema["properties"]["day"]["type"] == "string"
    assert schema["properties"]["day"]["description"]
    assert len(classic.body_runs()) == 1


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_it_does_not_book_when_the_user_says_no_in_classic_style(classic, action):
    toolset = MCPToolset(classic.client(mode="legacy", elicitation_handler=Answer(action)))

    result = await scripted_agent(toolset).run('call book_meeting {"topic": "Q3"}')

    assert result.output == f'book_meeting: Meeting "Q3" not booked: user chose {action}'


async def test_it_cannot_ask_in_classic_style_over_the_new_protocol(classic):
    # Why the engine must pin legacy mode for servers that call ctx.elicit() mid-call.
    answer = Answer(content={"day": "Friday"})
    toolset = MCPToolset(classic.client(elicitation_handler=answer))

    result = await scripted_agent(toolset).run('call book_meeting {"topic": "Q3"}')

    assert result.output.startswith("book_meeting failed: Cannot send 'elicitation/create'")
    assert answer.questions == []


async def test_it_asks_mid_call_in_input_required_style_over_the_legacy_protocol(input_required):
    # So one legacy-mode client serves both styles.
    answer = Answer(content={"day": "Wednesday"})
    toolset = MCPToolset(input_required.client(mode="legacy", elicitation_handler=answer))

    result = await scripted_agent(toolset).run('call book_meeting {"topic": "Q3"}')

    assert result.output == 'book_meeting: Booked "Q3" on Wednesday'
    assert [message for message, _ in answer.questions] == [QUESTION]


async def test_it_answers_ping(classic):
    toolset = MCPToolset(classic.client(mode="legacy"))

    result = await scripted_agent(toolset).run("call ping")

    assert result.output == "ping: pong"


async def test_it_asks_with_an_input_required_result_then_books_with_the_answer(input_required):
    # The handler is never called here; passing one declares the elicitation capability, without which
    # the server refuses to ask.
    async with input_required.client(elicitation_handler=Answer()) as client:
        first = await client.session.call_tool("book_meeting", {"topic": "Q3"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        [(key, request)] = first.input_requests.items()
        assert request.params.message == QUESTION
        assert request.params.requested_schema["required"] == ["day"]
        assert input_required.body_runs() == []

        second = await client.session.call_tool(
            "book_meeting",
            {"topic": "Q3"},
            allow_input_required=True,
            input_responses={key: ElicitResult(action="accept", content={"day": "Monday"})},
            request_state=first.request_state,
        )

    assert _text(second) == 'Booked "Q3" on Monday'
    assert len(input_required.body_runs()) == 1


async def test_it_does_not_book_when_the_answer_is_a_decline_in_input_required_style(input_required):
    async with input_required.client(elicitation_handler=Answer()) as client:
        first = await client.session.call_tool("book_meeting", {"topic": "Q3"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        [key] = first.input_requests
        second = await client.session.call_tool(
            "book_meeting",
            {"topic": "Q3"},
            allow_input_required=True,
            input_responses={key: ElicitResult(action="decline")},
            request_state=first.request_state,
        )

    assert _text(second) == 'Meeting "Q3" not booked: user chose decline'


async def test_it_accepts_request_state_from_a_previous_process_with_a_shared_key(input_required):
    async with input_required.client(elicitation_handler=Answer()) as client:
        first = await client.session.call_tool("book_meeting", {"topic": "Q3"}, allow_input_required=True)
    assert isinstance(first, InputRequiredResult)
    stored = first.model_dump_json(by_alias=True)

    restored = InputRequiredResult.model_validate_json(stored)
    [key] = restored.input_requests
    async with input_required.client(elicitation_handler=Answer()) as client:
        second = await client.session.call_tool(
            "book_meeting",
            {"topic": "Q3"},
            allow_input_required=True,
            input_responses={key: ElicitResult(action="accept", content={"day": "Tuesday"})},
            request_state=restored.request_state,
        )

    assert _text(second) == 'Booked "Q3" on Tuesday'
    assert len(input_required.pids()) == 2


async def test_it_rejects_request_state_from_a_previous_process_without_a_shared_key(tmp_path):
    server = DemoServer(tmp_path / "no_key.log", "input_required")
    async with server.client(elicitation_handler=Answer()) as client:
        first = await client.session.call_tool("book_meeting", {"topic": "Q3"}, allow_input_required=True)
    assert isinstance(first, InputRequiredResult)
    [key] = first.input_requests

    async with server.client(elicitation_handler=Answer()) as client:
        with pytest.raises(MCPError, match="requestState"):
            await client.session.call_tool(
                "book_meeting",
                {"topic": "Q3"},
                allow_input_required=True,
                input_responses={key: ElicitResult(action="accept", content={"day": "Tuesday"})},
                request_state=first.request_state,
            )


async def test_it_ends_a_run_awaiting_input_and_books_in_the_next_run_in_a_new_process(input_required):
    # The engine's shape: a process_tool_call hook turns InputRequiredResult into ApprovalRequired, so
    # the run ends with DeferredToolRequests; the next run approves the call with the answer as metadata
    # and pydantic-ai runs the call again, this time against a fresh server process.
    def toolset() -> MCPToolset:
        async def ask_through_the_run(ctx: RunContext, call_tool: CallToolFunc, name: str, args: dict[str, Any]):
            answer = (ctx.tool_call_metadata or {}) if ctx.tool_call_approved else {}
            result = await mcp.client.session.call_tool(
                name,
                args,
                allow_input_required=True,
                input_responses=answer.get("input_responses"),
                request_state=answer.get("request_state"),
            )
            if isinstance(result, InputRequiredResult):
                raise ApprovalRequired(metadata={"input_required": result.model_dump(mode="json", by_alias=True)})
            return _text(result)

        mcp = MCPToolset(input_required.client(elicitation_handler=Answer()), process_tool_call=ask_through_the_run)
        return mcp

    first = await scripted_agent(toolset()).run('call book_meeting {"topic": "Q3"}')

    assert isinstance(first.output, DeferredToolRequests)
    [call] = first.output.approvals
    asked = InputRequiredResult.model_validate(first.output.metadata[call.tool_call_id]["input_required"])
    [(key, request)] = asked.input_requests.items()
    assert request.params.message == QUESTION
    stored = ConversationTypeAdapter.dump_json(first.conversation)

    second = await scripted_agent(toolset()).run(
        conversation=ConversationTypeAdapter.validate_json(stored),
        deferred_tool_results=DeferredToolResults(
            approvals={call.tool_call_id: ToolApproved()},
            metadata={
                call.tool_call_id: {
                    "input_responses": {key: ElicitResult(action="accept", content={"day": "Thursday"})},
                    "request_state": asked.request_state,
                }
            },
        ),
    )

    assert second.output == 'book_meeting: Booked "Q3" on Thursday'
    assert len(input_required.body_runs()) == 1
    assert len(input_required.pids()) == 2


def _text(result: CallToolResult | InputRequiredResult) -> str:
    assert isinstance(result, CallToolResult), result
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))
