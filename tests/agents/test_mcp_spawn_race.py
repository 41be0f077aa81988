"""Stdio MCP servers started at the same moment by turns on different worker threads (each turns on an event loop of
its own, uvloop's) all start. uvloop spawns a process in one loop of the process at a time and refuses a second
loop's spawn meanwhile ("Racing with another loop to spawn a process"); console.loops makes its loops take turns."""

import sys
import threading

from agents.definition_items import McpServer
from agents.engine.mcp import McpBridge
from console.connections import ConnectionSpec
from console.loops import run_here

THREADS, ROUNDS = 4, 2
SERVER = McpServer.model_validate({"connection": "demo", "approval": "never"})
SPEC = ConnectionSpec(name="demo", kind="mcp", command=sys.executable, args=("-m", "agents.mcp_demo"))


async def _start(together: threading.Barrier) -> None:
    bridge = McpBridge(SERVER, SPEC)
    bridge.toolset()
    together.wait()  # every thread's spawn at once (this loop has nothing else to run meanwhile)
    try:
        await bridge.connect()
    finally:
        await bridge.close()


def _on_a_thread(together: threading.Barrier, failures: list[BaseException]) -> None:
    try:
        run_here(_start(together))
    except BaseException as error:  # what failed is the test's finding
        failures.append(error)


def test_servers_started_at_once_on_several_threads_all_start():
    failures: list[BaseException] = []
    for _ in range(ROUNDS):
        together = threading.Barrier(THREADS)
        threads = [
            threading.Thread(target=_on_a_thread, args=(together, failures), daemon=True) for _ in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not failures, failures
