"""The pydantic-ai `Agent` of a definition on its model connection, built once and cached (`agent_for`), and
what building one needs: the connection's settings and provider key, the model, the server tools' schemas."""

import hashlib
import os
import threading
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic_ai import Agent, ConversationTypeAdapter, DeferredToolRequests, Tool
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models import Model

from agents.definitions import DefinitionContent
from agents.engine import providers, spans
from agents.engine.context import TurnDeps
from agents.engine.gate import definition_toolsets
from agents.engine.outcome import TurnError
from agents.engine.seams import engine_capabilities
from agents.server_tools import REGISTRY
from console.connections import ConnectionSpec


@cache
def server_tool_schema(name: str) -> dict[str, Any]:
    """The JSON schema of a server tool's parameters, as the engine gives it to the model."""
    return Tool(REGISTRY[name].function).function_schema.json_schema


def connection_for(connections: Mapping[str, ConnectionSpec], name: str) -> ConnectionSpec:
    """The settings of the connection `name`, as resolved for the run's tenant before the turn."""
    spec = connections.get(name)
    if spec is None:
        raise TurnError("unknown_connection", f"No connection named {name!r} is granted to this tenant.")
    return spec


def api_key_for(spec: ConnectionSpec) -> str | None:
    """The provider key, read from the environment variable the connection names (never stored)."""
    if not spec.api_key_env:
        return None
    api_key = os.environ.get(spec.api_key_env)
    if not api_key:
        raise TurnError("provider_key_missing", f"The environment variable {spec.api_key_env} is not set.")
    return api_key


def build_model(spec: ConnectionSpec, model_name: str, api_key: str | None = None) -> Model:
    model = providers.connection_model(spec, model_name, api_key)
    if model is None:
        raise TurnError("unknown_connection", f"The connection {spec.name!r} is not a model provider.")
    return model


# Per thread: a turn runs on its thread's own event loop (`console.loops.run_here`), and pydantic-ai's provider
# replaces its HTTP client (a new connection, TLS context and all) whenever a turn comes from another loop than
# the last, as turns from the worker pool's threads or the console's request threads would, taking turns.
_CACHE = threading.local()


def agent_for(content: DefinitionContent, connection: ConnectionSpec) -> Agent[TurnDeps, Any]:
    """An agent for the definition's model and tools on `connection`; cached by content and connection,
    as versions never change and a changed connection must take effect; one per thread (`_CACHE`).

    The key is read at every turn and is part of the cache key, so that a changed or removed variable
    takes effect on the next turn (the key itself is held only by the provider's client)."""
    api_key = api_key_for(connection)
    key_digest = hashlib.sha256((api_key or "").encode()).hexdigest()
    key = f"{key_digest} {connection!r} {content.identity}{spans.tracing_key()}"
    agents: dict[str, Agent[TurnDeps, Any]] = _CACHE.__dict__.setdefault("agents", {})
    agent = agents.get(key)
    if agent is None:
        agent = Agent(
            build_model(connection, content.model.name or "", api_key),
            output_type=[str, DeferredToolRequests],
            deps_type=TurnDeps,
            toolsets=definition_toolsets(content),
            retries=1,
            capabilities=[*engine_capabilities(content.hooks is not None), *spans.call_spans()],
        )
        if len(agents) > 256:
            agents.clear()
        agents[key] = agent
    return agent


def warm_engine() -> None:
    """Build the conversation's serializers now. pydantic-ai defers them to their first use (~80 ms of
    schema building), which every thread of a worker pool starting at once would do side by side."""
    ConversationTypeAdapter.rebuild()
    ModelMessagesTypeAdapter.rebuild()
