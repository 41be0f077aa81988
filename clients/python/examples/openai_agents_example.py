"""An OpenAI Agents SDK agent whose `deploy` tool needs approval, decided in Airlock's inbox.

    AIRLOCK_URL=http://127.0.0.1:8000 AIRLOCK_TOKEN=... python clients/python/examples/openai_agents_example.py

The model is the SDK's own scripted test model (no network, no key): it calls deploy(billing, staging), then
answers. Approve or deny the request in the inbox; the script prints what happened. AIRLOCK_SESSION and
AIRLOCK_CALL_ID, when set, name the Airlock session and the tool call (the same pair asks only once).
"""

import asyncio
import os
import uuid

from _setup import AGENT, TOKEN, URL, ensure_agent, inbox_hint
from agents.testing import ScriptedModel, assistant_message, function_call
from airlock_client import AsyncAirlock, Opened, run_with_airlock

from agents import Agent, ToolCallOutputItem, function_tool, set_tracing_disabled

ran: list[str] = []


@function_tool(needs_approval=True)
def deploy(service: str, environment: str) -> str:
    """Deploy a service."""
    ran.append(f"{service}@{environment}")
    return f"deployed {service} to {environment}"


async def main() -> None:
    set_tracing_disabled(True)
    ensure_agent()
    call_id = os.environ.get("AIRLOCK_CALL_ID") or f"call_{uuid.uuid4().hex[:12]}"
    model = ScriptedModel(
        [
            [function_call("deploy", {"service": "billing", "environment": "staging"}, call_id=call_id)],
            [assistant_message("All done.")],
        ]
    )
    agent = Agent(name="deployer", instructions="Deploy what you are asked to.", model=model, tools=[deploy])

    def opened(request: Opened) -> None:
        if request.decision is None:
            inbox_hint(request.request_id)
        else:
            print(f"decided at once ({request.decision.via})")

    async with AsyncAirlock(URL, TOKEN) as airlock:
        result = await run_with_airlock(
            agent,
            "Deploy billing to staging.",
            airlock=airlock,
            airlock_agent=AGENT,
            session_id=os.environ.get("AIRLOCK_SESSION"),
            on_request=opened,
        )
    for item in result.new_items:
        if isinstance(item, ToolCallOutputItem):
            print(f"tool output: {item.output}")
    print(f"the tool ran: {', '.join(ran)}" if ran else "the tool did not run")
    print(f"final output: {result.final_output}")


if __name__ == "__main__":
    asyncio.run(main())
