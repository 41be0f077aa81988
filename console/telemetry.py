"""OpenTelemetry traces (SPEC section 18), set up from the standard `OTEL_*` variables and nothing else.

`configure()` (the ASGI application, `manage.py serve` and `run_worker` call it) builds a `TracerProvider` that
batches spans to the OTLP/HTTP exporter when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
is set, unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`; the exporter reads its own variables (headers,
timeout, compression, certificates) and the resource `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`. Unset,
nothing is built and every function here returns at its first line: `tracer_provider()` is None, no span exists.

A run's span has its ids from the run: its trace is the caller's (the W3C `traceparent` its API call carried, kept
on the run as `Run.traceparent`, `caller_traceparent()`) or one of its own, its span id the run id's low 64 bits
(`run_span_context`). Its turn may run in a worker process and its requests be decided in another, much later:
any of them knows the run's span from the run's row alone, with nothing written after the run was built.

No content here: callers pass names, ids, kinds and counts, never a tool's arguments, a model's text, a token or a
secret (`tests/telemetry/test_traces.py` searches every attribute).
"""

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from opentelemetry import baggage, context, trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

logger = logging.getLogger(__name__)

AttributeValue = str | bool | int | float
Attributes = Mapping[str, AttributeValue]

_SCOPE = "airlock"
_PROPAGATOR = TraceContextTextMapPropagator()
# The span ids the next span started in this context takes (`_RunIds`): a run's span is given its run's.
_PRESET: ContextVar[tuple[int, int] | None] = ContextVar("airlock_span_ids", default=None)
_LOW_64 = (1 << 64) - 1


class _Tracing:
    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(_SCOPE)


_STATE: _Tracing | None = None
_CONFIGURED = False


