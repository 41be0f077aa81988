"""Airlock's client for agents that run elsewhere (SPEC section 12), and adapters for their frameworks.

The client needs httpx only; an adapter is imported when first named, so its framework is needed only then:
`from airlock_client import run_with_airlock` (OpenAI Agents SDK), `invoke_with_airlock` (LangGraph),
`AirlockInterceptor` and `AirlockResolver` (agent-hooks).
"""

from importlib import import_module
from typing import Any

from airlock_client.client import (
    Airlock,
    AirlockError,
    Answered,
    AsyncAirlock,
    Decision,
    Opened,
    Request,
    RequestClosed,
    WaitTimeout,
)

# Adapter name -> its module, imported on first use.
_ADAPTERS = {
    "run_with_airlock": "airlock_client.openai_agents",
    "run_with_airlock_sync": "airlock_client.openai_agents",
    "invoke_with_airlock": "airlock_client.langgraph",
    "ainvoke_with_airlock": "airlock_client.langgraph",
    "AirlockInterceptor": "airlock_client.agent_hooks",
    "AirlockResolver": "airlock_client.agent_hooks",
}

__all__ = [
    "Airlock",
    "AirlockError",
    "AirlockInterceptor",
    "AirlockResolver",
    "Answered",
    "AsyncAirlock",
    "Decision",
    "Opened",
    "Request",
    "RequestClosed",
    "WaitTimeout",
    "ainvoke_with_airlock",
    "invoke_with_airlock",
    "run_with_airlock",
    "run_with_airlock_sync",
]


def __getattr__(name: str) -> Any:
    if name in _ADAPTERS:
        return getattr(import_module(_ADAPTERS[name]), name)
    raise AttributeError(f"module 'airlock_client' has no attribute {name!r}")
