"""An auto-approved call through the MCP gateway (SPEC section 15) against the same call through a plain MCP proxy.

The same upstream on each side: the built-in `meetings` server (`python -m agents.mcp_demo`, stdio) and its `ping`
tool. Sides, each called by the project's `mcp` SDK client (one session kept, one call at a time, handshake-era
`--mode legacy` by default, or `auto`):
- **gateway**: one daphne serving the console as `manage.py serve` does (`bench/served_asgi.py`), PostgreSQL
  (`airlock_bench_gateway_proxy`) and the Redis layer (DB 9); a gateway agent over `meetings` in approval `never`,
  no policies, an operator's token (`/mcp/{agent}`);
- **mcp-proxy**: `mcp-proxy` (PyPI, sparfenyuk/mcp-proxy) serving the same stdio server over Streamable HTTP
  (`/mcp`). It lives in a virtual environment of its own, `.tools/mcp-proxy/`, made by this script on first use:
  `uv add --dev mcp-proxy` resolves against the project's `mcp>=2.3` (mcp-proxy 0.12.0 sets no upper bound) but
  the package then fails at import (`request_ctx` left `mcp.server.lowlevel.server` in mcp 2), so it gets
  `mcp<2` there;
- **direct** (for scale): the same client over stdio to the server, no HTTP.

After a warm-up of each, the gateway and mcp-proxy alternate in blocks (`--blocks`), so load that comes and goes
on a shared machine weighs on both; the direct side runs once after them. Each side's p50/p95 and the CPU its
serving process spent per call (the console's daphne, mcp-proxy's process; their stdio server not counted).

Target (issue 52): the gateway's auto-approved call at most 1.5x mcp-proxy's (p50 and p95).

Usage: .venv/bin/python bench/gateway_proxy.py [--calls 400] [--blocks 10] [--mode legacy]
"""

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    REDIS_SERVER,
    ROOT,
    bench_env,
    daphnes_starting,
    database_label,
    flush_redis,
    free_port,
    median,
    percentile,
    pg_database,
    python_line,
    scratch_dir,
    seed_operator,
    setup_django,
    verdict,
)
from bench.idle_streams import cpu_seconds

DATABASE = "airlock_bench_gateway_proxy"
REDIS_DB = f"{REDIS_SERVER}/9"
RATIO = 1.5
WARM = 30
RECORDS = 100
PROXY_VERSION = "0.12.0"
PROXY_ENV = ROOT / ".tools" / "mcp-proxy"
UPSTREAM = [sys.executable, "-m", "agents.mcp_demo"]
GATEWAY: dict[str, Any] = {
    "name": "desk",
    "runtime": "gateway",
    "mcpServers": [{"connection": "meetings", "approval": "never"}],
}


def note(step: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {step}", file=sys.stderr, flush=True)


def mcp_proxy() -> Path:
    """mcp-proxy's executable in its own environment (made when missing: `uv` from PATH or .tools/bin, else venv
    and pip)."""
    executable = PROXY_ENV / "bin" / "mcp-proxy"
    if executable.exists():
        return executable
    note(f"installing mcp-proxy {PROXY_VERSION} into {PROXY_ENV}")
    packages = [f"mcp-proxy=={PROXY_VERSION}", "mcp<2"]
    uv = next((u for u in ("uv", str(ROOT / ".tools" / "bin" / "uv")) if _runs([u, "--version"])), None)
    if uv is not None:
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(PROXY_ENV)], check=True)
        python = str(PROXY_ENV / "bin" / "python")
        subprocess.run([uv, "pip", "install", "-q", "--python", python, *packages], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(PROXY_ENV)], check=True)
        subprocess.run([str(PROXY_ENV / "bin" / "pip"), "install", "-q", *packages], check=True)
    return executable


def _runs(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, check=False).returncode == 0
    except OSError:
        return False


@contextlib.contextmanager
def proxy_process(folder: Path) -> Any:
    """mcp-proxy serving the upstream on a free port; yields (its process, its MCP URL)."""
    port = free_port()
    log = folder / "mcp-proxy.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(mcp_proxy()), "--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING", "--", *UPSTREAM],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mcp-proxy did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        yield process, f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextlib.asynccontextmanager
