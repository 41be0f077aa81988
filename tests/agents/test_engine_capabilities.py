"""What an engine agent holds besides its model and tools (issue 56): pydantic-ai gives every agent a `ToolSearch` and
its pending-message drain, and each capability costs every step of a turn its hooks, so the model-call count and limit
(`agents.engine.seams.ModelCalls`) ride on the agent's `ToolSearch` instead of adding a third."""

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.capabilities import ToolSearch

from agents.engine.scripted import scripted_model
from agents.engine.seams import ModelCalls, PolicyCapability, engine_capabilities


def leaves(hooks: bool) -> list[type]:
    agent = Agent(scripted_model(), output_type=[str, DeferredToolRequests], capabilities=engine_capabilities(hooks))
    return [type(capability) for capability in agent._root_capability.capabilities]


def test_an_engine_agent_counts_its_model_calls_on_the_tool_search_every_agent_has() -> None:
    without_hooks = leaves(hooks=False)
    assert len(without_hooks) == len(leaves_of_a_bare_agent()) == 2
    assert ModelCalls in without_hooks and issubclass(ModelCalls, ToolSearch)
    assert ToolSearch not in without_hooks  # not injected beside it
    assert sorted(t.__name__ for t in leaves(hooks=True)) == sorted(
        [*(t.__name__ for t in without_hooks), "PolicyCapability"]
    )
    assert PolicyCapability not in without_hooks


def leaves_of_a_bare_agent() -> list[type]:
    return [type(capability) for capability in Agent(scripted_model())._root_capability.capabilities]
