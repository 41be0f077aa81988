"""What a turn ends with: its outcome (the output, the calls now waiting on the outside world, the conversation
to store, the usage), or a TurnError with a stable code; `provider_error` maps a model provider's failure to
its code."""

import json
from dataclasses import dataclass
from typing import Any

from pydantic_ai import exceptions as pai_errors
from pydantic_ai.usage import RunUsage

from agents.request_kinds import RequestKindName


class TurnError(Exception):
    """A turn that could not finish; `code` is stable, `transient` says a retry may help."""

    def __init__(self, code: str, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.code, self.message, self.transient = code, message, transient


class McpServerFailed(Exception):
    """An MCP server could not be started or reached, or died during the turn."""


class TurnBlocked(TurnError):
    """A policy denied the turn (SPEC section 8): the run ends `blocked` with `error` as its error."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__("policy_denied", error["message"])
        self.error = error


@dataclass
class PendingCall:
    kind: RequestKindName
    tool_name: str
    call_id: str
    arguments: dict[str, Any]
    message: str = ""
    requested_schema: dict[str, Any] | None = None
    engine_state: dict[str, Any] | None = None
    # A policy's escalation this request stands for: {binding, reason, message}.
    policy: dict[str, Any] | None = None


@dataclass
class TurnOutcome:
    output: str | None
    pending: list[PendingCall]
    conversation: dict[str, Any] | None
    usage: dict[str, int]
    # The user's message as a policy's `input` verdict left it, when it changed it.
    message: str | None = None


def usage_between(usage: RunUsage, before: RunUsage) -> dict[str, int]:
    """The turn's usage: what the conversation used by its end, less what it had used before."""
    return {
        "requests": usage.requests - before.requests,
        "inputTokens": usage.input_tokens - before.input_tokens,
        "outputTokens": usage.output_tokens - before.output_tokens,
    }


def provider_error(error: pai_errors.ModelAPIError) -> TurnError:
    categories: list[tuple[type[Exception], str, bool]] = [
        (pai_errors.ModelRateLimitError, "provider_rate_limited", True),
        (pai_errors.ModelAuthenticationError, "provider_auth_failed", False),
        (pai_errors.ModelNotFoundError, "provider_model_not_found", False),
        (pai_errors.ModelTimeoutError, "provider_timeout", True),
        (pai_errors.ModelConnectionError, "provider_unreachable", True),
        (pai_errors.ModelUnavailableError, "provider_unavailable", True),
        (pai_errors.ModelServerError, "provider_server_error", True),
        (pai_errors.ModelRequestRejectedError, "provider_rejected", False),
    ]
    for kind, code, transient in categories:
        if isinstance(error, kind):
            return TurnError(code, f"The model provider failed: {error}", transient=transient)
    if isinstance(error.__cause__, json.JSONDecodeError | UnicodeDecodeError):
        # pydantic-ai reports a body the SDK could not decode as a bare ModelAPIError.
        return TurnError("provider_malformed_reply", f"The model's reply could not be used: {error}")
    return TurnError("provider_error", f"The model provider failed: {error}")
