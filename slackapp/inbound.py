"""What Slack sends (SPEC section 17): `POST /slack/interactions` (a button clicked, the deny modal submitted) and
`POST /slack/commands` (`/airlock link CODE`). Each is verified first (signed with a Slack app connection's secret,
v0, within 5 minutes: else 401 and nothing done) and handled once (a retry, `X-Slack-Retry-Num`, or a replay of the
same body finds its digest and changes nothing; the digest is written in the transaction of the handling, so a retry
after a handling that failed handles it anew), then answered at once: what Slack must show goes through the outbox
(the updated message, an ephemeral notice), except the modal, whose trigger lasts 3 s: it is opened once the
handling is committed."""

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, Literal
from urllib.parse import parse_qs

from django.core.exceptions import RequestDataTooBig
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from approvals.models import PendingRequest
from console.models import Connection
from console.problems import problem
from slackapp import outbox
from slackapp.answering import answer_in_slack, answer_refusal, not_linked
from slackapp.blocks import APPROVE, DENY, DENY_MODAL, REASON_BLOCK, REASON_CHARS, REASON_INPUT, deny_modal
from slackapp.linking import linked_member, redeem
from slackapp.models import SlackDelivery, SlackMessage, SlackNotice
from slackapp.web import MODAL_TIMEOUT_SECONDS, client_for, signed_by

logger = logging.getLogger(__name__)

SLACK_ID = re.compile(r"[A-Z0-9]{1,32}")
HELP = "Send `/airlock link CODE` with the code from Airlock's Notifications page to link your Slack user."


