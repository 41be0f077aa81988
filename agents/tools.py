"""The registry of server tools: Python functions an agent definition can choose by name."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.mail import send_mail


@dataclass(frozen=True)
class ServerTool:
    name: str
    function: Callable[..., Any]
    description: str
    side_effects: bool


REGISTRY: dict[str, ServerTool] = {}


def server_tool(*, side_effects: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        description = (function.__doc__ or "").strip()
        REGISTRY[function.__name__] = ServerTool(function.__name__, function, description, side_effects)
        return function

    return register


@server_tool(side_effects=False)
def get_time() -> str:
    """The current date and time in UTC, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@server_tool(side_effects=True)
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email through the console's mail backend."""
    sent = send_mail(subject, body, None, [to])
    return f"sent to {to}" if sent else f"not sent to {to}"
