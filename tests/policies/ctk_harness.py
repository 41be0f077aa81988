"""The agent-hooks conformance kit's harness on Airlock's own engine (docs/research/agent-hooks.md, section 9).

The CTK builds the emitter (its scripted interceptors and resolver, through the declaration loader as the
SDK's reference harness does); the turn is Airlock's: `agents.engine.drive` with `TurnPolicies` on an agent
whose model replays the vector's `model_script` (a pydantic-ai FunctionModel) and whose tools are the
scenario's, behind Airlock's tool gate (`GatedToolset`). What the CTK checks is what the engine emitted.
"""

import copy
import json
import uuid
from typing import Any, ClassVar

from agent_hooks import AgentContextBuilder, InterceptionEmitter
from agent_hooks.ctk import Capability, RunOutcome, RunRecord, Scenario, redact_paths
from agent_hooks.declaration import BindingContext, HostRegistry, HostSurface
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    FunctionToolset,
    ModelMessage,
    ModelResponse,
    TextPart,
    Tool,
    ToolFailed,
)
from pydantic_ai import ToolCallPart as PaiToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agents.engine import GatedToolset, TurnBlocked, TurnContext, TurnDeps, TurnError, drive
from agents.engine.seams import engine_capabilities
from agents.payloads import Payload
from agents.policies import FRAMEWORK, POINTS, InboxResolver, TurnPolicies

# Airlock's declaration for the kit: what a conformance claim cites. Buffered output (the reply is held
# until post_model_call and output passed), no incremental release; a host_error deny at the tool seam
# answers the model with the denial and the turn goes on.
AIRLOCK_DECLARATION: dict[str, Any] = {
    "declaration": "agent-hooks-declaration/1.0",
    "spec": "agent-hooks/0.1",
    "id": "airlock",
    "host": {"name": "airlock"},
    "configuration": {
        "mode": "enforce",
        "composition": {"profile": "sequential/first_deny", "on_approval": "stop"},
        "identity_provider": "jcs-sha256",
        "approval": {"resolver": None, "redactor": None},
        "posture": {"tool_seam_host_error": "continue"},
        "timeouts": {"interceptor_ms": 5000, "approval_resolver_ms": 5000},
        "records": {"max_buffered": None},
    },
    "surface": {
        "interception_points": list(POINTS),
        "capabilities": ["bigint_json", "host_declaration", "int64_json", "model_calls", "tool_calls"],
        "profiles": {
            "sequential/first_deny": {"on_approval": ["resume", "stop"]},
            "sequential/run_all": {},
            "parallel/strictest": {"on_transform_conflict": ["approval", "deny"]},
            "parallel/unanimous": {"on_disagreement": ["approval", "deny"]},
        },
        "buffered_output": True,
        "declaration_versions": ["agent-hooks-declaration/1.0"],
    },
    "bindings": [],
    "extensions": {},
}

# Any object: the kit's tool "schemas" are not JSON Schemas, and its arguments must reach the tool as given.
ANY_ARGUMENTS: dict[str, Any] = {"type": "object", "additionalProperties": True}


