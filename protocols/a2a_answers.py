"""Answers an A2A client sends on an `input-required` task (SPEC section 16): the DataParts of its message hold
respond fields, `{"requestId": …, "approved": true, …}`, a list of them, or `{"responses": [...]}` (a 0.3 DataPart
is an object). Every answer is checked before any is given, so a refused one leaves every request as it was; then
each goes through the respond contract (`approvals.actions.answer_request`, as `POST /api/requests/{id}/responses`),
whose last answer queues the task's continuation."""

import uuid
from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import Message
from pydantic import ValidationError

from agents.models import Run
from approvals.actions import answer_request
from approvals.actions.answers import acting, refuse_by_requirement, response_refusal
from approvals.decisions import Actor
from approvals.models import PendingRequest, RequestStatus
from approvals.responses import TAKEN, Outcome, Response, ResponseRefused
from console.json_bodies import unstorable_said
from console.models import Membership
from protocols.a2a_tasks import plain

# The most answers one message may carry.
MOST_ANSWERS = 100


class TaskAnswerRefused(Exception):
    """An answer the task does not take; nothing was given. `code` is the respond contract's word for it."""

    def __init__(self, code: str, detail: str, request_id: str | None = None) -> None:
        super().__init__(detail)
        self.code, self.detail, self.request_id = code, detail, request_id

    def data(self) -> dict[str, str]:
        return {"code": self.code, **({"requestId": self.request_id} if self.request_id else {})}


def answers_in(message: Message) -> list[Any]:
    """The respond fields the message's DataParts carry, each one answer (not checked yet; TaskAnswerRefused for
    values no database stores: NaN or an infinity, which protobuf holds and JSON has not, text with a NUL)."""
    found: list[Any] = []
    for part in message.parts:
        if not part.HasField("data"):
            continue
        try:
            value = plain(part.data)
        except ValueError:
            detail = "An answer holds a number JSON has not (NaN or an infinity)."
            raise TaskAnswerRefused("invalid_request", detail) from None
        if isinstance(value, dict) and set(value) == {"responses"}:
            value = value["responses"]
        found += value if isinstance(value, list) else [value]
    if wrong := unstorable_said(found, ("answers",)):
        raise TaskAnswerRefused("invalid_request", f"{wrong}.")
    return found


def read(raw: list[Any]) -> list[Response]:
    """The answers as the respond contract's `Response`s (TaskAnswerRefused: a malformed one, an unknown id)."""
    if len(raw) > MOST_ANSWERS:
        raise TaskAnswerRefused("too_many_answers", f"A message carries at most {MOST_ANSWERS} answers.")
    responses = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("requestId"), str):
            detail = f"Answer {index} is not an object of respond fields with a requestId."
            raise TaskAnswerRefused("invalid_answer", detail)
        try:
            uuid.UUID(item["requestId"])
        except ValueError:
            raise TaskAnswerRefused(
                "unknown_request", "The task waits on no such request.", item["requestId"]
            ) from None
        try:
            responses.append(Response.model_validate(item))
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            raise TaskAnswerRefused("invalid_answer", f"Answer {index}: {problems}", item["requestId"]) from None
    ids = [response.request_id for response in responses]
    if len(set(ids)) < len(ids):
        raise TaskAnswerRefused("invalid_answer", "A request is answered twice in one message.")
    return responses


@dataclass(frozen=True)
class Checked:
    response: Response
    pending: PendingRequest


def check(membership: Membership, actor: Actor, run: Run, responses: list[Response]) -> list[Checked]:
    """Each answer with the request it answers, one the task's last run `run` waits on; TaskAnswerRefused for the first
    that the respond contract would refuse, having given none."""
    checked = []
    for response in responses:
        rid = str(response.request_id)
        pending = (
            PendingRequest.objects.select_related("run__version", "session__agent", "agent", "tenant")
            .filter(tenant=membership.tenant, session=run.session_id, id=response.request_id)
            .first()
        )
        if pending is None:
            raise TaskAnswerRefused("unknown_request", f"The task waits on no request {rid}.", rid)
        if pending.status != RequestStatus.PENDING or pending.answer is not None:
            how = "answered" if pending.answer is not None else pending.status
            raise TaskAnswerRefused("request_closed", f"The request {rid} was {how} already.", rid)
        try:
            refuse_by_requirement(acting(membership, actor, pending), pending, response)
            refused = response_refusal(pending, response)
        except ResponseRefused as error:
            raise TaskAnswerRefused(error.code, error.detail, rid) from None
        if refused is not None:
            raise TaskAnswerRefused(refused.status, refused.message, rid)
        checked.append(Checked(response, pending))
    return checked


def give(membership: Membership, actor: Actor, checked: list[Checked]) -> list[Outcome]:
    """Give the checked answers through the respond contract, in order; TaskAnswerRefused for one another answer or a
    closing beat (those before it stay given, as two operators' answers would)."""
    outcomes = []
    for answer in checked:
        try:
            outcome = answer_request(membership, actor, answer.response, run_id=answer.pending.run_id)
        except ResponseRefused as error:
            raise TaskAnswerRefused(error.code, error.detail, str(answer.pending.id)) from None
        if outcome.status not in TAKEN:
            raise TaskAnswerRefused(outcome.status, outcome.message, outcome.request_id)
        outcomes.append(outcome)
    return outcomes
