"""The embedded `scripted` model, driven through real pydantic-ai agents (no database needed)."""

from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    DeferredToolRequests,
    DeferredToolResults,
    ExternalToolset,
    ModelRequest,
    ModelResponse,
    ModelRetry,
    PartDeltaEvent,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
    ToolDefinition,
    ToolDenied,
    ToolFailed,
    UserPromptPart,
)

from agents.engine.scripted import DOCUMENT_NAME, document_name, document_prompt, scripted_model

LOCATION = ToolDefinition(
    name="get_user_location",
    description="Ask the browser where the user is.",
    parameters_json_schema={"type": "object", "properties": {"precision": {"type": "string"}}},
)


def make_agent(instructions: str | None = None) -> Agent[None, str | DeferredToolRequests]:
    agent = Agent(
        scripted_model(),
        output_type=[str, DeferredToolRequests],
        instructions=instructions,
        toolsets=[ExternalToolset([LOCATION])],
    )

    @agent.tool_plain
    def get_time() -> str:
        """The current time."""
        return "2026-01-02T03:04:05+00:00"

    @agent.tool_plain
    def lookup_order(order_id: str) -> dict[str, object]:
        """Look up an order."""
        return {"order_id": order_id, "items": [1, 2], "status": "shipped"}

    @agent.tool_plain
    def flaky() -> str:
        """Always asks to be retried."""
        raise ModelRetry("upstream timed out, try later")

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str, subject: str) -> str:
        """Send an email (needs approval)."""
        return f"sent to {to}"

    return agent


async def test_it_echoes_text():
    result = await make_agent().run("hello there")

    assert result.output == "You said: hello there"


async def test_it_answers_each_line_in_order():
    result = await make_agent().run("first\n\n  second  \nthird")

    assert result.output == "You said: first\nYou said: second\nYou said: third"


async def test_it_lists_its_commands_and_the_agents_tools_on_help():
    result = await make_agent().run("help\nhello")

    lines = result.output.split("\n")
    assert lines[0] == "I am the scripted model. I read your message line by line:"
    assert (
        any(line.startswith("call TOOL") for line in lines) and "echo instructions - repeats my instructions" in lines
    )
    assert lines[-2:] == [
        "Tools I can call here: get_time, lookup_order, flaky, send_email, get_user_location",
        "You said: hello",
    ]


async def test_it_keeps_a_sentence_starting_with_call_as_text():
    result = await make_agent().run("call me maybe")

    assert result.output == "You said: call me maybe"


async def test_it_makes_parallel_calls_in_one_response():
    result = await make_agent().run('call get_time\ncall lookup_order {"order_id": "A17"}')

    calls = [
        [(part.tool_name, part.args, part.tool_call_id) for part in message.parts]
        for message in result.all_messages()
        if isinstance(message, ModelResponse) and message.tool_calls
    ]
    assert calls == [[("get_time", "{}", "call_1"), ("lookup_order", '{"order_id": "A17"}', "call_2")]]
    assert result.output == (
        'get_time: 2026-01-02T03:04:05+00:00\nlookup_order: {"order_id":"A17","items":[1,2],"status":"shipped"}'
    )


async def test_it_numbers_call_ids_across_the_conversation():
    agent = make_agent()
    first = await agent.run("call get_time\ncall get_time")

    second = await agent.run("call get_time", message_history=first.all_messages())

    ids = [part.tool_call_id for part in _tool_calls(second.all_messages())]
    assert ids == ["call_1", "call_2", "call_3"]


async def test_it_reports_a_denial_with_its_reason():
    agent = make_agent()
    first = await agent.run('call send_email {"to": "ops@example.com", "subject": "hi"}')
    assert isinstance(first.output, DeferredToolRequests)
    call_id = first.output.approvals[0].tool_call_id

    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call_id: ToolDenied("too risky")}),
    )

    assert second.output == "send_email denied: too risky"


async def test_it_reports_an_approved_call_result():
    agent = make_agent()
    first = await agent.run('call send_email {"to": "ops@example.com", "subject": "hi"}')
    assert isinstance(first.output, DeferredToolRequests)

    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={first.output.approvals[0].tool_call_id: True}),
    )

    assert second.output == "send_email: sent to ops@example.com"