class _Slack(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SlackUser(_Slack):
    id: str = Field(pattern=SLACK_ID.pattern)
    team_id: str | None = Field(default=None, pattern=SLACK_ID.pattern)


class SlackRef(_Slack):
    id: str = Field(max_length=32)


class SlackAction(_Slack):
    action_id: str = Field(max_length=255)
    value: str = Field(default="", max_length=2000)


class BlockActions(_Slack):
    type: Literal["block_actions"]
    user: SlackUser
    team: SlackRef | None = None
    channel: SlackRef | None = None
    trigger_id: str = Field(default="", max_length=255)
    actions: list[SlackAction] = Field(max_length=25)


class ViewState(_Slack):
    values: dict[str, dict[str, dict[str, Any]]] = {}


class SubmittedView(_Slack):
    callback_id: str = ""
    private_metadata: str = Field(default="", max_length=3000)
    state: ViewState = ViewState()


class ViewSubmission(_Slack):
    type: Literal["view_submission"]
    user: SlackUser
    team: SlackRef | None = None
    view: SubmittedView


class ModalMetadata(_Slack):
    request: uuid.UUID
    channel: str = Field(default="", max_length=32)


class Received:
    """A request from Slack: its form fields, the connection whose secret signed it, and the digest that tells a
    retry of it (`SlackDelivery.key`)."""

    def __init__(self, connection: Connection, fields: dict[str, str], key: str) -> None:
        self.connection, self.fields, self.key = connection, fields, key


def _received(request: HttpRequest) -> Received | HttpResponse:
    """The verified request, or the answer that refuses it (401 unsigned or stale, 400 unreadable)."""
    try:
        body = request.body
    except RequestDataTooBig:
        return problem(413, "body_too_large", "The body is larger than this server reads.")
    connection = signed_by(body, request.headers)
    if connection is None:
        detail = "The request is not signed by a Slack app of this installation, or its timestamp is not recent."
        return problem(401, "invalid_signature", detail)
    try:
        parsed = parse_qs(body.decode(), strict_parsing=False, max_num_fields=100)
    except (UnicodeDecodeError, ValueError):
        return problem(400, "invalid_request", "The body is not a form Slack sends.")
    key = hashlib.sha256(f"{connection.pk}:".encode() + body).hexdigest()
    return Received(connection, {name: values[-1] for name, values in parsed.items()}, key)


def _once(request: HttpRequest, handle: Callable[[Received], HttpResponse]) -> HttpResponse:
    """`handle` the verified request and record that it was handled, in one transaction: a retry or a replay of it
    after that changes nothing (200), one after a handling that failed (rolled back with its record) handles it."""
    received = _received(request)
    if isinstance(received, HttpResponse):
        return received
    with transaction.atomic():
        try:
            with transaction.atomic():
                SlackDelivery.objects.create(key=received.key)
        except IntegrityError:
            retry = request.headers.get("X-Slack-Retry-Num")
            logger.info("Slack sent a request again (retry %s): handled before", retry)
            return HttpResponse(status=200)
        return handle(received)


def _tell(connection: Connection, channel: str, user: str, text: str) -> None:
    """An ephemeral message to `user` in `channel`, through the outbox."""
    if channel and text:
        SlackNotice.objects.create(
            connection=connection, channel=channel, user_id=user, text=text[:3000], due_at=timezone.now()
        )
        transaction.on_commit(outbox.wake_outbox)


def _refresh(request_id: uuid.UUID) -> None:
    """The request's messages are due now (an answer from Slack shows at once rather than at the next sync)."""
    SlackMessage.objects.filter(request_id=request_id, final=False).update(due_at=timezone.now())
    transaction.on_commit(outbox.wake_outbox)


@csrf_exempt
@require_POST
def interactions(request: HttpRequest) -> HttpResponse:
    """A button clicked (`block_actions`) or the deny modal submitted (`view_submission`)."""
    return _once(request, _interaction)


def _interaction(received: Received) -> HttpResponse:
    try:
        data = json.loads(received.fields.get("payload", ""))
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "block_actions":
            return _clicked(received.connection, BlockActions.model_validate(data))
        if kind == "view_submission":
            return _submitted(received.connection, ViewSubmission.model_validate(data))
    except (ValueError, ValidationError, RecursionError):  # RecursionError: JSON nested past what Python reads
        return problem(400, "invalid_request", "The payload is not an interaction Slack sends.")
    return HttpResponse(status=200)  # anything else Slack may send: acknowledged, nothing to do


def _team(user: SlackUser, team: SlackRef | None) -> str:
    return team.id if team is not None else user.team_id or ""


def _clicked(connection: Connection, payload: BlockActions) -> HttpResponse:
    action = next((a for a in payload.actions if a.action_id in (APPROVE, DENY)), None)
    if action is None:
        return HttpResponse(status=200)  # Open in Airlock: a link, nothing to do here
    user, team = payload.user.id, _team(payload.user, payload.team)
    channel = payload.channel.id if payload.channel is not None else ""
    tell = partial(_tell, connection, channel, user)
    posted = _posted(connection, action.value)
    if posted is None:
        tell("Airlock did not post this request here. Nothing was changed.")
        return HttpResponse(status=200)
    member = linked_member(posted.tenant_id, team, user)
    if member is None:
        tell(not_linked(posted.tenant.name))
        return HttpResponse(status=200)
    pending = posted.request
    if why := answer_refusal(member, pending):
        tell(why)
        return HttpResponse(status=200)
    if action.action_id == APPROVE:
        tell(answer_in_slack(member, team, user, pending.id, approved=True).told)
        _refresh(pending.id)
        return HttpResponse(status=200)
    # Not while the handling's transaction is open: Slack may take up to 2 s to answer.
    transaction.on_commit(partial(_open_modal, connection, payload.trigger_id, pending, channel, user))
    return HttpResponse(status=200)


def _open_modal(connection: Connection, trigger_id: str, pending: PendingRequest, channel: str, user: str) -> None:
    """The deny modal for `pending`, on the click's trigger (valid 3 s); when Slack does not open it, the one who
    clicked is told to click again."""
    try:
        client = client_for(connection, timeout=MODAL_TIMEOUT_SECONDS)
        client.views_open(trigger_id=trigger_id, view=deny_modal(pending, channel))
    except Exception:
        logger.warning("Slack did not open the deny modal for request %s", pending.id, exc_info=True)
        again = "Slack did not open the form for the reason: click Deny again, or deny it in Airlock."
        _tell(connection, channel, user, again)


def _posted(connection: Connection, value: str) -> SlackMessage | None:
    """The message of the request a button names, posted through `connection`."""
    try:
        request_id = uuid.UUID(value)
    except ValueError:
        return None
    messages = SlackMessage.objects.select_related("tenant", "request__agent")
    return messages.filter(connection=connection, request_id=request_id).first()


def _modal_error(text: str) -> HttpResponse:
    return JsonResponse({"response_action": "errors", "errors": {REASON_BLOCK: text[:2000]}})


def _submitted(connection: Connection, payload: ViewSubmission) -> HttpResponse:
    if payload.view.callback_id != DENY_MODAL:
        return HttpResponse(status=200)
    metadata = ModalMetadata.model_validate_json(payload.view.private_metadata)
    user, team = payload.user.id, _team(payload.user, payload.team)
    posted = _posted(connection, str(metadata.request))
    if posted is None:
        return _modal_error("Airlock did not post this request here. Nothing was changed.")
    member = linked_member(posted.tenant_id, team, user)
    if member is None:
        return _modal_error(not_linked(posted.tenant.name))
    if why := answer_refusal(member, posted.request):
        return _modal_error(why)
    typed = payload.view.state.values.get(REASON_BLOCK, {}).get(REASON_INPUT, {}).get("value")
    reason = typed.strip()[:REASON_CHARS] if isinstance(typed, str) else ""
    done = answer_in_slack(member, team, user, posted.request_id, approved=False, reason=reason)
    _refresh(posted.request_id)
    if not done.changed:
        return _modal_error(done.told)
    return HttpResponse(status=200)  # closes the modal; the message says who denied it


@csrf_exempt
@require_POST
def commands(request: HttpRequest) -> HttpResponse:
    """`/airlock link CODE`: link the sender's Slack user to the member whose code it is; anything else: how to."""
    return _once(request, _command)


def _command(received: Received) -> HttpResponse:
    user, team = received.fields.get("user_id", ""), received.fields.get("team_id", "")
    if not SLACK_ID.fullmatch(user) or not SLACK_ID.fullmatch(team):
        return problem(400, "invalid_request", "The command names no Slack user and team.")
    words = received.fields.get("text", "").split()
    told = HELP
    if len(words) == 2 and words[0].lower() == "link" and len(words[1]) <= 20:
        told = redeem(words[1], received.connection, team, user)
    return JsonResponse({"response_type": "ephemeral", "text": told})
