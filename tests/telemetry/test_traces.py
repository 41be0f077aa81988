"""Traces (SPEC section 18): a run's `invoke_agent` span with its model calls' `chat` and tool calls' `execute_tool`
spans under it, a request's `airlock.request` span from opened to decided, linked to the run's, a caller's
`traceparent` continued, and no content in any attribute; through the SDK's in-memory exporter here, and over
OTLP/HTTP from a served console to a loopback receiver in test_export.py."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agents.definitions import DefinitionContent
from agents.models import Agent, Run, RunStatus
from approvals.models import PendingRequest
from console import telemetry
from console.asgi import application
from tests.conftest import grant
from tests.helpers import drain_queued
from tests.processes.cluster import Api, manage_all, new_cluster, wait_for

# What the run is given and what its model says: none of it may reach a span.
EMAIL = {"to": "ada.zq7@example.org", "subject": "Quarterly ZX-4411", "body": "Ship it, Marigold-9913."}
INSTRUCTIONS = "Sign every mail as Bellweather-5127."
SECRETS = ["ada.zq7", "ZX-4411", "Marigold-9913", "Bellweather-5127", "You said", "sent to"]
CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.install(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        telemetry.uninstall()


@pytest.fixture
def mailer(admin) -> Agent:
    content = {
        "name": "mailer",
        "instructions": INSTRUCTIONS,
        "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time", "approval": "never"}],
    }
    return Agent.create(admin.tenant, DefinitionContent.model_validate(content), admin.user)


def ask_and_tell_the_time(persona: Any, **headers: str) -> dict[str, Any]:
    """A run that calls get_time (mode never: runs) and send_email (mode always: asks), and says a line."""
    message = f"call get_time\ncall send_email {json.dumps(EMAIL)}"
    response = persona.api("POST", "/api/agents/mailer/runs", {"message": message, "sessionId": "s-7"}, **headers)
    assert response.status_code == 200, response.content
    return response.json()


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith(prefix)]


def every_value(span: ReadableSpan) -> list[str]:
    """Every attribute value of the span, its events' and its links', as text."""
    values = [*(span.attributes or {}).values()]
    for event in span.events:
        values += [*(event.attributes or {}).values(), event.name]
    for link in span.links:
        values += [*(link.attributes or {}).values()]
    return [str(value) for value in values] + [span.name, span.status.description or ""]


def assert_no_content(values: list[str]) -> None:
    for value in values:
        for secret in SECRETS:
            assert secret not in value, f"{secret!r} in a span: {value}"


def test_it_traces_a_run_its_calls_and_its_request_decided_in_the_inbox(
    spans, admin, operator, mailer, django_capture_on_commit_callbacks
):
    asked = ask_and_tell_the_time(operator)
    assert asked["status"] == "awaiting_approval"
    rid = asked["pendingRequests"][0]["requestId"]
    with django_capture_on_commit_callbacks(execute=True):
        answered = operator.client.post(f"/inbox/{rid}/answer/", {"decision": "approve"})
    assert answered.status_code == 302
    drain_queued(1)

    first, second = sorted(named(spans, "invoke_agent"), key=lambda span: span.start_time or 0)
    run = Run.objects.get(id=asked["runId"])
    continuation = Run.objects.exclude(id=run.id).get()
    assert continuation.status == RunStatus.COMPLETED
    for span, traced in ((first, run), (second, continuation)):
        assert span.name == "invoke_agent mailer"
        assert span.attributes is not None
        assert span.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert span.attributes["gen_ai.agent.name"] == "mailer"
        assert span.attributes["gen_ai.conversation.id"] == "s-7"
        assert span.attributes["airlock.run.id"] == str(traced.id)
        assert span.attributes["airlock.tenant"] == admin.tenant.slug
        assert span.status.status_code == StatusCode.UNSET
        assert span.parent is None  # no caller's trace: a root of its own
    assert first.attributes is not None and second.attributes is not None
    assert (first.attributes["airlock.run.outcome"], second.attributes["airlock.run.outcome"]) == (
        "awaiting",
        "completed",
    )

    def children(parent: ReadableSpan) -> list[str]:
        assert parent.context is not None
        return sorted(
            span.name
            for span in spans.get_finished_spans()
            if span.parent is not None and span.parent.span_id == parent.context.span_id
        )

    # The first turn: one model call asking for both tools; get_time runs, send_email waits for its approval (the
    # request's span is the run's child too).
    assert children(first) == ["airlock.request", "chat scripted", "execute_tool get_time", "execute_tool send_email"]
    # The continuation: the approved call runs, then the model answers.
    assert children(second) == ["chat scripted", "execute_tool send_email"]
    chat = named(spans, "chat")[0]
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.agent.name"] == "mailer"
    assert chat.kind == SpanKind.CLIENT and chat.attributes["gen_ai.request.model"] == "scripted"
    assert {"gen_ai.provider.name", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} <= set(chat.attributes)
    tool = next(span for span in named(spans, "execute_tool") if span.name.endswith("get_time"))
    assert tool.attributes is not None and tool.attributes["gen_ai.tool.name"] == "get_time"
    assert tool.attributes["gen_ai.conversation.id"] == "s-7" and "airlock.tool.deferral" not in tool.attributes
    # send_email, asked about in the first turn: its call waits for the answer, which is no failure.
    deferred = [
        span for span in named(spans, "execute_tool") if span.attributes and "airlock.tool.deferral" in span.attributes
    ]
    assert [(span.name, span.status.is_ok) for span in deferred] == [("execute_tool send_email", True)]
    assert deferred[0].attributes is not None and deferred[0].attributes["airlock.tool.deferral"] == "ApprovalRequired"

    (request,) = named(spans, "airlock.request")
    pending = PendingRequest.objects.get(id=rid)
    assert request.attributes is not None
    assert request.attributes == {
        "airlock.request.id": rid,
        "airlock.request.kind": "approval",
        "gen_ai.tool.name": "send_email",
        "airlock.request.result": "approved",
        "airlock.decision.source": "human",
        "airlock.request.wait_ms": request.attributes["airlock.request.wait_ms"],
        "airlock.request.approvals": 0,
        "airlock.request.via": "inbox",
        "gen_ai.agent.name": "mailer",
        "airlock.tenant": admin.tenant.slug,
        "airlock.run.id": str(run.id),
    }
    assert pending.answered_at is not None
    waited = (pending.answered_at - pending.opened_at).total_seconds() * 1000
    assert request.attributes["airlock.request.wait_ms"] == round(waited)
    assert request.start_time == telemetry._nanoseconds(pending.opened_at)
    assert request.end_time == telemetry._nanoseconds(pending.answered_at)
    # In the run's trace, under the run's span, and linked to it.
    assert first.context is not None and request.context is not None and request.parent is not None
    assert request.context.trace_id == first.context.trace_id
    assert request.parent.span_id == first.context.span_id
    assert [link.context.span_id for link in request.links] == [first.context.span_id]

    assert_no_content([value for span in spans.get_finished_spans() for value in every_value(span)])


def test_it_marks_a_failed_run_with_its_code_and_nothing_of_its_message(spans, acme, operator, monkeypatch):
    monkeypatch.delenv("AIRLOCK_TEST_UNSET_KEY", raising=False)
    grant("nowhere", "openai", acme, base_url="http://127.0.0.1:9/v1", api_key_env="AIRLOCK_TEST_UNSET_KEY")
    content = {"name": "remote", "model": {"connection": "nowhere", "name": "gpt-test"}}
    Agent.create(acme, DefinitionContent.model_validate(content), operator.user)

    response = operator.api("POST", "/api/agents/remote/runs", {"message": "Say Marigold-9913"})

    assert response.json()["error"]["code"] == "provider_key_missing"
    (span,) = named(spans, "invoke_agent")
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "provider_key_missing"
    assert span.attributes is not None
    assert (span.attributes["error.type"], span.attributes["airlock.run.outcome"]) == ("provider_key_missing", "failed")
    assert span.events == ()  # no exception recorded: its message may quote content
    assert_no_content(every_value(span))


def test_it_records_a_request_closed_unanswered(spans, operator, mailer, django_capture_on_commit_callbacks):
    asked = ask_and_tell_the_time(operator)
    with django_capture_on_commit_callbacks(execute=True):
        cancelled = operator.api("POST", f"/api/runs/{asked['runId']}/cancel")
    assert cancelled.status_code == 200, cancelled.content

    (request,) = named(spans, "airlock.request")
    assert request.attributes is not None
    assert request.attributes["airlock.request.result"] == "cancelled"
    assert request.attributes["airlock.decision.source"] == "cancel"
    assert "airlock.request.via" not in request.attributes


@pytest.mark.django_db(transaction=True)
async def test_it_continues_the_callers_trace_through_the_asgi_application(spans, admin, operator, mailer):
    """A run started and an external agent's request opened by calls carrying a W3C `traceparent`: the run's span
    and the request's are in the caller's trace, under its span."""
    content = {"name": "deployer", "runtime": "external", "tools": [{"name": "deploy", "description": "Deploy"}]}
    await sync_to_async(Agent.create)(admin.tenant, DefinitionContent.model_validate(content), admin.user)
    transport = httpx.ASGITransport(app=application)
    headers = {"Authorization": f"Bearer {operator.token}", "traceparent": CALLER}
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers) as http:
        started = await http.post("/api/agents/mailer/runs", json={"message": "Hello", "sessionId": "t-1"})
        opened = await http.post(
            "/api/agents/deployer/requests",
            json={"kind": "approval", "toolName": "deploy", "arguments": {"service": "ZX-4411"}},
        )
    assert started.status_code == 200, started.text
    assert opened.status_code == 201, opened.text
    rid = opened.json()["requestId"]
    answered = await sync_to_async(admin.api)("post", f"/api/requests/{rid}/responses", {"approved": True})
    assert answered.json()["status"] == "accepted"

    caller_trace, caller_span = (int(part, 16) for part in CALLER.split("-")[1:3])
    (run,) = named(spans, "invoke_agent")
    (request,) = named(spans, "airlock.request")
    for span in (run, request):
        assert span.context is not None and span.parent is not None
        assert (span.context.trace_id, span.parent.span_id) == (caller_trace, caller_span)
    assert request.attributes is not None
    assert request.attributes["gen_ai.agent.name"] == "deployer"
    assert await sync_to_async(lambda: Run.objects.get(id=started.json()["runId"]).traceparent)() == CALLER
    assert_no_content(every_value(request))


def test_it_reads_only_the_standard_variables():
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert telemetry.wanted(endpoint)
    assert telemetry.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})
    assert not telemetry.wanted({})
    assert not telemetry.wanted({**endpoint, "OTEL_SDK_DISABLED": "TRUE"})
    assert not telemetry.wanted({**endpoint, "OTEL_TRACES_EXPORTER": "none"})
    assert telemetry.wanted({**endpoint, "OTEL_SDK_DISABLED": "false"})


def test_it_makes_no_span_and_keeps_no_traceparent_when_unset(operator, mailer):
    assert telemetry.tracer_provider() is None
    asked = ask_and_tell_the_time(operator, HTTP_TRACEPARENT=CALLER)
    assert Run.objects.get(id=asked["runId"]).traceparent == ""


# Over OTLP/HTTP from a served console (tests/processes/cluster.py) to a loopback receiver.


class Receiver(ThreadingHTTPServer):
    """A loopback OTLP/HTTP collector: every `ExportTraceServiceRequest` posted to /v1/traces, decoded."""

    def __init__(self) -> None:
        self.exports: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        super().__init__(("127.0.0.1", 0), _Collect)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> list[Any]:
        """Every span received, with its resource's attributes as `resource`."""
        found = []
        for export in list(self.exports):
            for resource_spans in export.resource_spans:
                resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    found += [(span, resource) for span in scope_spans.spans]
        return found


