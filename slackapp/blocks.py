"""What a request's Slack message says (SPEC section 17), built with slack_sdk's Block Kit models: the agent, the tool
or kind, the arguments as fields (escaped, cut to Slack's limits), and while it is open the buttons Approve / Deny /
Open in Airlock; once it ended, who decided what. A quorum shows its progress ("1 of 2 approvals")."""

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.urls import reverse
from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.blocks.blocks import InputBlock
from slack_sdk.models.views import View

from approvals.kinds import KINDS
from approvals.models import PendingRequest, RequestStatus, Via
from approvals.tallies import Tally

APPROVE = "airlock_approve"
DENY = "airlock_deny"
OPEN = "airlock_open"
DENY_MODAL = "airlock_deny_reason"
REASON_BLOCK = "reason"
REASON_INPUT = "reason"

# Slack's limits (docs.slack.dev, Block Kit): a header's text, a section's text and each of its fields, fields per
# section, a button's value, a message's fallback text.
HEADER_CHARS = 150
SECTION_CHARS = 3000
FIELD_CHARS = 2000
FIELDS = 10
TEXT_CHARS = 3000
REASON_CHARS = 2000  # what the respond API takes (approvals.responses.Response.reason)

_DECIDERS = {
    Via.RULE: "a remembered rule",
    Via.POLICY: "a policy",
    Via.NEVER: "the tool's approval mode never",
    Via.ESCALATION: "its escalation",
}


def escaped(text: str) -> str:
    """Text as Slack's mrkdwn shows it literally: `&`, `<` and `>` escaped, so nothing in it becomes a link or a
    mention (`<!channel>`)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, an ellipsis saying where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cut_escaped(text: str, limit: int) -> str:
    """`text` escaped, then cut to `limit` characters without cutting an entity (`&amp;`) in two."""
    shown = escaped(text)
    if len(shown) <= limit:
        return shown
    kept = shown[: limit - 1]
    amp = kept.rfind("&")
    if amp != -1 and ";" not in kept[amp:]:
        kept = kept[:amp]
    return kept + "…"


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _field(name: str, value: Any) -> MarkdownTextObject:
    label = f"*{cut_escaped(name, 200)}*\n"
    return MarkdownTextObject(text=label + cut_escaped(_shown(value), FIELD_CHARS - len(label)))


def console_link(request: PendingRequest) -> str:
    """The request's card in the console's inbox, as the e-mail digests link it."""
    return f"{settings.CONSOLE_URL}{reverse('inbox')}?agent={quote(request.agent.name)}#request-{request.id}"


@dataclass(frozen=True)
class MessageState:
    """What a message shows of its request now: `key` tells whether Slack shows it already (`SlackMessage.shown`)."""

    key: str
    decided: bool


def state_key(status: str, answered: bool, given: int, approvers: str) -> str:
    """The state a message shows, as `SlackMessage.shown` keeps it: the request's status, whether an answer is
    stored, the approvals recorded toward its quorum, the groups it is routed to."""
    return f"{status}|{'answered' if answered else '-'}|{given}|{approvers}"[:300]


def state_of(request: PendingRequest, given: int) -> MessageState:
    """The state a message of `request` shows with `given` approvals recorded toward its quorum."""
    answered = request.answer is not None
    decided = request.status != RequestStatus.PENDING or answered
    return MessageState(state_key(request.status, answered, given, request.approvers), decided)


def what(request: PendingRequest) -> str:
    """The tool it would call, else its kind."""
    return request.tool_name or KINDS[request.kind].label


def outcome_line(request: PendingRequest) -> str:
    """Who decided what, as the updated message says it ("Approved by ada in Slack: looks fine")."""
    status = RequestStatus(request.status)
    answer = request.answer if isinstance(request.answer, dict) else None
    if answer is not None:
        approved = answer.get("approved")
        verb = "Approved" if approved is True else "Denied" if approved is False else "Answered"
        by = request.answered_by.username if request.answered_by is not None else None
        via = Via(request.answered_via) if request.answered_via in Via.values else None
        if via in _DECIDERS:
            who = _DECIDERS[via]
        elif by is not None:
            who = by + (f" for {request.answered_for.username}" if request.answered_for is not None else "")
            who += {Via.SLACK: " in Slack", Via.API: " through the API"}.get(via, "") if via is not None else ""
        else:
            who = "someone"
        reason = answer.get("reason")
        said = f": {cut(str(reason), 500)}" if reason else ""
        return f"{verb} by {who}{said}"
    if status == RequestStatus.CANCELLED and request.closed_by is not None:
        return f"Cancelled by {request.closed_by.username}"
    return {
        RequestStatus.EXPIRED: "Expired: nobody answered before its deadline",
        RequestStatus.CANCELLED: "Cancelled",
        RequestStatus.ABANDONED: "Closed: its run went on without it",
    }.get(status, "Closed")


def progress_line(tally: Tally) -> str:
    """A quorum's progress: "1 of 2 approvals (sam) · waiting for security"."""
    by = f" ({', '.join(tally.named)})" if tally.named else ""
    return f"{tally.given} of {tally.required} approvals{by} · {tally.waiting_for()}"