async def http_session(url: str, mode: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        yield client


@contextlib.asynccontextmanager
async def stdio_session(mode: str) -> AsyncIterator[Any]:
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    parameters = StdioServerParameters(command=UPSTREAM[0], args=UPSTREAM[1:], cwd=str(ROOT), env=dict(os.environ))
    # The demo server writes a line to stderr for every call it runs.
    with open(os.devnull, "w") as quiet:
        async with Client(stdio_client(parameters, errlog=quiet), mode=mode) as client:  # type: ignore[arg-type]
            yield client


async def timed_calls(client: Any, count: int) -> list[float]:
    """`count` calls of `ping`, one after another; each one's seconds (every result checked)."""
    seconds: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        result = await client.call_tool("ping", {})
        seconds.append(time.perf_counter() - started)
        if result.is_error or [block.text for block in result.content] != ["pong"]:
            raise RuntimeError(f"ping did not answer pong: {result}")
    return seconds


class Side:
    def __init__(self, name: str, pid: int | None) -> None:
        self.name, self.pid = name, pid
        self.seconds: list[float] = []
        self.cpu = 0.0

    async def block(self, client: Any, count: int) -> None:
        before = cpu_seconds(self.pid) if self.pid else 0.0
        self.seconds += await timed_calls(client, count)
        self.cpu += (cpu_seconds(self.pid) - before) if self.pid else 0.0


async def measure(
    args: argparse.Namespace, gateway_url: str, token: str, console_pid: int, proxy_pid: int, proxy_url: str
) -> list[Side]:
    gateway, proxy, direct = Side("gateway", console_pid), Side("mcp-proxy", proxy_pid), Side("direct (stdio)", None)
    per_block = max(1, args.calls // args.blocks)
    authorization = {"Authorization": f"Bearer {token}"}
    async with (
        http_session(gateway_url, args.mode, authorization) as through_gateway,
        http_session(proxy_url, args.mode, {}) as through_proxy,
    ):
        await timed_calls(through_gateway, WARM)
        await timed_calls(through_proxy, WARM)
        note("warmed")
        sides: list[tuple[Side, Any]] = [(gateway, through_gateway), (proxy, through_proxy)]
        for number in range(args.blocks):
            for side, client in sides if number % 2 == 0 else reversed(sides):
                await side.block(client, per_block)
        note(f"{args.blocks} blocks of {per_block} calls a side")
    async with stdio_session(args.mode) as stdio:
        await timed_calls(stdio, WARM)
        await direct.block(stdio, per_block * args.blocks)
    return [gateway, proxy, direct]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="calls a side, after the warm-up")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--mode", default="legacy", choices=["legacy", "auto"], help="the mcp client's mode")
    args = parser.parse_args()
    started = time.perf_counter()
    mcp_proxy()
    with scratch_dir("airlock-gateway-proxy-") as data:
        env = bench_env(data, database_url=pg_database(DATABASE, fresh=True), redis_url=REDIS_DB)
        flush_redis(REDIS_DB)
        # The console starts while this process sets Django up and seeds (see daphnes_starting).
        with daphnes_starting(env, 1) as ready:
            setup_django(env)
            from django.core.management import call_command
            from django.db import connections

            call_command("migrate", verbosity=0)
            persona = seed_operator("bench", {"desk": GATEWAY})
            database = database_label()
            connections.close_all()
            [server] = ready()
            with proxy_process(data) as (proxy, proxy_url):
                gateway_url = f"{server.base}/mcp/desk"
                sides = asyncio.run(measure(args, gateway_url, persona["token"], server.pid, proxy.pid, proxy_url))
        recording = record_cost(persona, RECORDS)
    report(args, sides, recording, database, time.perf_counter() - started)


def record_cost(persona: dict[str, Any], count: int) -> tuple[float, float]:
    """What recording one passed call costs the console (`approvals.actions.external.record_passed_calls`, which the
    gateway runs on a thread after the client has its result, alone or with the calls that came meanwhile), timed
    here in process on the same database, one call a batch (the gateway's least busy case): the median wall and
    CPU milliseconds."""
    import uuid

    from django.db import connections
    from django.utils import timezone

    from agents.models import AgentVersion
    from approvals.actions.passed_calls import PassedCall, record_passed_calls

    version = AgentVersion.objects.select_related("agent", "agent__tenant").get(agent__name=GATEWAY["name"])
    result = {"content": [{"type": "text", "text": "pong"}], "structuredContent": {"result": "pong"}}
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(count):
        wall, cpu = time.perf_counter(), time.process_time()
        call: tuple[str, str, dict[str, Any]] = ("ping", f"mcp_{uuid.uuid4().hex}", {})
        passed = PassedCall(
            persona["membership"], version, "mcp-bench-record", call, (True, result, None), timezone.now()
        )
        record_passed_calls([passed])
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    connections.close_all()
    return median(walls) * 1000, median(cpus) * 1000


def report(
    args: argparse.Namespace, sides: list[Side], recording: tuple[float, float], database: str, seconds: float
) -> None:
    gateway, proxy, _ = sides
    calls = len(gateway.seconds)
    print("### The MCP gateway's auto-approved call against a plain MCP proxy (SPEC section 15)\n")
    print(
        f"`gateway_proxy.py --calls {args.calls} --blocks {args.blocks} --mode {args.mode}`: `ping` of the built-in "
        f"`meetings` server (stdio) through the console's gateway (one daphne as `manage.py serve` runs it, "
        f"{database}, Redis layer; approval `never`, no policies: the call passes through and its run is recorded "
        f"after) and through `mcp-proxy` {PROXY_VERSION} (its own environment, `.tools/mcp-proxy/`, mcp<2), each "
        f"by the `mcp` SDK's client in `{args.mode}` mode over one kept session, one call at a time, the two "
        f"alternating in {args.blocks} blocks after {WARM} warm-up calls each; the same client over stdio with no "
        f"HTTP for scale; {python_line()}; {seconds:.0f} s.\n"
    )
    print("| side | calls | p50 ms | p95 ms | p99 ms | CPU of the serving process per call ms |")
    print("|---|---|---|---|---|---|")
    for side in sides:
        cpu = f"{side.cpu / len(side.seconds) * 1000:.2f}" if side.pid else "—"
        values = side.seconds
        print(
            f"| {side.name} | {len(values)} | {median(values) * 1000:.2f} | {percentile(values, 95) * 1000:.2f} | "
            f"{percentile(values, 99) * 1000:.2f} | {cpu} |"
        )
    print(
        f"\nOf the gateway's CPU per call, recording the call's run after the client has its result "
        f"(`record_passed_calls`, one call a batch: the session, a run, four events; "
        f"timed alone in process, {RECORDS} times): "
        f"{recording[1]:.2f} ms CPU, {recording[0]:.2f} ms wall (medians)."
    )
    x50 = median(gateway.seconds) / median(proxy.seconds)
    x95 = percentile(gateway.seconds, 95) / percentile(proxy.seconds, 95)
    print(
        f"\nTarget: the gateway's auto-approved call at most {RATIO}x mcp-proxy's ({calls} calls a side) — p50 "
        f"{x50:.2f}x, p95 {x95:.2f}x: {verdict(x50 <= RATIO and x95 <= RATIO)}"
    )


if __name__ == "__main__":
    main()
