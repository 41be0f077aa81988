"""A definition's `hooks` as the loader reads them with Airlock's registry: what saving one checks."""

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from agent_hooks import (
    DeclarationError,
    HostRegistry,
    HostSurface,
    InterceptionEmitter,
)

from agents.policies.acs import acs_binding, acs_sources, compiled, sampled
from agents.policies.escalations import RESOLVER, InboxResolver
from agents.policies.points import POINTS
from agents.policies.webhooks import webhook_binding
from console.connections import ConnectionSpec

SURFACE = HostSurface.from_capabilities(["model_calls", "tool_calls", "host_declaration"])


def registry(
    connections: Mapping[str, ConnectionSpec] | None, resolver: Any, answered: Callable[[Any], None] | None = None
) -> HostRegistry:
    """Airlock's kinds and resolver for a declaration; `answered`, when given, hears every binding's answer as
    it gave it, before the emitter checks it (the HTTP interceptor passes an unusable one on as given)."""
    kinds: dict[str, Callable[[Any, Any], Any]] = {
        "airlock.acs": acs_binding,
        "airlock.webhook": webhook_binding(connections),
    }
    found = HostRegistry(SURFACE)
    for name, build in kinds.items():
        found = found.kind(name, build if answered is None else _heard(build, answered))
    return found.approval_resolver(RESOLVER, resolver)


def _heard(build: Callable[[Any, Any], Any], answered: Callable[[Any], None]) -> Callable[[Any, Any], Any]:
    def heard(config: Any, binding: Any) -> Any:
        return _Heard(build(config, binding), answered)

    return heard


class _Heard:
    """An interceptor whose answers `answered` hears on their way to the emitter."""

    def __init__(self, inner: Any, answered: Callable[[Any], None]) -> None:
        self.inner, self.answered = inner, answered

    async def intercept(self, context: Any) -> Any:
        answer = self.inner.intercept(context)
        if inspect.isawaitable(answer):
            answer = await answer
        self.answered(answer.to_wire() if hasattr(answer, "to_wire") else answer)
        return answer


def declaration_problems(document: Any) -> list[str]:
    """Why `document` cannot be an agent's `hooks` (the loader's refusals, with their JSON pointers, and
    surface points no binding covers, which would deny every run); empty when it can. Each `airlock.acs`
    manifest is checked here (`safe_manifest`); its policies compile when the version is saved
    (`compile_problems`), so a version that saves is a version that runs."""
    try:
        emitter = InterceptionEmitter.from_declaration_value(document, registry(None, InboxResolver({})))
    except DeclarationError as error:
        return [f"{error.code} at {f.pointer or '/'}: {f.detail}" for f in error.findings] or [error.code]
    resolved = emitter.declaration
    assert resolved is not None
    wire = resolved.to_wire()
    covered: set[str] = set()
    for binding in wire.get("bindings", []):
        covered |= set(binding.get("at") or POINTS)
    surface = set((wire.get("surface") or {}).get("interception_points") or POINTS)
    missing = [point for point in POINTS if point in surface and point not in covered]
    if missing:
        return [f"no binding covers {', '.join(missing)}: every run would be denied there (omit `at` to bind all)"]
    return []


def unlisted_tools(document: Any, tools: list[str]) -> list[str]:
    """Why `tools` (the definition's server and client tools) would be denied by a valid `document`: an
    `airlock.acs` manifest that governs tool calls denies every tool it does not list (`tool_unknown`)."""
    return [
        f"the manifest of binding {binding_id!r} governs tool calls but does not list "
        f"{', '.join(missing)} under `tools:`: every call of it would be denied"
        for binding_id, missing in _unlisted(document, tools)
    ]


def denied_tools(document: Any, tools: list[str]) -> set[str]:
    """Of `tools`, those a valid `document` denies whatever the call (a gateway leaves them out of its list)."""
    return {name for _, missing in _unlisted(document, tools) for name in missing}


def _unlisted(document: Any, tools: list[str]) -> list[tuple[Any, list[str]]]:
    """(binding id, the tools it does not list) of each `airlock.acs` binding that governs tool calls."""
    found = []
    for binding in document.get("bindings", []):
        if binding.get("kind") != "airlock.acs":
            continue
        sources = acs_sources(binding["config"])
        missing = [name for name in tools if name not in sources.tools]
        if sources.points & {"pre_tool_call", "post_tool_call"} and missing:
            found.append((binding.get("id"), missing))
    return found


def webhook_connections(document: Any) -> list[tuple[int, str]]:
    """(binding index, connection name) of each `airlock.webhook` binding of a valid `document`."""
    return [
        (i, binding.get("config", {}).get("connection"))
        for i, binding in enumerate(document.get("bindings", []) if isinstance(document, dict) else [])
        if isinstance(binding, dict) and binding.get("kind") == "airlock.webhook"
    ]


def compile_problems(document: Any, tenant: str, samples: list[dict[str, Any]] | None = None) -> list[str]:
    """Why the `airlock.acs` policies of a valid `document` do not compile, in the loader's words, or (given
    `samples`, agents.policies.save_samples) fail when evaluated at the samples of the points each binding
    covers: a verdict the standard does not accept, an evaluation error, two rules giving one rule two values;
    each named with its point, the rule's module and line and why (`SampleFailure`). What saving a definition
    checks after its structure, once per process per policy text (and samples). A policy over the compile
    budget does not compile; CompilesThrottled when `tenant` compiled too many new texts lately."""
    problems = []
    declared = document if isinstance(document, dict) else {}
    surface = set((declared.get("surface") or {}).get("interception_points") or POINTS)
    for index, binding in enumerate(declared.get("bindings", [])):
        if not isinstance(binding, dict) or binding.get("kind") != "airlock.acs":
            continue
        sources = acs_sources(binding.get("config") or {})
        found = list(compiled(sources, tenant))
        if not found and samples:
            covered = surface & set(binding.get("at") or POINTS)
            failures = sampled(sources, tenant, [c for c in samples if c["interception_point"] in covered])
            # Once each (two tools' samples may fail alike); the form splits problems at "; ".
            found = list(dict.fromkeys(str(failure).replace("; ", ", ") for failure in failures))
        problems += [f"declaration_error:binding_rejected at /bindings/{index}/config: {p}" for p in found]
    return problems