def message(request: PendingRequest, tally: Tally | None) -> tuple[str, list[Block]]:
    """The fallback text and the blocks of `request`'s message as it stands (`tally`: its quorum, when it needs
    several approvals)."""
    agent = request.agent.name
    headline = f"{agent}: {what(request)}"
    state = state_of(request, tally.given if tally else 0)
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text=cut(headline, HEADER_CHARS)))]
    lines = [f"*Agent* {escaped(agent)} · *{'Tool' if request.tool_name else 'Kind'}* {escaped(what(request))}"]
    if request.message:
        lines.append(cut_escaped(request.message, 1900))
    if request.policy and request.policy.get("reason"):
        binding = cut_escaped(str(request.policy.get("binding") or ""), 100)
        lines.append(f"_Policy {binding}:_ {cut_escaped(str(request.policy['reason']), 500)}")
    blocks.append(SectionBlock(text=MarkdownTextObject(text=cut("\n".join(lines), SECTION_CHARS))))
    arguments = request.arguments if isinstance(request.arguments, dict) else {"arguments": request.arguments}
    items = list(arguments.items())
    if items:
        shown = items[:FIELDS] if len(items) <= FIELDS else items[: FIELDS - 1]
        fields = [_field(str(name), value) for name, value in shown]
        if len(items) > len(shown):
            more = len(items) - len(shown)
            fields.append(
                MarkdownTextObject(text=f"_and {more} more argument{'s' if more != 1 else ''}: open it in Airlock_")
            )
        blocks.append(SectionBlock(fields=fields))
    notes = []
    if request.groups:
        notes.append(f"For {escaped(request.approvers_label)}")
    if tally is not None and not state.decided:
        notes.append(escaped(progress_line(tally)))
    if notes:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=" · ".join(notes))]))
    link = ButtonElement(text="Open in Airlock", action_id=OPEN, url=console_link(request))
    if state.decided:
        outcome = outcome_line(request)
        blocks.append(SectionBlock(text=MarkdownTextObject(text=cut(f"*{escaped(outcome)}*", SECTION_CHARS))))
        blocks.append(ActionsBlock(elements=[link]))
        text = f"{escaped(headline)}: {escaped(outcome)}"
    else:
        buttons = [link]
        if KINDS[request.kind].selectable:  # one yes or no answers it (slackapp/answering.py)
            value = str(request.id)
            buttons = [
                ButtonElement(text="Approve", action_id=APPROVE, value=value, style="primary"),
                ButtonElement(text="Deny", action_id=DENY, value=value, style="danger"),
                link,
            ]
        blocks.append(ActionsBlock(elements=buttons))
        text = f"{escaped(headline)} waits for an answer"
    return text[:TEXT_CHARS], blocks


def deny_modal(request: PendingRequest, channel_id: str) -> View:
    """The modal Deny opens for the reason (optional); its submission names the request and the channel."""
    metadata = json.dumps({"request": str(request.id), "channel": channel_id})
    return View(
        type="modal",
        callback_id=DENY_MODAL,
        private_metadata=metadata,
        title=PlainTextObject(text="Deny"),
        submit=PlainTextObject(text="Deny"),
        close=PlainTextObject(text="Cancel"),
        blocks=[
            SectionBlock(
                text=MarkdownTextObject(text=f"Deny *{escaped(request.agent.name)}: {escaped(what(request))}*?")
            ),
            InputBlock(
                block_id=REASON_BLOCK,
                label=PlainTextObject(text="Reason"),
                optional=True,
                element=PlainTextInputElement(action_id=REASON_INPUT, multiline=True, max_length=REASON_CHARS),
            ),
        ],
    )