class _Collect(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.paths.append(self.path)
        self.server.exports.append(ExportTraceServiceRequest.FromString(body))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Receiver]]:
    """One served console for the module, exporting to a loopback receiver, with a worker thread for the
    continuation."""
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    folder: Path = tmp_path_factory.mktemp("traces")
    cluster = new_cluster(
        folder,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="50",
        OTEL_SERVICE_NAME="airlock-under-test",
    )
    (token,) = manage_all(cluster.env, ["create_token", "ada", "--tenant", "acme"])
    try:
        console = cluster.serve(WORKER_THREADS="1")
        yield Api(console.url, token.strip().splitlines()[-1]), receiver
    finally:
        cluster.stop_all()
        receiver.shutdown()
        receiver.server_close()


@pytest.mark.processes
def test_a_served_console_exports_the_run_and_its_request_over_otlp(served):
    api, receiver = served
    definition = {
        "name": "mailer",
        "instructions": INSTRUCTIONS,
        "tools": [{"name": "send_email", "approval": "always"}, {"name": "get_time", "approval": "never"}],
    }
    api.ok("POST", "/api/agents", definition)
    message = f"call get_time\ncall send_email {json.dumps(EMAIL)}"
    asked = api.ok("POST", "/api/agents/mailer/runs", {"message": message, "sessionId": "s-9"}, traceparent=CALLER)
    rid = asked["pendingRequests"][0]["requestId"]
    answered = api.ok("POST", f"/api/requests/{rid}/responses", {"approved": True})
    api.run_until(answered["continuationRunId"], lambda run: run["status"] == "completed")

    def exported() -> list[Any] | None:
        spans = receiver.spans()
        names = sorted(span.name for span, _ in spans)
        return spans if names.count("invoke_agent mailer") == 2 and "airlock.request" in names else None

    spans = wait_for(exported, "the spans to be exported", timeout=20)
    assert set(receiver.paths) == {"/v1/traces"}
    by_name: dict[str, list[Any]] = {}
    for span, resource in spans:
        assert resource["service.name"] == "airlock-under-test"
        by_name.setdefault(span.name, []).append(span)
    first = next(s for s in by_name["invoke_agent mailer"] if s.parent_span_id)
    (request,) = by_name["airlock.request"]
    caller_trace, caller_span = (bytes.fromhex(part) for part in CALLER.split("-")[1:3])
    assert (first.trace_id, first.parent_span_id) == (caller_trace, caller_span)
    assert {kv.key: kv.value.string_value for kv in first.attributes}["airlock.run.id"] == asked["runId"]
    # The request's span, made by the process that decided it, under the run's span and linked to it.
    assert (request.trace_id, request.parent_span_id) == (caller_trace, first.span_id)
    assert [link.span_id for link in request.links] == [first.span_id]
    assert {"chat scripted", "execute_tool get_time", "execute_tool send_email"} <= set(by_name)
    values = [
        str(kv.value).strip()
        for span, _ in spans
        for kv in [*span.attributes, *(a for e in span.events for a in e.attributes)]
    ]
    assert_no_content(values)
