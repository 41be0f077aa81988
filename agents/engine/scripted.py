"""The embedded default model `scripted`: deterministic, offline, streamed in word chunks.

It reads the latest user message line by line:
- `call TOOL {json}` -> a call to TOOL with that JSON (`{}` when absent); several lines -> parallel
  calls in one response;
- `echo instructions` -> the resolved system instructions, verbatim;
- `echo documents` -> the names of the documents attached to the run, one a line;
- `help` -> what it understands (these commands) and the tools it may call, one a line;
- any other line -> `You said: <line>` (SPEC section 3; tests and clients rely on the echo, so plain words
  stay echoed and `help` is the one way to ask what it takes).
When the last request carries tool results it answers one line per call, in call order:
`TOOL: <result>`, `TOOL denied: <reason>` or `TOOL failed: <error>`.

Documents reach the model as their own `UserPromptPart`s, placed before the user's message in the
same request, each written by `document_prompt()`; the engine and this model share that format.
"""

import html
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from pydantic_ai import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.messages import ModelResponsePart, TextContent, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

DOCUMENT_NAME = re.compile(r'\A<document name="(?P<name>[^"\n]*)">\n(?P<content>.*)\n</document>\Z', re.DOTALL)
"""Matches a prompt written by `document_prompt()`; the `name` group is HTML-escaped."""

# `call TOOL` optionally followed by a JSON object; "call me maybe" stays a sentence.
_CALL = re.compile(r"\Acall\s+(?P<tool>[\w.\-]+)(?:\s*(?P<args>\{.*\}))?\Z")
# A word and the whitespace after it: streamed chunks join back into the exact text.
_WORD_BOUNDARY = re.compile(r"(?<=\s)(?=\S)")
# A ToolReturnPart's outcome, as the model reports it.
_OUTCOME_LABELS = {"success": "", "denied": " denied", "failed": " failed", "retried": " failed"}


def document_prompt(name: str, content: str) -> str:
    """The user-prompt text that attaches one document to a run.

    Quotes, `<`, `>` and `&` in the name are HTML-escaped so the name always fits in its attribute.
    """
    return f'<document name="{html.escape(name, quote=True)}">\n{content}\n</document>'


def document_name(text: str) -> str | None:
    """The name of the document `text` attaches, or None when `text` is not a document prompt."""
    match = DOCUMENT_NAME.match(text)
    return html.unescape(match["name"]) if match else None


def scripted_model() -> FunctionModel:
    return FunctionModel(_respond, stream_function=_stream, model_name="scripted")


@dataclass
class _Reply:
    lines: list[str] = field(default_factory=list)
    calls: list[ToolCallPart] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    reply = _decide(messages, info)
    parts: list[ModelResponsePart] = [TextPart(reply.text)] if reply.lines else []
    parts.extend(reply.calls)
    return ModelResponse(parts=parts)


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    reply = _decide(messages, info)
    if reply.lines:
        for chunk in _WORD_BOUNDARY.split(reply.text):
            yield chunk
    for index, call in enumerate(reply.calls):
        yield {index: DeltaToolCall(name=call.tool_name, tool_call_id=call.tool_call_id)}
        args = call.args if isinstance(call.args, str) else call.args_as_json_str()
        middle = len(args) // 2
        for piece in (args[:middle], args[middle:]):
            if piece:
                yield {index: DeltaToolCall(json_args=piece)}


def _decide(messages: list[ModelMessage], info: AgentInfo) -> _Reply:
    reply = _Reply()
    last = messages[-1]
    if isinstance(last, ModelRequest):
        reply.lines.extend(_result_lines(last, messages))
        prompt, documents = _user_message(last)
        if prompt is not None:
            _read_prompt(prompt, documents, info, messages, reply)
    if not reply.lines and not reply.calls:
        reply.lines.append("You said nothing.")
    return reply


def _result_lines(request: ModelRequest, messages: list[ModelMessage]) -> list[str]:
    """One line per tool result in `request`, in the order the calls were made."""
    order = {part.tool_call_id: n for n, part in enumerate(_tool_calls(messages))}
    results = [part for part in request.parts if isinstance(part, ToolReturnPart)]
    results.sort(key=lambda part: order.get(part.tool_call_id, len(order)))
    lines = []
    for part in results:
        label = _OUTCOME_LABELS.get(part.outcome, " failed")
        if (part.metadata or {}).get("outcome") == "rejected":  # a client refused to run it (SPEC section 9)
            label = " rejected"
        lines.append(f"{part.tool_name}{label}: {part.model_response_str(wrap_if_error=False)}")
    return lines


def _user_message(request: ModelRequest) -> tuple[str | None, list[str]]:
    """The latest user message in `request` and the names of the documents sent with it.

    A document may come as its own `UserPromptPart` or as one item of a multi-item prompt.
    """
    prompt = None
    documents = []
    for part in request.parts:
        if not isinstance(part, UserPromptPart):
            continue
        texts = []
        for text in _texts(part.content):
            name = document_name(text)
            if name is None:
                texts.append(text)
            else:
                documents.append(name)
        if texts:
            prompt = "\n".join(texts)
    return prompt, documents


def _texts(content: str | Sequence[object]) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [item if isinstance(item, str) else item.content for item in content if isinstance(item, str | TextContent)]


def _read_prompt(
    prompt: str, documents: list[str], info: AgentInfo, messages: list[ModelMessage], reply: _Reply
) -> None:
    used_ids = {part.tool_call_id for part in _tool_calls(messages)}
    for raw_line in prompt.splitlines():
        line = raw_line.strip()
        if not line:
            continue
        if call := _CALL.match(line):
            call_id = _next_call_id(used_ids)
            used_ids.add(call_id)
            reply.calls.append(ToolCallPart(call["tool"], call["args"] or "{}", tool_call_id=call_id))
        elif line == "echo instructions":
            reply.lines.append(info.instructions or "No instructions.")
        elif line == "echo documents":
            reply.lines.extend(documents or ["No documents attached."])
        elif line == "help":
            reply.lines.extend(_help(info))
        else:
            reply.lines.append(f"You said: {line}")


def _help(info: AgentInfo) -> list[str]:
    """What the model understands, and the tools this agent lets it call."""
    tools = ", ".join(tool.name for tool in info.function_tools) or "none"
    return [
        "I am the scripted model. I read your message line by line:",
        'call TOOL {"json": "arguments"} - calls TOOL (several lines: calls in parallel)',
        "echo instructions - repeats my instructions",
        "echo documents - names the documents sent with the message",
        "help - this list; anything else I repeat back",
        f"Tools I can call here: {tools}",
    ]


def _tool_calls(messages: list[ModelMessage]) -> list[ToolCallPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    ]


def _next_call_id(used_ids: set[str]) -> str:
    n = len(used_ids) + 1
    while f"call_{n}" in used_ids:
        n += 1
    return f"call_{n}"
