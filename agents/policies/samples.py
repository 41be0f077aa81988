"""Sample contexts of the eight points, as a turn of an agent would emit them: the Try panel's (one per point,
agents/forms/policy_try.py) and those saving a definition evaluates its policies at (`save_samples`: every point,
the tool points once for each of the agent's tools), so a version that saves is one whose policies answer."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_hooks import AgentContextBuilder

from agents.policies.points import POINTS
from agents.policies.turn_policies import FRAMEWORK
from agents.server_tools import REGISTRY

SAMPLE_MESSAGE = "Mail the quarterly figures to someone@outside.test, please."
SAMPLE_EMAIL = {"to": "someone@outside.test", "subject": "Quarterly figures", "body": "Here are the figures."}


def try_builder(agent: str, version: int, tenant: str) -> AgentContextBuilder:
    """Contexts as a turn of `agent` builds them (agents.policies.TurnPolicies.build), for the run id "try"."""
    builder = AgentContextBuilder(
        agent_id=agent, framework=FRAMEWORK, session_id="try", agent_name=agent, agent_version=str(version)
    )
    return builder.with_l2(tenant=tenant, extensions={"airlock": {"sessionId": None}})


@dataclass(frozen=True)
class SampleAgent:
    """What the samples say of the agent: its tools as a model request offers them (name, description,
    schema), the tools it calls (sub-agents included), its model and its instructions."""

    tools: list[dict[str, Any]]
    callable: list[str]
    model: str
    instructions: str

    @classmethod
    def of(cls, content: Any, schema_of: Callable[[str], dict[str, Any]] | None = None) -> "SampleAgent":
        """The sample agent of a definition's `content` (an agents.definitions.DefinitionContent, which sits above
        this package). `schema_of` gives a server tool's parameters as the engine does (the Try panel passes it);
        without it, below the engine, a server tool takes any object."""
        tools = [
            {"name": t.name, "description": t.description, "schema": t.parameters}
            if hasattr(t, "parameters")  # an external agent's tool
            else {
                "name": t.name,
                "description": REGISTRY[t.name].description,
                "schema": schema_of(t.name) if schema_of else {"type": "object"},
            }
            for t in content.tools
        ]
        tools += [{"name": t.name, "description": t.description, "schema": t.parameters} for t in content.client_tools]
        called = [tool["name"] for tool in tools] + list(content.sub_agents)
        return cls(tools, called, content.model.label, content.instructions)


def sample_context(
    point: str, builder: AgentContextBuilder, agent: SampleAgent, message: str | None, tool: str = "send_email"
) -> dict[str, Any]:
    """A context for `point` as a turn of this agent would emit it: the user's `message` (the sample's when
    None) and, at the tool points, a call of `tool` (send_email outside example.com; another tool with no
    arguments: a policy reading one finds it undefined)."""
    message = message or SAMPLE_MESSAGE
    args = SAMPLE_EMAIL if tool == "send_email" else {}
    value = f"sent to {SAMPLE_EMAIL['to']}" if tool == "send_email" else "done"
    call = {"id": "call_1", "name": tool, "args": args}
    contexts = {
        "agent_startup": lambda: builder.agent_startup(tools_registered=[t["name"] for t in agent.tools]),
        "input": lambda: builder.input(content=message),
        "pre_model_call": lambda: builder.pre_model_call(
            model_id=agent.model,
            messages=[{"role": "system", "content": agent.instructions}, {"role": "user", "content": message}],
            tools=agent.tools,
        ),
        "post_model_call": lambda: builder.post_model_call(
            model_id=agent.model, content="", tool_calls=[call], finish_reason="tool_calls"
        ),
        "pre_tool_call": lambda: builder.pre_tool_call(call_id="call_1", name=tool, args=args),
        "post_tool_call": lambda: builder.post_tool_call(call_id="call_1", name=tool, args=args, value=value),
        "output": lambda: builder.output(content="Done. The card on file is 4111 1111 1111 1111."),
        "agent_shutdown": lambda: builder.agent_shutdown(reason="completed"),
    }
    return dict(contexts[point]())


# At most this many tools are sampled at the tool points (the check at save is bounded work).
SAMPLED_TOOLS = 16


def save_samples(builder: AgentContextBuilder, agent: SampleAgent) -> list[dict[str, Any]]:
    """The contexts saving a definition evaluates its policies at: each point's sample, the tool points (and the
    model's tool call) once for the Try panel's send_email call and once for each tool the agent calls (a
    manifest that does not name one denies it, `tool_unknown`, which the check leaves to `unlisted_tools`)."""
    per_tool = {"post_model_call", "pre_tool_call", "post_tool_call"}
    samples = [sample_context(point, builder, agent, None) for point in POINTS if point not in per_tool]
    for tool in dict.fromkeys(["send_email", *agent.callable[:SAMPLED_TOOLS]]):
        samples += [sample_context(point, builder, agent, None, tool) for point in POINTS if point in per_tool]
    return samples
