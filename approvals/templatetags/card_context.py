"""What a request card says around the question (SPEC section 11, "the operator's day"): the tool's description
(Markdown, rendered without raw HTML), the user message that led to the call, and the arguments as rows.

Like the card's other filters (approvals/templatetags/inbox.py) these take the request alone: approvals/push.py
renders the card with nothing else.
"""

from functools import lru_cache
from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from agents.definitions import ExternalTool
from agents.models import Run
from approvals import cards
from approvals.actions.settling import is_external
from approvals.kinds import KINDS
from approvals.models import PendingRequest

register = template.Library()

# CommonMark with raw HTML off (it is shown as text) and markdown-it's link validation (no javascript:, vbscript:,
# file: or data: links); no images, which would load from wherever a description points.
_MARKDOWN = MarkdownIt("commonmark", {"html": False}).disable("image")
# How far back a continuation looks for the message its session was given (each step one small query).
_MESSAGE_DEPTH = 20


@lru_cache(maxsize=256)
def render_markdown(text: str) -> SafeString:
    """Markdown as HTML safe to put in a page: no raw HTML, no scriptable link, no image. Cached: a page of cards
    shows the same few tool descriptions again and again."""
    return mark_safe(_MARKDOWN.render(text))  # markdown-it escapes all text and refuses raw HTML


@register.filter
def tool_description(pending: PendingRequest) -> SafeString:
    """The requested tool's description, rendered: what a gateway's upstream server says of it, what an external
    agent said of it, else its kind's (`Kind.tool_description`: a server tool's docstring, a client tool's
    description); "" when there is none (a hosted run's MCP tool's lives on its server)."""
    called = gateway(pending)
    if called is not None:
        text = called["description"]
    elif is_external(pending):
        # What the agent said about this call, else its declared tool's description (approvals.actions.external).
        definition = pending.run.version.definition
        asked = (pending.engine_state or {}).get("permissionRequest") or {}
        declared = [t for t in definition.tools if isinstance(t, ExternalTool) and t.name == pending.tool_name]
        text = asked.get("toolDescription") or (declared[0].description if declared else "")
    else:
        text = KINDS[pending.kind].tool_description(pending)
    return render_markdown(text) if text.strip() else SafeString("")


@register.filter
def external(pending: PendingRequest) -> bool:
    """Whether an external agent asked (SPEC section 12): the card says so, "external · deployer"."""
    return is_external(pending) and gateway(pending) is None


@register.filter
def gateway(pending: PendingRequest) -> dict[str, str] | None:
    """The MCP server and upstream tool a gateway's call asks for (SPEC section 15), and the tool's description as
    the server gave it: the card says "gateway · coder wants to call everything__echo" (the name clients call) and
    "MCP server everything · tool echo"; None for any other request."""
    called = (pending.engine_state or {}).get("gateway")
    if not isinstance(called, dict):
        return None
    return {key: str(called.get(key) or "") for key in ("server", "tool", "description")}


@register.filter
def triggering_message(pending: PendingRequest) -> str:
    """The user message that led to the request: the asking run's, else (a continuation, which carries answers
    only) that of the nearest earlier run of the session that had one."""
    run: Run | None = pending.run
    for _ in range(_MESSAGE_DEPTH):
        if run is None:
            break
        if run.message:
            return run.message
        run = run.previous_run if run.previous_run_id is not None else None
    return ""


@register.filter
def shown_arguments(arguments: Any) -> cards.ShownArguments:
    """The call's arguments as the card shows them: rows (a text value as it is, any other value as compact JSON)
    and the JSON view, cut to a card's size (approvals.cards)."""
    return cards.card_arguments(arguments)
