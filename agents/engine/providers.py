"""Model providers: one entry per connection kind that serves a model (`console.connections.MODEL_KINDS`).
A new provider is one entry here, its kind in `console.models.ConnectionKind` with the settings it
uses, and its name in `MODEL_KINDS` (tests/agents/test_providers.py holds the three together)."""

from collections.abc import Callable
from typing import Any

from django.conf import settings
from pydantic_ai.models import Model

from agents.engine.scripted import scripted_model
from console.connections import ConnectionSpec

# (connection, model name, API key) -> the model, and the SDK provider whose client it calls (None: no client)
Builder = Callable[[ConnectionSpec, str, str | None], tuple[Model, Any]]


def _scripted(spec: ConnectionSpec, model_name: str, api_key: str | None) -> tuple[Model, Any]:
    return scripted_model(), None


def _openai(spec: ConnectionSpec, model_name: str, api_key: str | None) -> tuple[Model, Any]:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=spec.base_url or None, api_key=api_key or "not-needed")
    return OpenAIChatModel(model_name, provider=provider), provider


def _anthropic(spec: ConnectionSpec, model_name: str, api_key: str | None) -> tuple[Model, Any]:
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    provider = AnthropicProvider(api_key=api_key or "not-needed", base_url=spec.base_url or None)
    return AnthropicModel(model_name, provider=provider), provider


PROVIDERS: dict[str, Builder] = {"scripted": _scripted, "openai": _openai, "anthropic": _anthropic}


def connection_model(spec: ConnectionSpec, model_name: str, api_key: str | None = None) -> Model | None:
    """The model of a connection, or None when its kind serves no model."""
    build = PROVIDERS.get(spec.kind)
    if build is None:
        return None
    model, sdk = build(spec, model_name, api_key)
    if sdk is not None:
        # The SDKs retry 408/409/429/5xx and refused connections with backoff, honouring a Retry-After of
        # up to two minutes, while the run's request waits. Fail at once instead: the error code says
        # whether it is transient, and whoever runs the turn decides when to try again. (Set on the SDK
        # client the provider owns, so pydantic-ai still replaces its HTTP client when a turn runs on a
        # new event loop.)
        sdk.client.max_retries = 0
        # A provider that stops answering fails the turn (provider_timeout) instead of holding it for
        # the SDK's default of ten minutes.
        sdk.client.timeout = float(settings.PROVIDER_TIMEOUT_SECONDS)
    return model
