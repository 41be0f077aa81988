"""The fake OpenAI server behaves like the real API for the pydantic-ai OpenAI chat model."""

import json
import urllib.error
import urllib.request

import pytest
from openai import AsyncOpenAI
from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    DeferredToolRequests,
    DeferredToolResults,
    PartDeltaEvent,
    TextPartDelta,
    ToolDenied,
)
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.fakes.openai_server import FakeOpenAI, message_order_problems


@pytest.fixture
def fake():
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def model(fake):
    client = AsyncOpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0)
    yield OpenAIChatModel("gpt-test", provider=OpenAIProvider(openai_client=client))
    await client.close()


def make_agent(model, **kwargs) -> Agent:
    agent = Agent(model, instructions="Be brief.", output_type=[str, DeferredToolRequests], **kwargs)

    @agent.tool_plain
    def get_time() -> str:
        """The current time."""
        return "noon"

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    return agent


async def test_it_answers_with_the_planned_text_and_records_the_request(fake, model):
    fake.reply_text("Hello from the fake.", input_tokens=7, output_tokens=3)

    result = await make_agent(model).run("hi")

    assert result.output == "Hello from the fake."
    assert result.usage.input_tokens == 7
    assert result.usage.output_tokens == 3
    [request] = fake.requests
    assert request.path == "/v1/chat/completions"
    assert request.authorization == "Bearer sk-test"
    assert request.model == "gpt-test"
    assert request.roles == ["system", "user"]
    assert request.tools == ["get_time", "send_email"]
    assert not request.stream


async def test_it_streams_text_in_chunks_with_a_usage_chunk(fake, model):
    fake.reply_text("one two three four", input_tokens=11, output_tokens=4)
    deltas = []
    results = []

    async with make_agent(model).run_stream_events("count") as events:
        async for event in events:
            if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                deltas.append(event.delta.content_delta)
            elif isinstance(event, AgentRunResultEvent):
                results.append(event.result)

    assert len(deltas) >= 3
    [result] = results
    assert result.output == "one two three four"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (11, 4)
    assert fake.requests[0].stream
    assert fake.requests[0].body["stream_options"] == {"include_usage": True}


async def test_it_streams_parallel_tool_calls_then_the_answer(fake, model):
    fake.reply_tool_calls([("get_time", {}), ("get_time", {}, "call_b")])
    fake.reply_text("It is noon.")

    async with make_agent(model).run_stream_events("time?") as events:
        results = [event.result async for event in events if isinstance(event, AgentRunResultEvent)]

    assert results[0].output == "It is noon."
    second = fake.requests[1]
    assert second.roles == ["system", "user", "assistant", "tool", "tool"]
    assert [message.get("tool_call_id") for message in second.messages[3:]] == ["call_fake_1", "call_b"]
    assert not any(request.problems for request in fake.requests)


async def test_it_accepts_a_denial_sent_back_as_a_tool_result(fake, model):
    fake.reply_tool_call("send_email", {"to": "ops@example.com"})
    fake.reply_text("Understood, not sending.")
    agent = make_agent(model)
    first = await agent.run("email ops")
    assert isinstance(first.output, DeferredToolRequests)

    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={first.output.approvals[0].tool_call_id: ToolDenied("too risky")}
        ),
    )

    assert second.output == "Understood, not sending."
    tool_message = fake.requests[1].messages[-1]
    assert tool_message["role"] == "tool"
    assert "too risky" in tool_message["content"]


@pytest.mark.parametrize("status", [401, 429, 500])
async def test_it_fails_with_the_planned_status_and_an_openai_error_body(fake, model, status):
    fake.fail(status)

    with pytest.raises(ModelHTTPError) as failure:
        await make_agent(model).run("hi")

    assert failure.value.status_code == status
    assert failure.value.body["type"]
    assert failure.value.body["message"]


async def test_it_sends_a_malformed_body_when_planned(fake, model):
    fake.reply_malformed()

    with pytest.raises(ModelAPIError, match="Failed to decode"):
        await make_agent(model).run("hi")


async def test_it_refuses_a_request_nothing_was_planned_for(fake, model):
    with pytest.raises(ModelHTTPError) as failure:
        await make_agent(model).run("hi")

    assert failure.value.status_code == 400
    assert "no reply planned" in failure.value.body["message"]


def test_it_rejects_tool_messages_out_of_order_without_using_a_planned_reply(fake):
    fake.reply_text("never sent")
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1")]},
        {"role": "user", "content": "and?"},
        {"role": "tool", "tool_call_id": "call_1", "content": "late"},
    ]

    status, body = _post(fake, {"model": "gpt-test", "messages": messages})

    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert "not answered before a 'user' message" in body["error"]["message"]
    assert fake.requests[0].problems
    assert fake.pending == 1


def test_it_checks_that_each_tool_message_answers_the_assistant_before_it():
    assert (
        message_order_problems(
            [
                {"role": "assistant", "tool_calls": [_call("a"), _call("b")]},
                {"role": "tool", "tool_call_id": "b"},
                {"role": "tool", "tool_call_id": "a"},
                {"role": "assistant", "content": "done"},
            ]
        )
        == []
    )
    assert message_order_problems([{"role": "user"}, {"role": "tool", "tool_call_id": "x"}]) == [
        "messages[1]: a 'tool' message must answer a tool call of the preceding assistant message (tool_call_id 'x')"
    ]
    assert message_order_problems([{"role": "assistant", "tool_calls": [_call("a")]}]) == [
        "tool calls ['a'] not answered at the end of the messages"
    ]


def _call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "get_time", "arguments": "{}"}}


def _post(fake: FakeOpenAI, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{fake.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())
