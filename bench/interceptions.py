"""The interceptions endpoint (issue 56 item 4): `POST /api/agents/{name}/interceptions`, which an agent-hooks host
calls on every tool call of an external agent, against `GET /healthz` on the same served console, one request at
a time on one keep-alive connection. The agent binds the starter policy (Rego through the policy workers).

Usage: .venv/bin/python bench/interceptions.py [--calls 300]
Target: the interception's p50 at most 3x `/healthz`'s.
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    HttpConnection,
    bench_env,
    daphnes_starting,
    median,
    percentile,
    python_line,
    scratch_dir,
    seed_operator,
    setup_django,
    verdict,
)

TARGET_RATIO = 3.0
SEND = {
    "name": "send_email",
    "description": "Send a mail",
    "parameters": {
        "type": "object",
        "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "subject", "body"],
    },
}


def context(index: int) -> dict[str, Any]:
    from agent_hooks import AgentContextBuilder

    builder = AgentContextBuilder(agent_id="mailer", framework="langgraph", session_id="thread-1")
    args = {"to": "amy@example.com", "subject": f"Hi {index}", "body": "Ship it."}
    return dict(builder.pre_tool_call(call_id=f"tc-{index}", name="send_email", args=args))


async def timed(port: int, calls: int, method: str, path: str, bodies: list[bytes], token: str) -> list[float]:
    connection = HttpConnection(port)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    took = []
    try:
        for index in range(calls):
            body = bodies[index % len(bodies)] if bodies else b""
            started = time.perf_counter()
            status, answer = await connection.request(method, path, body, headers)
            took.append(time.perf_counter() - started)
            assert status == 200, (status, answer[:300])
    finally:
        await connection.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="requests of each kind, after 30 to warm up")
    args = parser.parse_args()
    started = time.perf_counter()
    with scratch_dir("airlock-interceptions-") as data:
        env = bench_env(data)
        # The console starts while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(env) as ready:
            setup_django(env)
            from django.core.management import call_command
            from django.db import connections

            from agents.starter_policy import starter_hooks

            call_command("migrate", verbosity=0)
            mailer = {"name": "mailer", "runtime": "external", "tools": [SEND], "hooks": starter_hooks()}
            token = seed_operator(agents={"mailer": mailer})["token"]
            bodies = [json.dumps(context(index)).encode() for index in range(50)]
            connections.close_all()
            [server] = ready()
            path = "/api/agents/mailer/interceptions"
            asyncio.run(timed(server.port, 30, "POST", path, bodies, token))  # warm: the policy workers' compile
            asyncio.run(timed(server.port, 30, "GET", "/healthz", [], token))
            health = asyncio.run(timed(server.port, args.calls, "GET", "/healthz", [], token))
            intercepted = asyncio.run(timed(server.port, args.calls, "POST", path, bodies, token))

    ratio = median(intercepted) / median(health)
    print("### The interceptions endpoint against /healthz (issue 56 item 4)\n")
    print(
        f"`interceptions.py --calls {args.calls}`: one daphne (SQLite), one keep-alive connection, one request at a "
        f"time; the starter policy (Rego) bound at every point; {python_line()}; "
        f"{time.perf_counter() - started:.0f} s.\n"
    )
    print("| request | p50 ms | p95 ms | p99 ms |\n|---|---|---|---|")
    for label, values in (("`GET /healthz`", health), ("`POST .../interceptions` (pre_tool_call)", intercepted)):
        row = (median(values) * 1000, percentile(values, 95) * 1000, percentile(values, 99) * 1000)
        print(f"| {label} | {row[0]:.2f} | {row[1]:.2f} | {row[2]:.2f} |")
    print(
        f"\nTarget: the interception's p50 at most {TARGET_RATIO:.0f}x `/healthz`'s: {ratio:.2f}x, "
        f"{verdict(ratio <= TARGET_RATIO)}."
    )


if __name__ == "__main__":
    main()
