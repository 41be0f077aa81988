"""A LangGraph graph that asks Airlock before deploying, then asks where to announce it.

    AIRLOCK_URL=http://127.0.0.1:8000 AIRLOCK_TOKEN=... python clients/python/examples/langgraph_example.py

Each node calls `interrupt()`; answer in the inbox (approve or deny, then answer the question); the graph
resumes with each answer, and the script prints who decided what. No model is involved.
"""

import os
import uuid
from typing import Any, TypedDict

from _setup import AGENT, TOKEN, URL, ensure_agent, inbox_hint
from airlock_client import Airlock, Opened, invoke_with_airlock
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class Deploy(TypedDict, total=False):
    service: str
    deployed: bool
    announce: str


def approve(state: Deploy) -> Deploy:
    answer = interrupt(
        {"kind": "approval", "toolName": "deploy", "arguments": {"service": state["service"], "environment": "staging"}}
    )
    print(f"approval: approved={answer['approved']} by {answer['answeredBy']} via {answer['via']}")
    return {"deployed": answer["approved"]}


def announce(state: Deploy) -> Deploy:
    if not state.get("deployed"):
        return {}
    answer: dict[str, Any] = interrupt({"question": "Announce the deploy where?", "choices": ["chat", "mail"]})
    print(f"question: {answer['text']!r} from {answer['answeredBy']}")
    return {"announce": answer["text"]}


def main() -> None:
    ensure_agent()
    graph = StateGraph(Deploy)
    graph.add_node("approve", approve)
    graph.add_node("announce", announce)
    graph.add_edge(START, "approve")
    graph.add_edge("approve", "announce")
    graph.add_edge("announce", END)
    app = graph.compile(checkpointer=InMemorySaver())
    thread_id = os.environ.get("AIRLOCK_SESSION") or f"langgraph-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread_id}}

    def opened(request: Opened) -> None:
        if request.decision is None:
            inbox_hint(request.request_id)

    with Airlock(URL, TOKEN) as airlock:
        result = invoke_with_airlock(
            app, {"service": "billing"}, config, airlock=airlock, airlock_agent=AGENT, on_request=opened
        )
    print(f"final state: {result}")


if __name__ == "__main__":
    main()