class AirlockHarness:
    """`agent_hooks.ctk.harness.Harness` on `agents.engine.drive`."""

    name = "airlock"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.MODEL_CALLS,
            Capability.TOOL_CALLS,
            # Python ints are exact at any size, and the arguments reach the engine as dicts (never JSON text).
            Capability.INT64_JSON,
            Capability.BIGINT_JSON,
            Capability.HOST_DECLARATION,
        }
    )
    tool_seam_host_error = "continue"

    def __init__(self) -> None:
        self.scenario: Scenario | None = None
        self.emitter: InterceptionEmitter | None = None
        # The run's events as the engine reported them (kind, data), for a failing vector's diagnosis.
        self.events: list[tuple[str, dict[str, Any]]] = []

    # ---- the harness protocol ---------------------------------------------------------------------------

    def host_surface(self) -> HostSurface:
        return HostSurface.from_capabilities(sorted(c.value for c in self.capabilities), self.tool_seam_host_error)

    def declaration(self) -> dict[str, Any]:
        return copy.deepcopy(AIRLOCK_DECLARATION)

    def setup(
        self,
        scenario: Scenario,
        interceptors: list[Any],
        resolver: Any,
        mode: Any,
        composition: Any,
        identity_provider: str | None,
        redact_for_approval: list[str] | None = None,
    ) -> None:
        """A field-based vector, written into Airlock's declaration as the reference harness does: the
        interceptors bound by index through a `ctk.instance` kind, on the CTK's conformance registry."""
        doc = self.declaration()
        cfg = doc["configuration"]
        cfg["mode"] = mode.value
        cfg["composition"] = composition.to_wire()
        cfg["identity_provider"] = identity_provider
        registry = HostRegistry.for_conformance(self.host_surface())
        if identity_provider == "ctk-fault":

            def fault(_ctx: Any) -> str:
                raise RuntimeError("ctk scripted provider fault")

            registry.identity_provider("ctk-fault", fault)
        if resolver is not None:
            registry.approval_resolver("ctk-scripted", resolver)
        paths = list(redact_for_approval or [])
        if paths:
            registry.approval_redactor("ctk-redact", lambda ctx: redact_paths(ctx, paths))
        cfg["approval"] = {
            "resolver": "ctk-scripted" if resolver is not None else None,
            "redactor": "ctk-redact" if paths else None,
        }
        slots: list[Any] = list(interceptors)

        def instance(config: Any, ctx: BindingContext) -> Any:
            i = config.get("index") if isinstance(config, dict) else None
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(slots) or slots[i] is None:
                raise ValueError(f"no interceptor instance {i!r} for binding {ctx.id}")
            out, slots[i] = slots[i], None
            return out

        registry.kind("ctk.instance", instance)
        doc["bindings"] = [
            {"id": f"interceptor-{i}", "kind": "ctk.instance", "config": {"index": i}} for i in range(len(slots))
        ]
        self._start(scenario, InterceptionEmitter.from_declaration_value(doc, registry))

    def setup_declared(self, scenario: Scenario, document: dict[str, Any], registry: HostRegistry) -> None:
        # A refusal (DeclarationError) propagates: the runner records it as the load outcome.
        self._start(scenario, InterceptionEmitter.from_declaration_value(document, registry))

    def _start(self, scenario: Scenario, emitter: InterceptionEmitter) -> None:
        self.scenario, self.emitter, self.events = scenario, emitter, []

    async def run(self) -> RunRecord:
        assert self.scenario is not None and self.emitter is not None
        scenario, emitter = self.scenario, self.emitter
        invocations: list[dict[str, Any]] = []
        builder = AgentContextBuilder(agent_id="airlock-ctk", framework=FRAMEWORK, session_id=str(uuid.uuid4()))

        async def emit(payload: Payload) -> None:
            if not payload.ephemeral:
                self.events.append((payload.type, payload.dump()))

        policies = TurnPolicies(emitter, builder, InboxResolver({}), emit, [])
        outcome, final, error = RunOutcome.COMPLETED, None, None
        try:
            turn = await drive(
                _agent(scenario, invocations),
                TurnContext(
                    instructions="", conversation=None, message=scenario.input["content"], emit=emit, stream=False
                ),
                policies=policies,
                tools_registered=sorted(scenario.tools),
            )
        except TurnBlocked:
            outcome = RunOutcome.BLOCKED
        except TurnError as failed:
            outcome, error = RunOutcome.ERROR, f"{failed.code}: {failed.message}"
        else:
            final = turn.output
            if turn.pending:
                outcome = RunOutcome.SUSPENDED
        return RunRecord(
            outcome=outcome,
            final_output=final,
            tool_invocations=invocations,
            error=error,
            identities=[(r.input_identity, r.enforced_identity) for r in emitter.results],
            records=[r.to_wire() for r in emitter.results],
        )

    def teardown(self) -> None:
        self.scenario = self.emitter = None


def _agent(scenario: Scenario, invocations: list[dict[str, Any]]) -> Agent[TurnDeps, Any]:
    """An agent whose model replays the scenario's script and whose tools are the scenario's mock tools,
    behind the engine's tool gate."""
    script = iter(scenario.model_script)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = next(script, None)
        if step is None:
            raise AssertionError("the model was asked past the end of the vector's model_script")
        parts: list[Any] = []
        if step.content is not None and step.content != "":
            parts.append(TextPart(step.content if isinstance(step.content, str) else json.dumps(step.content)))
        # Arguments as dicts, never JSON text: integers beyond 2^53 stay exact.
        parts += [PaiToolCallPart(c["name"], dict(c["args"]), c["id"]) for c in step.tool_calls]
        return ModelResponse(parts=parts)

    def tool(name: str) -> Tool[TurnDeps]:
        spec = scenario.tools[name]

        def invoke(**args: Any) -> Any:
            invocations.append({"name": name, "args": dict(args)})
            value, is_error = spec.invoke(args)
            if is_error:
                # A tool's own failure, as the gate reports it at post_tool_call (is_error true).
                raise ToolFailed(value if isinstance(value, str) else json.dumps(value))
            return value

        return Tool.from_schema(invoke, name=name, description=None, json_schema=ANY_ARGUMENTS)

    tools = FunctionToolset[TurnDeps]([tool(name) for name in scenario.tools])
    return Agent(
        FunctionModel(respond, model_name="ctk-script"),
        output_type=[str, DeferredToolRequests],
        deps_type=TurnDeps,
        toolsets=[GatedToolset(tools)],
        retries=1,
        capabilities=engine_capabilities(hooks=True),
    )