async def test_it_reports_a_client_tool_result_and_failure():
    agent = make_agent()
    first = await agent.run('call get_user_location {"precision": "city"}\ncall get_user_location')
    assert isinstance(first.output, DeferredToolRequests)
    located, blocked = (call.tool_call_id for call in first.output.calls)

    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(
            calls={located: {"city": "Lisbon"}, blocked: ToolFailed("User blocked geolocation")}
        ),
    )

    assert second.output == ('get_user_location: {"city":"Lisbon"}\nget_user_location failed: User blocked geolocation')


async def test_it_tells_denied_from_failed_in_one_reply():
    agent = make_agent()
    first = await agent.run(
        "call get_time\n"
        'call send_email {"to": "a@example.com", "subject": "s"}\n'
        "call get_user_location\n"
        "call flaky\n"
        "call no_such_tool"
    )
    assert isinstance(first.output, DeferredToolRequests)
    email = first.output.approvals[0].tool_call_id
    location = first.output.calls[0].tool_call_id

    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={email: ToolDenied("too risky")}, calls={location: ModelRetry("ask again later")}
        ),
    )

    lines = second.output.splitlines()
    assert lines[:4] == [
        "get_time: 2026-01-02T03:04:05+00:00",
        "send_email denied: too risky",
        "get_user_location failed: ask again later",
        "flaky failed: upstream timed out, try later",
    ]
    assert lines[4].startswith("no_such_tool failed: Unknown tool name: 'no_such_tool'.")
    assert len(lines) == 5


async def test_it_reports_bad_arguments_as_a_failure():
    result = await make_agent().run('call lookup_order {"order": 1}')

    assert result.output.startswith('lookup_order failed: [{"type":"missing"')


async def test_it_echoes_the_instructions_verbatim():
    instructions = "You manage files.\n  Indented line, kept as is.\n\nAnswer in {{culture}}."

    result = await make_agent(instructions).run("echo instructions")

    assert result.output == instructions


async def test_it_says_so_when_there_are_no_instructions():
    result = await make_agent().run("echo instructions")

    assert result.output == "No instructions."


async def test_it_lists_the_documents_sent_with_the_message():
    documents = ModelRequest(
        parts=[
            UserPromptPart(document_prompt("notes.txt", "line one\nline two")),
            UserPromptPart(document_prompt('Q3 "final".md', "# Q3")),
        ]
    )

    result = await make_agent().run("echo documents\nthanks", message_history=[documents])

    assert result.output == 'notes.txt\nQ3 "final".md\nYou said: thanks'


async def test_it_lists_documents_sent_as_items_of_one_prompt():
    result = await make_agent().run([document_prompt("a.csv", "x,y"), "echo documents"])

    assert result.output == "a.csv"


async def test_it_lists_only_the_documents_of_the_latest_message():
    agent = make_agent()
    first = await agent.run([document_prompt("old.txt", "old"), "hi"])

    second = await agent.run("echo documents", message_history=first.all_messages())

    assert second.output == "No documents attached."


def test_it_writes_documents_in_the_shared_format():
    prompt = document_prompt("report.txt", "body\n</document>\nmore")

    assert prompt == '<document name="report.txt">\nbody\n</document>\nmore\n</document>'
    match = DOCUMENT_NAME.match(prompt)
    assert match is not None
    assert match["content"] == "body\n</document>\nmore"
    assert document_name(document_prompt('a "b" <c>.txt', "")) == 'a "b" <c>.txt'
    assert document_name("<document>not one</document>") is None


async def test_it_streams_text_in_word_chunks():
    agent = make_agent("Be brief.\nBe kind.")
    deltas = []

    async with agent.run_stream_events("hello streaming world\necho instructions") as events:
        async for event in events:
            if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                deltas.append(event.delta.content_delta)

    assert deltas == ["said: ", "hello ", "streaming ", "world\n", "Be ", "brief.\n", "Be ", "kind."]


async def test_it_streams_tool_call_arguments_in_deltas():
    agent = make_agent()
    args_deltas = []
    outputs = []

    async with agent.run_stream_events('call lookup_order {"order_id": "A17"}') as events:
        async for event in events:
            if isinstance(event, PartDeltaEvent) and isinstance(event.delta, ToolCallPartDelta):
                args_deltas.append(event.delta.args_delta)
            if isinstance(event, AgentRunResultEvent):
                outputs.append(event.result.output)

    assert len(args_deltas) == 2
    assert "".join(args_deltas) == '{"order_id": "A17"}'
    assert outputs == ['lookup_order: {"order_id":"A17","items":[1,2],"status":"shipped"}']


def _tool_calls(messages: list) -> list[ToolCallPart]:
    return [part for message in messages if isinstance(message, ModelResponse) for part in message.tool_calls]