def configure() -> bool:
    """Set tracing up from the environment, once per process (later calls change nothing); whether spans are
    exported. Nothing is imported of the SDK or the exporter, let alone built, when no endpoint is set."""
    global _CONFIGURED
    if _CONFIGURED:
        return _STATE is not None
    _CONFIGURED = True
    env = os.environ
    if not wanted(env):
        return False
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol != "http/protobuf":
        logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: Airlock exports traces over http/protobuf only", protocol)
    # Imported here, not at the top: a process without an endpoint never loads the SDK, the exporter or requests.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    install(BatchSpanProcessor(OTLPSpanExporter()))
    return True


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the variables `env` ask for traces: an OTLP endpoint for them, and the SDK not disabled."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def install(processor: Any) -> Any:
    """Trace through `processor` (an SDK `SpanProcessor`: the batching exporter, or a test's in-memory one) from
    now on in this process; the `TracerProvider` made for it. The provider is Airlock's own, not the global one:
    a test installs and removes it as often as it likes."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    global _STATE
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "airlock"}))
    provider = TracerProvider(resource=resource, id_generator=_run_ids())
    provider.add_span_processor(processor)
    _STATE = _Tracing(provider)
    return provider


def uninstall() -> None:
    """Stop tracing in this process (the provider's spans are flushed and its processors shut down)."""
    global _STATE
    state, _STATE = _STATE, None
    if state is not None:
        state.provider.shutdown()


def tracer_provider() -> Any:
    """The provider spans go to, or None when tracing is off (the engine instruments its agents with it)."""
    return _STATE.provider if _STATE is not None else None


def tracing() -> bool:
    return _STATE is not None


def _run_ids() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class RunIds(RandomIdGenerator):
        """Random ids, but those `_PRESET` gives for the span being started (a run's span, a request's)."""

        def generate_span_id(self) -> int:
            preset = _PRESET.get()
            return preset[1] if preset is not None else super().generate_span_id()

        def generate_trace_id(self) -> int:
            preset = _PRESET.get()
            return preset[0] if preset is not None else super().generate_trace_id()

    return RunIds()


# A run's span context, and where it came from.


def caller_traceparent() -> str:
    """The W3C traceparent of the span current where a run is built (an API call's `traceparent`, `CallerTrace`),
    to keep on the run; "" with none, or with tracing off."""
    if _STATE is None:
        return ""
    current = trace.get_current_span().get_span_context()
    if not current.is_valid:
        return ""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent", "")


def span_context_of(traceparent: str) -> SpanContext | None:
    """The span context a W3C traceparent names; None for "" or a malformed one."""
    if not traceparent:
        return None
    found = trace.get_current_span(_PROPAGATOR.extract({"traceparent": traceparent})).get_span_context()
    return found if found.is_valid else None


def run_span_context(run_id: uuid.UUID | str, traceparent: str) -> SpanContext:
    """The span context of the run `run_id` started under `traceparent` (its caller's, or ""): the caller's trace
    and sampling, else a trace of its own (the run id), and the run id's low 64 bits as its span id."""
    run_id = uuid.UUID(str(run_id))
    caller = span_context_of(traceparent)
    trace_id = caller.trace_id if caller is not None else run_id.int
    flags = caller.trace_flags if caller is not None else TraceFlags(TraceFlags.SAMPLED)
    return SpanContext(trace_id, (run_id.int & _LOW_64) or 1, is_remote=True, trace_flags=flags)


@contextlib.contextmanager
def run_span(
    name: str, run_id: uuid.UUID | str, traceparent: str, attributes: Attributes, carried: Attributes
) -> Iterator[Any]:
    """The span of the run `run_id` (`run_span_context`), current for the block: the spans made in it (the
    engine's model and tool calls) are its children, and `carried` goes with them as baggage (the GenAI
    conventions' agent name and conversation id, which pydantic-ai copies onto its spans). Yields None with
    tracing off. An exception leaving the block is not recorded on the span: its message may quote content."""
    if _STATE is None:
        yield None
        return
    own = run_span_context(run_id, traceparent)
    caller = span_context_of(traceparent)
    parent = trace.set_span_in_context(NonRecordingSpan(caller)) if caller is not None else context.Context()
    for key, value in carried.items():
        parent = baggage.set_baggage(key, value, parent)
    preset = _PRESET.set((own.trace_id, own.span_id))
    try:
        span = _STATE.tracer.start_span(name, parent, SpanKind.INTERNAL, attributes)
    finally:
        _PRESET.reset(preset)
    token = context.attach(trace.set_span_in_context(span, parent))
    try:
        yield span
    finally:
        context.detach(token)
        span.end()


def mark_failed(span: Any, code: str) -> None:
    """Mark `span` failed with the stable error code `code` (`error.type`; the status says the code, never a
    message, which may quote content)."""
    if span is None:
        return
    span.set_attribute("error.type", code)
    span.set_status(Status(StatusCode.ERROR, code))


def record_span(
    name: str,
    start: datetime,
    end: datetime,
    *,
    parent: SpanContext | None,
    links: Sequence[SpanContext] = (),
    attributes: Attributes,
    error: str | None = None,
) -> None:
    """A span for something whose start and end are known once it is over (a request from opened to decided),
    under `parent` (a span context from another process: a run's), with `links`. Nothing with tracing off."""
    if _STATE is None:
        return
    parent_context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent is not None else context.Context()
    span = _STATE.tracer.start_span(
        name,
        parent_context,
        SpanKind.INTERNAL,
        attributes,
        links=[Link(link) for link in links],
        start_time=_nanoseconds(start),
    )
    if error is not None:
        mark_failed(span, error)
    span.end(end_time=max(_nanoseconds(end), _nanoseconds(start)))


def _nanoseconds(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000) * 1_000


# An incoming traceparent.


class CallerTrace:
    """The trace of an HTTP request's W3C `traceparent` header (an API call, an MCP gateway's call, an A2A message)
    current for the block that serves it, so a run built for it keeps it (`caller_traceparent`). With tracing
    off, or without the header, nothing."""

    __slots__ = ("scope", "token")

    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope: dict[str, Any] = scope
        self.token: Any = None

    def __enter__(self) -> None:
        if _STATE is None:
            return
        carrier = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in self.scope.get("headers", ())
            if name.lower() in (b"traceparent", b"tracestate")
        }
        if "traceparent" in carrier:
            self.token = context.attach(_PROPAGATOR.extract(carrier, context=context.Context()))

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            context.detach(self.token)
