"""Slack's Web API and its signatures, per connection: the bot token and signing secret are read from the variables
the connection names when they are used, so a rotated secret applies at once."""

import os
from collections.abc import Mapping

from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from console.connections import SLACK_API_BASE_URL
from console.models import Connection, ConnectionKind

# A call to Slack that takes longer fails and is tried again later (the outbox), or is given up (a modal, whose
# trigger lasts 3 s).
TIMEOUT_SECONDS = 5
MODAL_TIMEOUT_SECONDS = 2


class SlackUnavailable(Exception):
    """The connection cannot call Slack: its bot token's variable is unset."""


def client_for(connection: Connection, timeout: int = TIMEOUT_SECONDS) -> WebClient:
    """slack_sdk's client on the connection's base URL with its bot token; it retries nothing itself (the outbox
    does, with its backoff)."""
    token = os.environ.get(connection.api_key_env, "") if connection.api_key_env else ""
    if not token:
        raise SlackUnavailable(f"The variable {connection.api_key_env or '(none)'} holds no bot token.")
    return WebClient(
        token=token, base_url=connection.base_url or SLACK_API_BASE_URL, timeout=timeout, retry_handlers=[]
    )


def signed_by(body: bytes, headers: Mapping[str, str]) -> Connection | None:
    """The Slack app connection whose signing secret signed `body` (v0: HMAC-SHA256 over `v0:timestamp:body`,
    the timestamp within 5 minutes: slack_sdk's SignatureVerifier), or None."""
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > 12 or not signature.startswith("v0="):
        return None
    try:
        body.decode()  # Slack sends UTF-8; the verifier decodes the body, and a server error was its refusal
    except UnicodeDecodeError:
        return None
    for connection in Connection.objects.filter(kind=ConnectionKind.SLACK).order_by("pk"):
        secret = os.environ.get(connection.secret_env, "") if connection.secret_env else ""
        if secret.strip() and SignatureVerifier(secret).is_valid(body, timestamp, signature):
            return connection
    return None
