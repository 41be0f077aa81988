"""Connections: what makes the server start a process, open a network connection or read an environment
variable (SPEC section 2). They belong to the installation: superusers define them (Django admin,
`manage.py load_connections`) and grant them to tenants; a tenant's definition only names one.

This module holds what needs no database: the kinds, the frozen settings a turn runs with
(`ConnectionSpec`) and the connections every tenant has. The stored ones are `console.models.Connection`.
"""

import sys
from dataclasses import dataclass

ENV_NAME = r"^[A-Z_][A-Z0-9_]{0,127}$"

MODEL_KINDS = frozenset({"scripted", "openai", "anthropic"})


@dataclass(frozen=True)
class ConnectionSpec:
    """The settings of one connection as a turn uses them; equal settings compare (and hash) equal."""

    name: str
    kind: str
    base_url: str = ""
    api_key_env: str = ""
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    url: str = ""
    secret_env: str = ""


# Every tenant has these; an installation cannot define a connection of the same name.
BUILTIN: dict[str, ConnectionSpec] = {
    "scripted": ConnectionSpec("scripted", "scripted"),
    "meetings": ConnectionSpec("meetings", "mcp", command=sys.executable, args=("-m", "agents.mcp_demo")),
}
