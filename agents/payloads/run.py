"""A run's and its session's lifecycle (Airlock's own, SPEC section 5, beside the SDK's session events) and
a policy's verdict (section 8)."""

from typing import Any, Literal

from agents.payloads.base import EventType, Payload, Shape, Transient, optional


class RunStarted(Payload):
    type = EventType.RUN_STARTED
    agent: str
    definitionVersion: int
    sessionId: str | None
    culture: str | None
    parameters: dict[str, Any]
    previousRunId: str | None
    replayOf: str | None = optional()


class ErrorInfo(Shape):
    code: str
    message: str


class RunRetrying(Payload):
    type = EventType.RUN_RETRYING
    attempt: int
    error: ErrorInfo
    retryAt: str


class RunAwaiting(Payload):
    type = EventType.RUN_AWAITING
    status: str
    pendingRequests: list[dict[str, Any]]


class RunCompleted(Payload):
    type = EventType.RUN_COMPLETED
    output: str | None


class RunFailed(Payload):
    type = EventType.RUN_FAILED
    error: ErrorInfo


class SessionError(Payload):
    """Alongside `run.failed`, as the SDK reports a failed turn (`errorType`: the error's code)."""

    type = EventType.SESSION_ERROR
    errorType: str
    message: str
    statusCode: int | None = optional()


class RunCancelled(Payload):
    type = EventType.RUN_CANCELLED
    cancelledBy: str | None = optional()


class Abort(Payload):
    """Before `run.cancelled`: the SDK's word that the turn was aborted (its `session.idle` says `aborted`)."""

    type = EventType.ABORT
    reason: Literal["user_initiated"]


class BlockedError(Shape):
    code: str
    point: str
    binding: str | None = optional()  # the policy binding that denied
    reason: str | None = optional()
    message: str


class RunBlocked(Payload):
    type = EventType.RUN_BLOCKED
    error: BlockedError


class PolicyVerdict(Payload):
    """Section 8: a verdict other than allow; at a tool point, which call it was about and the arguments the
    policy saw (the audit shows and searches them)."""

    type = EventType.POLICY_VERDICT
    point: str
    decision: str
    reason: str | None
    message: str | None
    binding: str | None
    enforced: bool
    toolName: str | None = optional()
    toolCallId: str | None = optional()
    arguments: dict[str, Any] | None = optional()


class SessionIdle(Transient):
    type = EventType.SESSION_IDLE
    aborted: bool


class SessionTitleChanged(Transient):
    """The session's title: its first message's first line (agents.events.session_title)."""

    type = EventType.SESSION_TITLE_CHANGED
    title: str
